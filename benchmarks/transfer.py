"""The datasets entry's transfer case: a backbone trained on five Fashion-MNIST classes, fine-tuned through
``weights: PATH`` on the other five with few examples, against the same network from scratch for the same epochs.

``python -m benchmarks.transfer [--source-examples N ...]`` runs it alone at any size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import Figure

NETWORK = {"type": "backbone", "network": "MobileNetV3Small", "image_size": 32, "dropout": 0.2}


@dataclasses.dataclass(frozen=True)
class TransferSize:
    """How big the case runs."""

    source_examples: int = 20000  # of classes 0-4, to pretrain on
    source_epochs: int = 4
    target_per_class: int = 40  # training images of each of classes 5-9: the few examples
    target_epochs: int = 12
    freeze_epochs: int = 3


def pretrained(where: Path, size: TransferSize) -> Path:
    """The backbone trained in one process on Fashion-MNIST's classes 0-4, its weights saved as Keras saves
    ImageNet's (the file a user names in ``weights:``)."""
    import tf_keras as keras

    from bakeoff.components import defaults
    from bakeoff.components.data.fashion_mnist import read_idx_dir
    from bakeoff.components.modeling.architectures import ARCHITECTURES
    from bakeoff.components.modeling.backbone import BACKBONE
    from bakeoff.components.spec import from_dict

    train = read_idx_dir(Path(defaults.SOURCE))["train"]
    chosen = np.flatnonzero(train.labels < 5)[: size.source_examples]
    variant = from_dict({"name": "source", "model": {**NETWORK, "weights": "none"}})
    model = ARCHITECTURES["backbone"].build((28, 28, 1), 5, variant.model_config())
    model.compile(keras.optimizers.Adam(0.002), "sparse_categorical_crossentropy")
    images = train.images[chosen].astype(np.float32)[..., np.newaxis]
    model.fit(images, train.labels[chosen], batch_size=128, epochs=size.source_epochs, verbose=0)
    path = where / "fashion-0-4.h5"
    model.get_layer(BACKBONE).save_weights(str(path))
    return path


def target_artifact(where: Path, size: TransferSize) -> Path:
    """Classes 5-9 as an artifact: ``target_per_class`` training images each, 100 validation, their whole test split."""
    from bakeoff.components import defaults
    from bakeoff.components.data import artifact
    from bakeoff.components.data.fashion_mnist import Split, class_names, read_idx_dir

    original = read_idx_dir(Path(defaults.SOURCE))
    labels = original["train"].labels
    kept = [np.flatnonzero(labels == label) for label in range(5, 10)]
    train = np.concatenate([indices[: size.target_per_class] for indices in kept])
    validation = np.concatenate([indices[-20:] for indices in kept])
    test = np.flatnonzero(original["test"].labels >= 5)
    splits = {
        "train": Split(original["train"].images[train], labels[train] - 5),
        "validation": Split(original["train"].images[validation], labels[validation] - 5),
        "test": Split(original["test"].images[test], original["test"].labels[test] - 5),
    }
    out = where / "fashion-5-9"
    artifact.write(splits, out, 1, class_names()[5:], "Fashion-MNIST classes 5-9")
    return out


def fine_tuned(data: Path, store: Path, name: str, weights: str, size: TransferSize) -> dict[str, Any]:
    """One 1-worker job of the backbone variant on ``data``: its seconds and the test accuracy of its export."""
    from bakeoff.components.backends.local import LocalBackend
    from bakeoff.components.data import artifact
    from bakeoff.components.modeling import evaluation
    from bakeoff.components.spec import from_dict
    from bakeoff.components.storage import open_store, runs
    from bakeoff.components.training.tfjob import build_tfjob, worker_args

    freeze = size.freeze_epochs if weights != "none" else 0
    variant = from_dict(
        {
            "name": name,
            "model": {**NETWORK, "weights": weights, "freeze_epochs": freeze, "backbone_learning_rate": 0.3},
            "training": {"epochs": size.target_epochs, "batch_size": 25, "learning_rate": 0.002, "random_flip": True},
            "workers": 1,
        }
    )
    bucket = open_store(str(store))
    began = time.perf_counter()
    args = worker_args(variant, str(data), bucket.uri, f"transfer/{name}", 0)
    LocalBackend(sink=lambda line: None).run(build_tfjob(variant, name=name, image="local", args=args, env={}))
    seconds = time.perf_counter() - began
    model = bucket.get_dir(f"transfer/{name}/{runs.MODEL}", store.parent / f"{name}-model")
    test = artifact.read_shards(open_store(str(data)), "test")
    return {"seconds": seconds, "test_accuracy": evaluation.evaluate(model, test.images, test.labels)["accuracy"]}


def transfer(where: Path, size: TransferSize, samples: dict) -> list[Figure]:
    """The fine-tuned backbone against the same network from scratch, the same epochs (so about the same time)."""
    where.mkdir(parents=True, exist_ok=True)
    weights = pretrained(where, size)
    data = target_artifact(where, size)
    tuned = fine_tuned(data, where / "store", "transfer-tuned", str(weights), size)
    scratch = fine_tuned(data, where / "store", "transfer-scratch", "none", size)
    samples["transfer"] = {"size": dataclasses.asdict(size), "fine_tuned": tuned, "from_scratch": scratch}
    shown = f"{5 * size.target_per_class} images of Fashion-MNIST's classes 5-9, {size.target_epochs} epochs"
    return [
        Figure(
            "datasets_transfer_fine_tuned_test_accuracy",
            tuned["test_accuracy"],
            "",
            detail=f"MobileNetV3Small pretrained on {size.source_examples:,} images of classes 0-4, given as"
            f" `weights: PATH`, {size.freeze_epochs} frozen epochs, then fine-tuned: {shown}"
            f" ({tuned['seconds']:.0f} s)",
        ),
        Figure(
            "datasets_transfer_scratch_test_accuracy",
            scratch["test_accuracy"],
            "",
            detail=f"the same network from random weights: {shown} ({scratch['seconds']:.0f} s)",
        ),
        Figure(
            "datasets_transfer_margin",
            tuned["test_accuracy"] - scratch["test_accuracy"],
            "",
            detail="fine-tuned − from scratch, the same test images (goal: > 0)",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    import tempfile

    from bakeoff.components import logs
    from benchmarks.harness import add_size_flags

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, TransferSize())
    args = vars(parser.parse_args(argv))
    logs.configure()
    samples: dict = {}
    with tempfile.TemporaryDirectory(prefix="bakeoff-bench-transfer-") as scratch:
        for figure in transfer(Path(scratch), TransferSize(**args), samples):
            print(f"{figure.key} = {figure.value:.4g} {figure.unit}  ({figure.detail})")
    print(json.dumps(samples, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
