"""The compiled pipeline package that the cluster commands send: a file kfp can read, and its IR."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def read_package(path: Path) -> dict:
    """The PipelineSpec document of a compiled package."""
    from bakeoff.pipelines.compiling import read_ir

    return read_ir(path.read_text(encoding="utf-8"))


@contextlib.contextmanager
def compiled(settings: Mapping[str, Any]) -> Iterator[tuple[Path, dict]]:
    """The pipeline compiled with the same settings as `bakeoff compile`, as a file kfp can send, and its IR."""
    import tempfile

    from bakeoff.pipelines.compiling import compile_pipeline

    with tempfile.TemporaryDirectory(prefix="bakeoff-package-") as scratch:
        package = compile_pipeline(Path(scratch) / "bakeoff.yaml", **settings)
        yield package, read_package(package)
