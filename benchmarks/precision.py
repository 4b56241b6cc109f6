"""The ``precision`` entry: each family's training step at float32 and at mixed bfloat16, side by side in one run,
and the test accuracy each reached at the same epochs."""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.harness import GLOBAL_BATCH, Context, Figure, local_job, median

# One network per family, each at its own default dataset's size (Fashion-MNIST, 28x28x1).
FAMILIES: dict[str, dict[str, Any]] = {
    "cnn": {"type": "cnn", "filters": [32, 64, 128], "dense_units": 256, "batch_norm": True},
    "resnet": {"type": "resnet", "stem_filters": 16, "filters": [32, 64, 128], "dropout": 0.2},
    "backbone": {"type": "backbone", "network": "MobileNetV3Small", "weights": "none", "image_size": 32},
}
PRECISIONS = ("float32", "mixed_bfloat16")


@dataclasses.dataclass(frozen=True)
class Size:
    """How much each job trains: its examples per epoch and its epochs (the same for both precisions)."""

    examples: int = 16384
    epochs: int = 2


def precision(context: Context, size: Size = Size()) -> list[Figure]:
    """For each family: float32 and bfloat16 jobs interleaved (a noisy minute hits both), one worker each; the step
    ratio bf16/fp32 (below 1: bfloat16 faster) and each precision's test accuracy."""
    from bakeoff.components.data import artifact
    from bakeoff.components.modeling import evaluation
    from bakeoff.components.storage import open_store

    test = artifact.read_shards(open_store(str(context.dataset())), "test")
    figures = []
    for family, model in FAMILIES.items():
        steps: dict[str, list[float]] = {name: [] for name in PRECISIONS}
        accuracy: dict[str, list[float]] = {name: [] for name in PRECISIONS}
        for _ in range(context.repetitions):
            for name in PRECISIONS:
                variant = {"name": f"{family}-{name}", "model": model, "training": {"precision": name}}
                job = local_job(context, variant, 1, size.examples, size.epochs, tag=f"precision-{family}-{name}")
                assert job.metrics.precision == name, job.metrics.precision
                steps[name].append(GLOBAL_BATCH / job.metrics.examples_per_second)
                model_dir = open_store(job.store).get_dir(f"{job.prefix}/model", context.scratch / job.prefix)
                accuracy[name].append(evaluation.evaluate(model_dir, test.images, test.labels)["accuracy"])
        context.samples[f"precision_{family}"] = {"step_seconds": steps, "test_accuracy": accuracy}
        fp32, bf16 = (median(steps[name]) for name in PRECISIONS)
        shown = f"1 worker, batch {GLOBAL_BATCH}, {size.epochs} epochs of {size.examples:,}"
        figures += [
            Figure(
                f"precision_{family}_bf16_step_ratio",
                bf16 / fp32,
                "×",
                detail=f"{family}: a mixed_bfloat16 step ÷ a float32 step ({bf16 * 1000:.1f} ms vs"
                f" {fp32 * 1000:.1f} ms; {shown}; median of {context.repetitions} interleaved pairs)",
            ),
            *(
                Figure(
                    f"precision_{family}_{name}_test_accuracy",
                    median(accuracy[name]),
                    "",
                    detail=f"{family} at {name}: test accuracy after the same epochs ({shown})",
                )
                for name in PRECISIONS
            ),
        ]
    return figures
