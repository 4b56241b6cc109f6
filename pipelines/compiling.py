"""Compiling the pipeline to KFP IR YAML for a cluster (the file the UI's "Upload pipeline" takes)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from components import defaults
from components.spec import load_variants
from pipelines.pipeline import Cluster, build_pipeline

COMPILED = Path(__file__).resolve().parent / "bakeoff.yaml"


def compile_pipeline(
    output: Path,
    config: Path = defaults.CONFIG,
    image: str = defaults.IMAGE,
    parallelism: int = defaults.CLUSTER_PARALLELISM,
    cluster: Cluster = Cluster(),
) -> Path:
    """Writes the IR YAML of the pipeline built for ``cluster``; the config's variants become the default."""
    from kfp import compiler

    variants = [variant.to_dict() for variant in load_variants(config)]
    pipeline = build_pipeline(parallelism=parallelism, variants=variants, image=image, cluster=cluster)
    compiler.Compiler().compile(pipeline, str(output))
    return output


def compiled_text(**settings) -> str:
    """The IR YAML as text, for commands that upload or submit without writing a file."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-compile-") as scratch:
        return compile_pipeline(Path(scratch) / "bakeoff.yaml", **settings).read_text()
