"""Runs the pipeline on this machine with kfp.local; each TFJob's replicas become local processes."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

from components import defaults
from components.errors import ERROR_FILE_ENV, BakeoffError
from components.spec import Variant
from pipelines.pipeline import build_pipeline


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """Everything one local bake-off needs; the store is already checked."""

    variants: list[Variant]
    store_uri: str
    model_name: str = defaults.MODEL_NAME
    source: str = defaults.SOURCE
    source_digest: str = ""
    metric: str = defaults.METRIC
    min_improvement: float = defaults.MIN_IMPROVEMENT
    force_publish: bool = False
    max_train_examples: int = 0
    parallelism: int = defaults.LOCAL_PARALLELISM
    work_dir: Path = defaults.WORK_DIR
    timeout_seconds: int = defaults.TIMEOUT_SECONDS


def run_local(run: LocalRun) -> dict:
    """Executes the pipeline with kfp.local and returns the select step's summary.

    kfp.local prints task logs on stdout; they are sent to stderr so that
    stdout carries only bakeoff's own report.
    """
    from kfp import local

    pipeline_root = (run.work_dir / "pipeline-root").resolve()
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        enable_caching=True,
        cache_root=str(run.work_dir.resolve() / "cache"),
    )
    pipeline = build_pipeline(parallelism=run.parallelism, variants=[variant.to_dict() for variant in run.variants])
    with tempfile.TemporaryDirectory(prefix="bakeoff-run-") as scratch:
        error_file = Path(scratch) / "error"
        os.environ[ERROR_FILE_ENV] = str(error_file)
        try:
            with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
                # The image only matters on a cluster; locally the venv runs the code.
                warnings.filterwarnings("ignore", message=".*non-Python base image.*")
                task = pipeline(
                    store=run.store_uri,
                    variants=[variant.to_dict() for variant in run.variants],
                    model_name=run.model_name,
                    source=run.source,
                    source_digest=run.source_digest,
                    metric=run.metric,
                    min_improvement=run.min_improvement,
                    force_publish=run.force_publish,
                    max_train_examples=run.max_train_examples,
                    timeout_seconds=run.timeout_seconds,
                    backend="local",  # also inside a notebook pod: `run` means this machine
                )
        except RuntimeError as error:
            if error_file.exists():
                raise BakeoffError(error_file.read_text().strip()) from None
            plain = re.sub(r"\x1b\[[0-9;]*m", "", str(error))  # kfp colours its messages
            raise BakeoffError(f"the local pipeline failed ({plain}): see the task log above") from None
        finally:
            os.environ.pop(ERROR_FILE_ENV, None)
    return json.loads(task.output)
