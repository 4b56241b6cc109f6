"""Models: architectures and optimizers (registries), the SavedModel contract and its evaluation."""
