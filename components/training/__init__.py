"""Training one variant: its TFJob description, launching it on a backend, the replica program."""
