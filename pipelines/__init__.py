"""bakeoff's pipeline definition and its command-line interface."""
