"""``tfds:NAME[:VERSION]@DATA_DIR``: a small TFDS builder prepared by the test into a data dir, read by name, with no
network; and the ways a TFDS name can be wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bakeoff.components.data import artifact
from bakeoff.components.data.sources import digest
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import open_store
from tests.images import RGB_CLASSES, rgb_image
from tests.published import predict, run_to_published

pytestmark = pytest.mark.unit

TRAIN, TEST = 24, 9


def _builders() -> tuple[type, type, type]:
    """Three builders, defined once per process (TFDS registers a builder class by its name)."""
    import tensorflow_datasets as tfds

    class BakeoffShapes(tfds.core.GeneratorBasedBuilder):
        """Drawn circles, squares and stripes: an RGB image-classification builder with train and test."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> tfds.core.DatasetInfo:
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        "picture": tfds.features.Image(shape=(16, 16, 3)),
                        "kind": tfds.features.ClassLabel(names=RGB_CLASSES),
                    }
                ),
                supervised_keys=("picture", "kind"),
            )

        def _split_generators(self, dl_manager: object) -> dict:
            return {"train": self._generate_examples(TRAIN, 0), "test": self._generate_examples(TEST, 1)}

        def _generate_examples(self, count: int, seed: int):
            rng = np.random.default_rng(seed)
            for index in range(count):
                yield index, {"picture": rgb_image(index % 3, 16, rng), "kind": index % 3}

    class BakeoffTextOnly(tfds.core.GeneratorBasedBuilder):
        """No image feature: not an image-classification dataset."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> tfds.core.DatasetInfo:
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {"text": tfds.features.Text(), "label": tfds.features.ClassLabel(num_classes=2)}
                ),
            )

        def _split_generators(self, dl_manager: object) -> dict:
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            yield 0, {"text": "a", "label": 0}

    class BakeoffTestOnly(BakeoffShapes):
        """Only a test split: nothing to train on."""

        def _split_generators(self, dl_manager: object) -> dict:
            return {"test": self._generate_examples(TEST, 1)}

    return BakeoffShapes, BakeoffTextOnly, BakeoffTestOnly


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tfds")
    for builder in _builders():
        builder(data_dir=str(folder)).download_and_prepare()
    return folder


def test_a_prepared_builder_is_read_by_name_with_its_classes_and_splits(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    metadata = artifact.build(f"tfds:bakeoff_shapes@{data_dir}", out, 6, 2, 0, (), lambda line: None)
    assert metadata.class_names == list(RGB_CLASSES) and metadata.image_shape == [16, 16, 3]
    assert metadata.counts == {"train": TRAIN - 6, "validation": 6, "test": TEST}
    assert metadata.class_counts["validation"] == [2, 2, 2]
    assert metadata.split_origins["test"] == "the source's own"
    test = artifact.read_shards(open_store(str(out)), "test")
    rng = np.random.default_rng(1)
    drawn = {(index % 3, rgb_image(index % 3, 16, rng).tobytes()) for index in range(TEST)}
    assert {(int(label), image.tobytes()) for image, label in zip(test.images, test.labels, strict=True)} == drawn


def test_a_version_is_named_and_the_digest_follows_the_prepared_files(data_dir: Path, tmp_path: Path) -> None:
    named = artifact.build(f"tfds:bakeoff_shapes:1.0.0@{data_dir}", tmp_path / "out", 6, 1, 0, (), lambda line: None)
    assert named.counts["train"] == TRAIN - 6
    first = digest(f"tfds:bakeoff_shapes@{data_dir}")
    assert first == digest(f"tfds:bakeoff_shapes:1.0.0@{data_dir}")
    record = next((data_dir / "bakeoff_shapes" / "1.0.0").glob("*train.tfrecord*"))
    record.write_bytes(record.read_bytes() + b"\0")
    assert digest(f"tfds:bakeoff_shapes@{data_dir}") != first


@pytest.mark.training
def test_bakeoff_run_on_a_prepared_builder_publishes_a_model_that_names_its_classes(
    data_dir: Path, tmp_path: Path
) -> None:
    """`bakeoff run --source tfds:NAME@DIR` to a published model, whose served answers carry the builder's
    ClassLabel names."""
    version = run_to_published(f"tfds:bakeoff_shapes@{data_dir}", tmp_path, "shapes")
    assert version.class_names == list(RGB_CLASSES) and version.image_shape == (16, 16, 3)
    image = tmp_path / "square.png"
    Image.fromarray(rgb_image(1, 16, np.random.default_rng(5))).save(image)
    answer = predict(version, image)
    assert answer["class_name"] == RGB_CLASSES[answer["class_id"]] and len(answer["probabilities"]) == 3


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("tfds:no_such_dataset_here@{dir}", r"^tfds:no_such_dataset_here@.*: no TFDS dataset 'no_such_dataset_here'"),
        ("tfds:bakeoff_shapes:9.9.9@{dir}", r"no TFDS dataset 'bakeoff_shapes:9\.9\.9'"),
        (
            "tfds:bakeoff_text_only@{dir}",
            r"not an image-classification dataset: it has no one Image and one ClassLabel",
        ),
        ("tfds:bakeoff_test_only@{dir}", r"has no 'train' split \(it has test\): choose a dataset with one"),
        ("tfds:@{dir}", r"names no dataset: write tfds:NAME\[:VERSION\]\[@DATA_DIR\]"),
    ],
)
def test_a_bad_tfds_source_is_refused_in_one_line(source: str, message: str, data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(BakeoffError, match=message) as raised:
        artifact.build(source.format(dir=data_dir), out, 6, 1, 0, (), lambda line: None)
    assert "\n" not in str(raised.value) and not out.exists()
