"""The calibration's replica program: times a job's start and each family's training step, as the worker trains.

``python -m bakeoff.components.search.probe DATA_URI STEPS ARCHITECTURE:BATCH... LAUNCHED`` (LAUNCHED: the
``time.time()`` its launcher started it at) prints one JSON line, its ProbeReport.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    data_uri, steps_text, *shapes, launched_text = argv
    steps, launched = int(steps_text), float(launched_text)
    # The worker's own pieces, TensorFlow with them: importing them is part of what a job's start costs.
    from bakeoff.components.data import artifact
    from bakeoff.components.modeling.savedmodel import export
    from bakeoff.components.search.calibration import ProbeReport, probe_variant
    from bakeoff.components.storage import open_store
    from bakeoff.components.training import worker

    strategy = worker.make_strategy()
    data = open_store(data_uri)
    metadata = artifact.read_metadata(data)
    step_seconds: list[float] = []
    start = 0.0
    for text in shapes:
        architecture, batch = text.split(":")
        variant = probe_variant(architecture, int(batch))
        shape = worker.epoch_shape(variant, strategy, metadata.counts["train"], 0)
        model = worker.compiled_model(variant, strategy, metadata, shape.steps_per_epoch)
        inputs = worker.distributed_inputs(variant, strategy, data, shape)
        # The worker's own rate: timed from the end of the first execution, which traces the step.
        throughput = worker.Throughput(shape.global_batch)
        first = variant.training.steps_per_execution
        model.fit(inputs, epochs=1, steps_per_epoch=first + steps, verbose=0, callbacks=[throughput])
        step_seconds.append(shape.global_batch / throughput.examples_per_second)
        if not start:  # a job's start: to the end of its first execution, less that execution's steps, plus saving
            traced = time.time() - (time.perf_counter() - throughput.started)
            began = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="bakeoff-probe-") as scratch:
                export(model, Path(scratch) / "model", metadata.class_names)
            start = traced - launched - first * step_seconds[0] + time.perf_counter() - began
    print(ProbeReport(start, step_seconds).to_json(indent=None), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
