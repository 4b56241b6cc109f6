"""The ingest step: any source in (components/data/sources), a sharded train/validation/test Dataset artifact out."""

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
    """A source in; train/validation/test shards and their metadata out (counts, classes, preprocessing, fingerprint).

    ``image_size`` [H, W] resizes every image as it is read; [] keeps the source's own size. ``source_digest``
    is unused here: it is in the signature so that KFP's cache key changes when the data at ``source`` changes.
    """
    from pathlib import Path

    from bakeoff.components.data import artifact
    from bakeoff.components.errors import reported

    with reported():
        metadata = artifact.build(source, Path(data.path), validation_size, shards, seed, image_size)
    for key in ("counts", "shards", "fingerprint", "class_names", "source", "image_shape"):  # shown in the KFP UI
        data.metadata[key] = getattr(metadata, key)
