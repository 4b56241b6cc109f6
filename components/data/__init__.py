"""The dataset: a source (a class-folder tree, an S3 prefix, a TFDS builder, Fashion-MNIST's IDX files) inspected,
split, shard by shard written and fingerprinted as a Dataset artifact, and read back per worker."""
