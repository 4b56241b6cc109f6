"""The compiled pipeline package that the cluster commands send: a file kfp can read, and its IR."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bakeoff.components.errors import BakeoffError

# The API server reads at most this much of an uploaded file (common.MaxFileLength, backend/src/apiserver/common/
# const.go, 2.15.0-2.17.0), and tells YAML and JSON apart by the file's name (ReadPipelineFile's isYamlFile and
# isJSONFile, backend/src/apiserver/server/util.go).
MAX_PACKAGE_BYTES = 32 << 20
PACKAGE_SUFFIXES = (".yaml", ".yml", ".json")


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


def checked_package(path: Path) -> dict:
    """The PipelineSpec of a compiled file sent as it is (`upload --package`), once it reads as the API server reads
    one: a YAML or JSON file within its size, a PipelineSpec (and a PlatformSpec after it) as protobuf parses them.
    One line otherwise, before anything is sent."""
    import yaml
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    where = f"--package {str(path)!r}"
    fix = "pass a file that `bakeoff compile` (or kfp's compiler) wrote"
    if path.suffix.lower() not in PACKAGE_SUFFIXES:
        raise BakeoffError(
            f"{where} is not named .yaml, .yml or .json, and the API server reads a package's format from its name:"
            f" {fix}"
        )
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_PACKAGE_BYTES + 1)
    except OSError as error:
        raise BakeoffError(f"cannot read {where} ({error.strerror}): {fix}") from None
    if len(data) > MAX_PACKAGE_BYTES:
        raise BakeoffError(
            f"{where} is larger than {MAX_PACKAGE_BYTES >> 20} MiB, the most the API server reads: {fix}"
        )
    try:
        documents = list(yaml.load_all(data.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        mark = getattr(error, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise BakeoffError(f"{where} is not YAML or JSON text{at}: {fix}") from None
    documents = [document for document in documents if document is not None]
    spec = documents[0] if documents else None
    if not isinstance(spec, dict) or not isinstance(spec.get("pipelineInfo"), dict) or "root" not in spec:
        raise BakeoffError(f"{where} is not a compiled KFP pipeline (no pipelineInfo and root): {fix}")
    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
        if len(documents) > 1:
            json_format.ParseDict(documents[1], pipeline_spec_pb2.PlatformSpec())
    except json_format.ParseError as error:
        raise BakeoffError(f"{where} is not a KFP pipeline spec ({' '.join(str(error).split())}): {fix}") from None
    if not spec["pipelineInfo"].get("name"):
        raise BakeoffError(f"{where} names no pipeline (pipelineInfo.name): {fix}")
    return spec
