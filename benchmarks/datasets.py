"""Benchmark entry: bake-offs of other datasets than the default, each beside its reference, and ingest's memory.

- Fashion-MNIST as its IDX files and as a folder of PNG files (the same images): the two winners' test accuracy
  should agree within noise; the folder's wall time is set beside the IDX files'.
- scikit-learn's bundled digits (1,797 8x8 images), resized to 32x32 and coloured, against scikit-learn's own SVC on
  the original pixels of the same train and test split, in the same run.
- a 64x64 RGB dataset of drawn shapes (6 classes, harder than the digits: any colour, size, place and turn, on a
  noisy background), bakeoff's built-in search for it in a 5-minute budget against a plain tf-keras residual network
  trained in one process for the same wall time, scored on the same test split.
- a transfer case (benchmarks/transfer.py): a backbone pretrained on five Fashion-MNIST classes, fine-tuned through
  ``weights: PATH`` on 40 images of each of the other five, against the same network from scratch.
- ingest's peak RSS and images/s on RGB class folders of 64x64 PNG files, at a size and at twice it
  (benchmarks/ingest_memory.py): the peak should stay under the train shard's size plus 300 MB at both.

Fashion-MNIST's bake-offs are `bakeoff run` of pipelines/quick.yaml (the first run's three CNNs, halved), the digits'
the search a user would write for 1,150 small images (``digits_search``), each in a fresh work dir.
``python -m benchmarks.datasets [--fashion-train N ...]`` runs it alone at any size (a smoke run at a tiny one);
``python -m benchmarks.run --only datasets`` runs it at ``FULL``, as it runs alone without flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bakeoff.components import logs
from bakeoff.components.storage.records import Summary
from benchmarks.harness import Context, Figure, add_size_flags, run_alone
from benchmarks.search import run_bakeoff
from benchmarks.transfer import TransferSize, transfer

QUICK = Path(__file__).resolve().parent.parent / "pipelines" / "quick.yaml"
DIGITS_SIDE = 32  # the digits' 8x8 resized to the issue's smallest RGB size
DIGITS_TEST_SHARE = 0.2  # of the digits, held out as the test split, stratified by class
SVC_GAMMA = 0.001  # scikit-learn's own digits example ("Recognizing hand-written digits")


@dataclasses.dataclass(frozen=True)
class Size:
    """How big the entry runs."""

    fashion_train: int = 60000  # Fashion-MNIST's first N training images, written both ways (all 60,000)
    fashion_test: int = 10000  # and its first N test images (all 10,000)
    max_train_examples: int = 20000  # per epoch of a Fashion-MNIST bake-off: README's first run (0: all)
    digits_max_epochs: int = 36  # the digits' halving, from a third of it: 1,150 images make 36 steps of an epoch
    shapes_per_class: int = 800  # training images of each of the 6 shapes (4,800, as issue 59's held-back dataset)
    shapes_test_per_class: int = 200
    shapes_side: int = 64
    shapes_budget_minutes: float = 5.0
    ingest_images: int = 20000  # the RGB folder ingest reads, then one twice its size
    ingest_side: int = 64
    seed: int = 0


FULL = Size()


def _bakeoff(
    where: Path, source: Path, max_train_examples: int, config: dict[str, Any] | None = None
) -> tuple[float, Summary]:
    """One `bakeoff run` of ``config`` (quick.yaml where None) on ``source`` in a fresh work dir and store: (wall
    seconds, its summary)."""
    config = (config or yaml.safe_load(QUICK.read_text())) | {"source": str(source)}
    path = where / f"{source.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return run_bakeoff(path, max_train_examples, where / f"run-{source.name}")


def digits_search(max_epochs: int) -> dict[str, Any]:
    """The digits' search: the seed's batch-norm CNN and a wider-topped one, halved from a third of ``max_epochs``.
    Written for 1,150 images, as a user would for so few: 16 a replica, so an epoch is 36 steps (at the default 64,
    9 steps, and quick.yaml's 27 epochs reached 0.9667–0.9778); shifts of up to 3 pixels (the 8x8 originals' pixel is
    4 of these wide) and no flips (a mirrored digit is another glyph). Idle AMD EPYC, seed 0's split, one run each:
    0.9944, 0.9889 (2026-12-07, benchmarks/journal.md)."""
    cnn = {"type": "cnn", "filters": [32, 64, 64], "batch_norm": True}
    training = {"batch_size": 16, "learning_rate": 0.002, "schedule": "cosine", "steps_per_execution": 8}
    return {
        "defaults": {"workers": 2, "training": training | {"random_shift": 3}},
        "variants": [
            {"name": "batch_norm", "model": cnn | {"dense_units": 64}},
            {"name": "wide_dense", "model": cnn | {"dense_units": 128, "dropout": 0.25}},
        ],
        "search": {"halving": {"min_epochs": max(1, max_epochs // 3), "max_epochs": max_epochs, "eta": 3}},
    }


def _winner(summary: Summary, seconds: float) -> str:
    return f"winner `{summary.winner.variant}` in {seconds / 60:.1f} min"


def fashion(where: Path, size: Size, samples: dict) -> list[Figure]:
    """Fashion-MNIST's IDX files and the same images as PNG files, each through the same bake-off."""
    from bakeoff.components import defaults
    from tests.images import write_fashion_subset

    idx, png = where / "fashion-idx", where / "fashion-png"
    write_fashion_subset(Path(defaults.SOURCE), idx, png, size.fashion_train, size.fashion_test)
    idx_seconds, idx_run = _bakeoff(where, idx, size.max_train_examples)
    png_seconds, png_run = _bakeoff(where, png, size.max_train_examples)
    idx_accuracy, png_accuracy = idx_run.winner.test_accuracy, png_run.winner.test_accuracy
    samples["fashion"] = {
        "idx": {"seconds": idx_seconds, "test_accuracy": idx_accuracy, "winner": idx_run.winner.variant},
        "png": {"seconds": png_seconds, "test_accuracy": png_accuracy, "winner": png_run.winner.variant},
    }
    images = f"{size.fashion_train:,} + {size.fashion_test:,} images"
    setting = f"quick.yaml, {size.max_train_examples or 'all'} training examples an epoch"
    return [
        Figure(
            "datasets_fashion_idx_test_accuracy",
            idx_accuracy,
            "",
            detail=f"Fashion-MNIST's IDX files ({images}), {setting}: {_winner(idx_run, idx_seconds)}",
        ),
        Figure(
            "datasets_fashion_png_test_accuracy",
            png_accuracy,
            "",
            detail=f"the same images as a folder of PNG files, the same bake-off: {_winner(png_run, png_seconds)}",
        ),
        Figure(
            "datasets_fashion_png_accuracy_gap",
            png_accuracy - idx_accuracy,
            "",
            detail="the PNG folder's winner's test accuracy − the IDX files': the same pixels, so only training's"
            f" noise ({size.fashion_test:,} test images)",
        ),
        Figure(
            "datasets_fashion_png_time_ratio",
            png_seconds / idx_seconds,
            "×",
            detail=f"the PNG folder's `bakeoff run` {png_seconds / 60:.1f} min ÷ the IDX files' {idx_seconds / 60:.1f}"
            f" min: decoding {size.fashion_train + size.fashion_test:,} files instead of four arrays",
        ),
    ]


def write_digits(root: Path, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``root/{train,test}/<digit>/<index>.png``: each image scaled to 0-255, resized to
    DIGITS_SIDE bilinearly and drawn in a colour chosen per image, not per class, so that colour tells nothing;
    returns the indices of the train and the test split (stratified, seeded)."""
    from PIL import Image
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]
    from sklearn.model_selection import train_test_split  # type: ignore[import-untyped]

    digits = load_digits()
    indices = np.arange(len(digits.target))
    train, test = train_test_split(
        indices, test_size=DIGITS_TEST_SHARE, stratify=digits.target, random_state=seed, shuffle=True
    )
    rng = np.random.default_rng(seed)
    for split, chosen in (("train", train), ("test", test)):
        for index in chosen:
            gray = Image.fromarray(np.round(digits.images[index] * (255 / 16)).astype(np.uint8))
            shade = np.asarray(gray.resize((DIGITS_SIDE, DIGITS_SIDE), Image.Resampling.BILINEAR), np.float32) / 255
            colour = rng.integers(64, 256, 3)
            folder = root / split / str(digits.target[index])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.round(shade[..., None] * colour).astype(np.uint8)).save(folder / f"{index:04d}.png")
    return train, test


def digits(where: Path, size: Size, samples: dict) -> list[Figure]:
    """The digits' bake-off beside scikit-learn's SVC, trained on the original 8x8 pixels of the same train split
    (bakeoff carves its validation from it; the SVC selects nothing) and scored on the same test split."""
    from sklearn import __version__ as sklearn_version  # type: ignore[import-untyped]
    from sklearn import svm
    from sklearn.datasets import load_digits

    folder = where / "digits"
    train, test = write_digits(folder, size.seed)
    data = load_digits()
    started = time.perf_counter()
    svc = svm.SVC(gamma=SVC_GAMMA).fit(data.data[train], data.target[train])
    svc_accuracy = float(np.mean(svc.predict(data.data[test]) == data.target[test]))
    svc_seconds = time.perf_counter() - started
    seconds, summary = _bakeoff(where, folder, 0, digits_search(size.digits_max_epochs))
    accuracy = summary.winner.test_accuracy
    samples["digits"] = {
        "bakeoff": {"seconds": seconds, "test_accuracy": accuracy, "winner": summary.winner.variant},
        "svc": {"seconds": svc_seconds, "test_accuracy": svc_accuracy},
        "split": {"train": len(train), "test": len(test)},
    }
    return [
        Figure(
            "datasets_digits_test_accuracy",
            accuracy,
            "",
            detail=f"scikit-learn's digits at {DIGITS_SIDE}x{DIGITS_SIDE} RGB, {len(train)} train / {len(test)} test,"
            f" digits_search's two batch-norm CNNs halved to {size.digits_max_epochs} epochs, batch 16, shifts of 3:"
            f" {_winner(summary, seconds)}",
        ),
        Figure(
            "datasets_digits_svc_test_accuracy",
            svc_accuracy,
            "",
            detail=f"scikit-learn {sklearn_version}'s SVC(gamma={SVC_GAMMA}) on the original 8x8 pixels of the same"
            f" split: fitted and scored in {svc_seconds:.2f} s",
        ),
        Figure(
            "datasets_digits_margin",
            accuracy - svc_accuracy,
            "",
            detail="bakeoff's winner's test accuracy − the SVC's, the same test images",
        ),
    ]


SHAPES = ("disc", "square", "triangle", "cross", "ring", "bar")
# The plain network the issue's author wrote: 3 residual stages 32-64-128, batch norm, global pooling, Adam at 2e-3,
# flips; one process, the whole machine.
PLAIN_RESNET = {
    "name": "plain",
    "model": {"type": "resnet", "stem_filters": 32, "stem_stride": 1, "filters": [32, 64, 128]},
    "training": {"learning_rate": 0.002, "random_flip": True},
}


def write_shapes(root: Path, per_class: int, test_per_class: int, side: int, seed: int) -> Path:
    """``root/{train,test}/<shape>/<n>.png``: each shape in a random colour, size, place and turn, on a background of
    another colour with noise, and a distracting blob; seeded."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("test", test_per_class)):
        for label, shape in enumerate(SHAPES):
            folder = root / split / shape
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                background = rng.integers(0, 256, 3)
                noise = rng.normal(0, 24, (side, side, 3))
                image = Image.fromarray(np.clip(background + noise, 0, 255).astype(np.uint8))
                draw = ImageDraw.Draw(image)
                blob = rng.integers(0, side, 2)
                draw.ellipse([*blob, *(blob + side // 10)], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
                _draw(draw, shape, side, rng)
                image.save(folder / f"{label}-{index:05d}.png")
    return root


def _draw(draw: Any, shape: str, side: int, rng: np.random.Generator) -> None:
    radius = side * rng.uniform(0.15, 0.32)
    x, y = rng.uniform(radius, side - radius, 2)
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    turn = rng.uniform(0, np.pi)
    box = [x - radius, y - radius, x + radius, y + radius]
    if shape == "disc":
        draw.ellipse(box, fill=colour)
    elif shape == "ring":
        draw.ellipse(box, outline=colour, width=max(2, int(radius / 3)))
    elif shape in ("square", "triangle"):
        corners = 4 if shape == "square" else 3
        angles = turn + np.arange(corners) * 2 * np.pi / corners
        draw.polygon([(x + radius * np.cos(a), y + radius * np.sin(a)) for a in angles], fill=colour)
    else:  # a cross is two bars
        for angle in (turn, turn + np.pi / 2) if shape == "cross" else (turn,):
            dx, dy = radius * np.cos(angle), radius * np.sin(angle)
            draw.line([(x - dx, y - dy), (x + dx, y + dy)], fill=colour, width=max(3, int(radius / 3)))


def shapes(where: Path, size: Size, samples: dict) -> list[Figure]:
    """The built-in search that fits the shapes (search_large.yaml), budgeted, against the plain residual network
    for the same wall time. Backbones read ImageNet weights only where they are cached (no download here)."""
    from bakeoff.components import defaults
    from bakeoff.components.data import artifact
    from bakeoff.components.search.builtin import builtin_search
    from bakeoff.components.search.costs import Images
    from bakeoff.components.storage import open_store

    folder = write_shapes(where / "shapes", size.shapes_per_class, size.shapes_test_per_class, size.shapes_side, 0)
    images = Images(size.shapes_per_class * len(SHAPES), (size.shapes_side, size.shapes_side, 3), len(SHAPES))
    chosen = builtin_search(images)
    config = yaml.safe_load(chosen.path.read_text()) | {"source": str(folder)}
    config["search"]["budget"] = {"minutes": size.shapes_budget_minutes}
    offline = not any((Path.home() / ".keras" / "models").glob("*no_top*"))
    for entry in config["variants"]:
        if offline and entry["model"].get("weights") == "imagenet":
            entry["model"]["weights"] = "none"
    path = where / "shapes.yaml"
    path.write_text(yaml.safe_dump(config))
    seconds, summary = run_bakeoff(path, 0, where / "run-shapes")
    data = where / "shapes-artifact"
    artifact.build(str(folder), data, validation_size=defaults.VALIDATION_SIZE // 10, shards=1, seed=0)
    train_examples = artifact.read_metadata(open_store(str(data))).counts["train"]
    plain = subprocess.run(
        [sys.executable, "-m", "benchmarks.plain_train", "--variant", json.dumps(PLAIN_RESNET), "--data", str(data),
         "--global-batch", "64", "--examples", str(train_examples), "--epochs", "1000", "--seconds", str(seconds)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    reference = json.loads(plain.stdout.splitlines()[-1])
    accuracy = summary.winner.test_accuracy
    weights = "random weights (no ImageNet file cached)" if offline else "ImageNet weights"
    samples["shapes"] = {"bakeoff": {"seconds": seconds, "test_accuracy": accuracy, "winner": summary.winner.variant},
                         "plain": reference, "search": chosen.path.name, "backbones": weights}  # fmt: skip
    return [
        Figure(
            "datasets_shapes_test_accuracy",
            accuracy,
            "",
            detail=f"{len(SHAPES)} drawn shapes at {size.shapes_side}x{size.shapes_side} RGB,"
            f" {images.examples} train / {len(SHAPES) * size.shapes_test_per_class} test: {chosen.path.name} in"
            f" {size.shapes_budget_minutes:g} min, backbones from {weights}: {_winner(summary, seconds)}",
        ),
        Figure(
            "datasets_shapes_plain_resnet_test_accuracy",
            reference["test_accuracy"],
            "",
            detail=f"a plain tf-keras residual network (32-64-128, batch norm, global pooling, Adam 2e-3, flips) in one"
            f" process for the same {seconds / 60:.1f} min: {reference['epochs']} epochs",
        ),
        Figure(
            "datasets_shapes_margin",
            accuracy - reference["test_accuracy"],
            "",
            detail="bakeoff's winner's test accuracy − the plain network's, the same test images (goal: ≥ 0)",
        ),
    ]


def ingest_memory(where: Path, size: Size, samples: dict) -> list[Figure]:
    """Ingest's peak RSS and images/s in a fresh process, on an RGB folder and on one twice its size."""
    from bakeoff.components import defaults
    from benchmarks import ingest_memory as memory

    measured = []
    for images in (size.ingest_images, 2 * size.ingest_images):
        root = memory.write_tree(where / f"rgb-{images}", images, size.ingest_side)
        measured.append(memory.measure(root, where / f"rgb-{images}-out", defaults.VALIDATION_SIZE, defaults.SHARDS))
    samples["ingest_memory"] = measured
    once, twice = measured
    shape = "x".join(map(str, once["image_shape"]))
    return [
        Figure(
            "datasets_ingest_images_per_second",
            once["images_per_second"],
            "images/s",
            detail=f"{once['images']:,} RGB PNG files of {shape} to {once['shards']} shards a split, in a fresh"
            f" process ({once['seconds']:.0f} s, imports included); {twice['images_per_second']:,} at"
            f" {twice['images']:,}",
        ),
        *(
            Figure(
                f"datasets_ingest_rss_over_shard_mb{suffix}",
                run["peak_rss_mb"] - run["train_shard_mb"],
                "MB",
                detail=f"ingest's peak RSS {run['peak_rss_mb']:.0f} MB on {run['images']:,} images − its train shard's"
                f" {run['train_shard_mb']:.0f} MB",
            )
            for suffix, run in (("", once), ("_2x", twice))
        ),
    ]


def datasets(context: Context, size: Size = FULL) -> list[Figure]:
    """Each dataset's winner test accuracy and wall time beside its reference; ingest's memory and speed."""
    work = context.scratch / "datasets"
    work.mkdir(parents=True)
    samples: dict = {"size": dataclasses.asdict(size)}
    context.samples["datasets"] = samples
    return [
        *fashion(work, size, samples),
        *digits(work, size, samples),
        *shapes(work, size, samples),
        *transfer(work / "transfer", TransferSize(), samples),
        *ingest_memory(work, size, samples),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, FULL)
    parser.add_argument("--scratch", type=Path, help="a new folder to keep every dataset, store and run log in")
    args = vars(parser.parse_args(argv))
    logs.configure()  # the components' lines, as `bakeoff` shows them
    scratch = args.pop("scratch")
    run_alone("datasets", lambda context: datasets(context, Size(**args)), scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
