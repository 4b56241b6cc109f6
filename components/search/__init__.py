"""Hyperparameter search: spaces in a variant's fields, successive halving over rungs, and the plan's cost."""
