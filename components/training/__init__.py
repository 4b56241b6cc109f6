"""Training one variant: its TFJob description, launching it on a backend, the replica program."""

# The replica program, run as `python -m`: named here so that naming it loads no Kubernetes client (tfjob.py does).
WORKER_PROGRAM = "bakeoff.components.training.worker"
