"""The kfp lane: the real KFP backend, built from a kubeflow/pipelines checkout outside the repository."""
