"""The KFP step functions: each a thin wrapper that calls into the packages below it."""
