"""Ingest from every kind of source: class folders (local and pre-split), Fashion-MNIST's IDX files, a TFDS builder
prepared in a data dir; their listing, streaming, fingerprints, and every bad input refused in one line."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bakeoff.components.data import artifact
from bakeoff.components.data.preprocess import decode, prepare
from bakeoff.components.data.sources import digest
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import open_store
from bakeoff.components.storage.records import Preprocessing
from tests.images import RGB_CLASSES, write_fashion_subset, write_rgb_folder

pytestmark = pytest.mark.unit


def build(source: Path | str, out: Path, **options: object) -> artifact.DatasetMetadata:
    settings: dict = {"validation_size": 3, "shards": 2, "seed": 0, "image_size": (), "log": lambda line: None}
    return artifact.build(str(source), out, **(settings | options))


def shards(out: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    data = artifact.read_shards(open_store(str(out)), split)
    return data.images, data.labels


@pytest.fixture(scope="module")
def rgb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rgb_folder(tmp_path_factory.mktemp("rgb") / "images", per_class=12, size=32)


def test_fashion_mnist_as_png_files_gives_the_same_arrays_as_its_idx_files(fashion_dir: Path, tmp_path: Path) -> None:
    """The same 900 images and labels as IDX files and as train/<label>/<n>.png, test/...: byte-identical shards."""
    write_fashion_subset(fashion_dir, tmp_path / "idx", tmp_path / "png", train=700, test=200)
    from_idx = build(tmp_path / "idx", tmp_path / "a", validation_size=100, shards=3)
    from_png = build(tmp_path / "png", tmp_path / "b", validation_size=100, shards=3)
    assert from_idx.fingerprint == from_png.fingerprint
    assert from_idx.counts == from_png.counts == {"train": 600, "validation": 100, "test": 200}
    assert from_idx.class_counts == from_png.class_counts and from_idx.image_shape == [28, 28, 1]
    for split in ("train", "validation", "test"):
        for index in range(3):
            name = artifact.shard_name(split, index, 3)
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_an_rgb_class_folder_tree_becomes_shards_of_its_images_with_its_classes(rgb: Path, tmp_path: Path) -> None:
    metadata = build(rgb, tmp_path / "out", shards=2)
    assert metadata.class_names == list(RGB_CLASSES) and metadata.image_shape == [32, 32, 3]
    assert metadata.counts == {"train": 30, "validation": 3, "test": 3}
    # stratified: each class keeps its third of the carved splits
    assert metadata.class_counts == {"train": [10, 10, 10], "validation": [1, 1, 1], "test": [1, 1, 1]}
    assert metadata.preprocessing == Preprocessing(32, 32, 3, "none")
    assert "carved from train, stratified by class, seed 0" in metadata.split_origins["validation"]
    files = {
        (label, decode(path.read_bytes(), path.name).tobytes())
        for label, name in enumerate(RGB_CLASSES)
        for path in (rgb / name).iterdir()
    }
    written = set()
    for split in ("train", "validation", "test"):
        images, labels = shards(tmp_path / "out", split)
        assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3)
        written |= {(int(label), image.tobytes()) for image, label in zip(images, labels, strict=True)}
    assert written == files  # every image once, with its class
    with np.load(tmp_path / "out" / artifact.shard_name("train", 0, 2)) as first:
        assert set(first["labels"]) == {0, 1, 2}, "each shard mixes the classes"


def test_the_same_seed_gives_the_same_artifact_and_another_a_different_split(rgb: Path, tmp_path: Path) -> None:
    once, again = build(rgb, tmp_path / "a"), build(rgb, tmp_path / "b")
    assert once.fingerprint == again.fingerprint
    assert build(rgb, tmp_path / "c", seed=1).fingerprint != once.fingerprint


def test_a_declared_image_size_resizes_each_image_as_ingest_reads_it(rgb: Path, tmp_path: Path) -> None:
    metadata = build(rgb, tmp_path / "out", image_size=[16, 24], validation_size=2)
    assert metadata.image_shape == [16, 24, 3] and metadata.preprocessing == Preprocessing(16, 24, 3, "bilinear")
    images, _ = shards(tmp_path / "out", "train")
    expected = {
        prepare(decode(path.read_bytes(), path.name), metadata.preprocessing).tobytes() for path in rgb.glob("*/*.png")
    }
    assert images.shape[1:] == (16, 24, 3) and {image.tobytes() for image in images} <= expected


def test_a_folder_already_split_keeps_its_splits(tmp_path: Path) -> None:
    root = write_rgb_folder(tmp_path / "split", per_class=4, size=8, splits=("train", "validation", "test"))
    metadata = build(root, tmp_path / "out", validation_size=1000)  # no split is carved: the size is not used
    assert metadata.counts == {"train": 12, "validation": 12, "test": 12}
    assert set(metadata.split_origins.values()) == {"the source's own"}


def test_a_folder_with_train_only_carves_validation_and_test(tmp_path: Path) -> None:
    root = write_rgb_folder(tmp_path / "split", per_class=5, size=8, splits=("train", "test"))
    metadata = build(root, tmp_path / "out", validation_size=3)
    assert metadata.counts == {"train": 12, "validation": 3, "test": 15}
    assert metadata.split_origins["test"] == "the source's own"


def test_files_that_are_not_images_are_skipped_counted_and_named(rgb: Path, tmp_path: Path) -> None:
    root = write_rgb_folder(tmp_path / "images", per_class=4, size=8)
    (root / "README.txt").write_text("about")
    (root / "circle" / "notes.csv").write_text("a,b")
    lines: list[str] = []
    metadata = build(root, tmp_path / "out", log=lines.append)
    assert metadata.skipped.count == 2 and metadata.skipped.names == ["README.txt", "circle/notes.csv"]
    assert any("skipped 2 files that are not images: README.txt, circle/notes.csv" in line for line in lines)
    assert sum(metadata.counts.values()) == 12


def test_ingest_logs_its_progress_out_of_the_total(rgb: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    build(rgb, tmp_path / "out", log=lines.append)
    progress = [line for line in lines if "images read and written" in line]
    assert len(progress) >= 5 and progress[-1].startswith("ingest: 36/36 images read and written")


def test_a_mixed_size_folder_is_refused_naming_two_sizes_unless_an_image_size_is_declared(tmp_path: Path) -> None:
    root = write_rgb_folder(tmp_path / "images", per_class=3, size=8)
    Image.fromarray(np.zeros((10, 12, 3), np.uint8)).save(root / "square" / "wide.png")
    with pytest.raises(
        BakeoffError, match=r"holds images of different sizes: (8x8 \(.*\) and 10x12|10x12 \(.*\) and 8x8)"
    ):
        build(root, tmp_path / "out", validation_size=1)
    assert not list((tmp_path / "out").iterdir()), "nothing half-written"
    assert build(root, tmp_path / "out", validation_size=1, image_size=[8, 8]).image_shape == [8, 8, 3]


def test_the_content_digest_follows_the_bytes_not_the_times(tmp_path: Path) -> None:
    root = write_rgb_folder(tmp_path / "images", per_class=2, size=8)
    first = digest(str(root))
    path = root / "circle" / "00000.png"
    os.utime(path, (1, 1))
    assert digest(str(root)) == first, "a touched file is the same data"
    pixels = np.asarray(Image.open(path)).copy()
    pixels[0, 0, 0] ^= 1
    Image.fromarray(pixels).save(path)
    assert digest(str(root)) != first, "one changed pixel is new data"


def test_the_idx_digest_is_the_one_the_cli_has_always_cached_on(fashion_dir: Path) -> None:
    from bakeoff.components.data import fashion_mnist

    assert digest(str(fashion_dir)) == fashion_mnist.digest(str(fashion_dir))


def _png(size: tuple[int, int] = (8, 8)) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((*size, 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


BAD_FOLDERS: dict[str, tuple[dict[str, bytes], str]] = {
    "empty": ({}, r"holds no images in class folders: put each class's .* files in "),
    "single class": ({"cat/a.png": _png(), "cat/b.png": _png()}, r"holds one class \('cat'\): a classifier needs"),
    "class without images": (
        {"cat/a.png": _png(), "dog/a.png": _png(), "owl/a.txt": b"x"},
        r"/owl holds no images: put its .* files there or remove the folder",
    ),
    "corrupt image": (
        {"cat/a.png": _png(), "cat/b.png": _png(), "dog/a.png": _png(), "dog/bad.png": b"\x89PNG broken"},
        r"/dog/bad\.png: not a readable image .*: replace or remove the file",
    ),
    "bad class name": ({"cat/a.png": _png(), "d:g/a.png": _png()}, r"class folder 'd:g' cannot be a folder name"),
    "splits without train": ({"test/cat/a.png": _png(), "test/dog/a.png": _png()}, r"has test/ but no train/"),
    "too little to carve": ({"cat/a.png": _png(), "dog/a.png": _png()}, r"validation size 2 must be between 1 and 1"),
}


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_a_bad_folder_is_refused_in_one_line_and_nothing_is_written(case: str, tmp_path: Path) -> None:
    files, message = BAD_FOLDERS[case]
    root = _tree(tmp_path / "images", files)
    root.mkdir(exist_ok=True)
    out = tmp_path / "out"
    with pytest.raises(BakeoffError, match=message) as raised:
        build(root, out, validation_size=1)
    assert "\n" not in str(raised.value)
    assert not out.exists() or not list(out.iterdir()), "nothing half-written"


def test_an_empty_class_folder_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "images", {"cat/a.png": _png(), "cat/b.png": _png(), "dog/a.png": _png()})
    (root / "owl").mkdir()
    with pytest.raises(BakeoffError, match=r"images/owl holds no images"):
        build(root, tmp_path / "out", validation_size=1)


@pytest.mark.parametrize("size", [[3, 3], [2000, 32], [32], [32, 32, 3], [32.5, 32], ["32", 32]])
def test_an_image_size_out_of_range_is_refused_before_anything_is_read(size: list, tmp_path: Path) -> None:
    with pytest.raises(BakeoffError, match=r"^image_size .* is out of range: give \[height, width\], each 4 to 1024"):
        build(tmp_path / "nowhere", tmp_path / "out", image_size=size)


def test_a_source_that_is_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BakeoffError, match=r"is not a folder, an s3:// prefix or tfds:NAME"):
        build(tmp_path / "nowhere", tmp_path / "out")


def test_ingest_writes_metadata_a_reader_reads_back(rgb: Path, tmp_path: Path) -> None:
    metadata = build(rgb, tmp_path / "out")
    assert artifact.read_metadata(open_store(str(tmp_path / "out"))) == metadata
    assert json.loads((tmp_path / "out" / "metadata.json").read_text())["schema_version"] == 2


def test_a_small_folder_gives_each_carved_split_at_most_a_fifth_of_train_and_says_so(tmp_path: Path) -> None:
    """A folder of 150 images is not refused for the default validation size of 5,000: each split it lacks takes a
    fifth of train (30 images), stratified, and the metadata says why it is less than asked."""
    root = write_rgb_folder(tmp_path / "small", per_class=50, size=8)
    metadata = build(root, tmp_path / "out", validation_size=5000)
    assert (metadata.counts["validation"], metadata.counts["test"]) == (30, 30)
    assert metadata.counts["train"] == 90
    assert "20% of train's 150, less than validation_size" in metadata.split_origins["validation"]
