"""`bakeoff run` of one tiny variant on any source, to a published model; and that model loaded and asked as
`bakeoff serve` loads and answers it, in this process.

tests/test_rgb.py runs `bakeoff serve` and `bakeoff predict` over HTTP and shows that predict names the classes the
served version's label table holds. A test of another source then needs only that table and one answer here.
"""

from __future__ import annotations

import base64
from pathlib import Path

from bakeoff.components.modeling.savedmodel import BYTES_SIGNATURE
from bakeoff.components.serving.loaded import Version
from bakeoff.components.serving.model import load_version, run, v1_batch, v1_response
from bakeoff.components.storage import registry
from bakeoff.components.storage.records import Summary
from tests.test_cli import bakeoff

# Seconds, not minutes: one small network, one replica, one epoch of a few examples.
TINY = """
defaults: {workers: 1, training: {epochs: 1, batch_size: 8}}
variants:
  - {name: tiny, model: {type: mlp, hidden_units: [16]}}
"""


def run_to_published(source: str, where: Path, model_name: str) -> Version:
    """`bakeoff run --source SOURCE` of TINY in ``where``, which must publish version 1 of ``model_name`` in a store
    there; that version as `bakeoff serve` loads it."""
    where.mkdir(parents=True, exist_ok=True)
    config, store = where / "tiny.yaml", where / "store"
    config.write_text(TINY)
    result = bakeoff(
        "run",
        *("--config", str(config), "--source", source, "--store", str(store), "--model-name", model_name, "--json"),
        cwd=where,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = Summary.from_json(result.stdout, "run --json")
    assert summary.winner.version == 1, summary.promotion.message
    return load_version(store / registry.model_prefix(model_name) / "1", 1)


def predict(version: Version, image: Path) -> dict:
    """The served answer to `bakeoff predict IMAGE` (its request: the file as base64 for the bytes signature): one
    {class_id, class_name, probabilities}."""
    body = {"signature_name": BYTES_SIGNATURE, "instances": [{"b64": base64.b64encode(image.read_bytes()).decode()}]}
    return v1_response(run(v1_batch(body, version)), version.number)["predictions"][0]
