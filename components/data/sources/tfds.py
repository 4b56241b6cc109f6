"""A TFDS image-classification builder as a source: ``tfds:NAME[:VERSION][@DATA_DIR]``.

Its image and label features come from the builder's ``supervised_keys`` (else its one Image and one ClassLabel
feature), the class names from that ClassLabel, the splits from the builder's own train/validation/test. It is read
from DATA_DIR (TFDS's own default without one); a builder not prepared there is downloaded where the network
allows. Images are read still encoded and decoded by components/data/preprocess.py, as every other source's are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.components.data.preprocess import decode
from bakeoff.components.data.sources import SPLITS, TFDS_PREFIX, Listing
from bakeoff.components.errors import BakeoffError

LABEL_BATCH = 4096  # labels read per batch in the listing's pass (images left encoded: cheap)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class TfdsSource:
    def __init__(self, text: str, shown: str | None = None) -> None:
        self.text = shown or text
        spec, _, data_dir = text[len(TFDS_PREFIX) :].partition("@")
        self.name, _, self.version = spec.partition(":")
        self.data_dir = data_dir or None
        if not self.name:
            raise BakeoffError(f"source {text!r} names no dataset: write tfds:NAME[:VERSION][@DATA_DIR]")
        self._builder: Any = None
        self._keys: tuple[str, str] | None = None

    def builder(self, prepare: bool = True) -> Any:
        """The builder, prepared; one line for an unknown name or one that is neither prepared nor downloadable."""
        if self._builder is not None:
            return self._builder
        import tensorflow_datasets as tfds

        named = f"{self.name}:{self.version}" if self.version else self.name
        try:
            builder = tfds.builder(named, data_dir=self.data_dir)
        except Exception as error:  # DatasetNotFoundError and its kin: the name, the version or the files
            where = f" in {self.data_dir}" if self.data_dir else ""
            raise BakeoffError(
                f"{self.text}: no TFDS dataset {named!r}{where} ({_first_line(error)}): check the name and version, "
                "and the data dir it was prepared in"
            ) from None
        if prepare and not builder.is_prepared():
            try:
                builder.download_and_prepare()
            except Exception as error:
                raise BakeoffError(
                    f"{self.text}: not prepared in {builder.data_dir} and its download failed ({_first_line(error)}):"
                    f" prepare it there (tfds build {self.name} --data_dir DIR) where the network allows"
                ) from None
        self._builder = builder
        return builder

    def keys(self) -> tuple[str, str]:
        """The image feature's and the label feature's names."""
        if self._keys is None:
            import tensorflow_datasets as tfds

            info = self.builder().info
            features = info.features
            supervised = info.supervised_keys
            if supervised and len(supervised) == 2 and all(isinstance(key, str) for key in supervised):
                image, label = supervised
            else:
                images = [key for key, feature in features.items() if isinstance(feature, tfds.features.Image)]
                labels = [key for key, feature in features.items() if isinstance(feature, tfds.features.ClassLabel)]
                image, label = (images[0], labels[0]) if len(images) == 1 and len(labels) == 1 else ("", "")
            if not (
                image in list(features.keys())  # a FeaturesDict has no `in` of its own
                and label in list(features.keys())
                and isinstance(features[image], tfds.features.Image)
                and isinstance(features[label], tfds.features.ClassLabel)
            ):
                raise BakeoffError(
                    f"{self.text}: not an image-classification dataset:"
                    f" it has no one Image and one ClassLabel feature (features: {', '.join(features.keys())}):"
                    " choose another dataset"
                )
            self._keys = (image, label)
        return self._keys

    def _dataset(self, split: str) -> Any:
        import tensorflow_datasets as tfds

        image, _ = self.keys()
        return self.builder().as_dataset(split=split, shuffle_files=False, decoders={image: tfds.decode.SkipDecoding()})

    def listing(self) -> Listing:
        import tensorflow_datasets as tfds

        builder = self.builder()
        _, label = self.keys()
        found = list(builder.info.splits.keys())
        if "train" not in found:
            raise BakeoffError(
                f"{self.text}: has no 'train' split (it has {', '.join(found) or 'none'}): choose a dataset with one"
            )
        splits = {}
        for split in (name for name in SPLITS if name in found):
            batches = tfds.as_numpy(self._dataset(split).map(lambda example: example[label]).batch(LABEL_BATCH))
            splits[split] = np.concatenate([np.zeros(0, np.int64), *(batch.astype(np.int64) for batch in batches)])
        names = list(builder.info.features[label].names)
        # Shuffled once by TFDS when it was prepared: read in its own order, from its files, without a shuffle.
        return Listing(names, splits, [], any_order=False)

    def images(self, split: str, order: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
        import tensorflow_datasets as tfds

        image, _ = self.keys()
        if not np.array_equal(np.asarray(order), np.arange(len(order))):
            raise ValueError("a TFDS source streams in its own order only")
        for index, example in enumerate(tfds.as_numpy(self._dataset(split))):
            if index >= len(order):
                break
            name = f"{self.text} {split}[{index}]"
            yield name, decode(example[image], name)

    def digest(self) -> str:
        """The name, version and every prepared file's bytes; a builder not prepared yet stands for its version."""
        builder = self.builder(prepare=False)
        hashed = hashlib.sha256(f"{builder.name}:{builder.info.version}\0".encode())
        folder = Path(str(builder.data_dir))
        if builder.is_prepared():
            for path in sorted(path for path in folder.rglob("*") if path.is_file()):
                hashed.update(path.relative_to(folder).as_posix().encode() + b"\0")
                with open(path, "rb") as file:
                    hashed.update(hashlib.file_digest(file, "sha256").digest())
        return hashed.hexdigest()
