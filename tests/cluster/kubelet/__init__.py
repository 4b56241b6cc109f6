"""The process kubelet: a Node of the real control plane whose pods run as local processes (`python -m
tests.cluster.kubelet`)."""
