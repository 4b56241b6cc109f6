"""The ingest component: Fashion-MNIST in, a sharded train/validation/test Dataset artifact out."""
from kfp import dsl


def ingest(
    data: dsl.Output[dsl.Dataset],
    source: str = "/usr/share/datasets/fashion-mnist",
    validation_size: int = 5000,
    shards: int = 8,
    seed: int = 0,
):
    """Fashion-MNIST → train/validation/test shards + metadata (counts, classes, fingerprint)."""
    from pathlib import Path

    from components import dataset
    from components.errors import reported

    with reported():
        metadata = dataset.build(source, Path(data.path), validation_size, shards, seed)
    for key in ("counts", "shards", "fingerprint", "class_names", "source"):
        data.metadata[key] = metadata[key]
