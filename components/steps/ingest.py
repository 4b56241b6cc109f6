"""The ingest step: Fashion-MNIST in, a sharded train/validation/test Dataset artifact out."""

from kfp import dsl


def ingest(
    data: dsl.Output[dsl.Dataset],
    source: str,
    source_digest: str,
    image_size: list,
    validation_size: int,
    shards: int,
    seed: int,
) -> None:
    """Fashion-MNIST → train/validation/test shards + metadata (counts, classes, fingerprint).

    ``source_digest`` is unused here: it is in the signature so that KFP's
    cache key changes when the files at ``source`` change.
    """
    from pathlib import Path

    from bakeoff.components.data import artifact
    from bakeoff.components.errors import reported

    with reported():
        metadata = artifact.build(source, Path(data.path), validation_size, shards, seed)
    for key in ("counts", "shards", "fingerprint", "class_names", "source"):  # shown in the KFP UI
        data.metadata[key] = getattr(metadata, key)
