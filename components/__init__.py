"""bakeoff's KFP components and the code each of them runs."""
