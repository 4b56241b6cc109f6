"""Fashion-MNIST: read from its source, split, shard and fingerprint as a Dataset artifact."""
