"""The pipeline's input parameters, and --param KEY=VALUE checked and typed against them before anything is sent."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bakeoff.components.errors import BakeoffError
from bakeoff.components.selection.ranking import METRICS, direction

PARAMETER_KINDS = {
    "STRING": ("text", "hello"),
    "NUMBER_INTEGER": ("a whole number", "8"),
    "NUMBER_DOUBLE": ("a number", "0.5"),
    "BOOLEAN": ("true or false", "true"),
    "LIST": ("a JSON list", "'[1, 2]'"),
    "STRUCT": ("a JSON object", "'{\"key\": 1}'"),
}
# parameters the pipeline dropped: an old command line is told what replaced them, not just "no such parameter"
RETIRED = {
    "direction": f"the metric sets its own direction ({', '.join(f'{m}: {d}' for m, d in METRICS.items())}); drop "
    "--param direction",
}


# values the pipeline's steps would refuse only after the cluster started: the step's own check runs here first
def _trainer(value: str) -> object:
    from bakeoff.components.training.launch import check_trainer  # here, not at the top: it loads the job libraries

    return check_trainer(value)


VALUE_CHECKS: dict[str, Callable[[Any], object]] = {"metric": direction, "trainer": _trainer}


def pipeline_parameters(spec: Mapping) -> dict[str, str]:
    """Input parameter name → KFP parameterType, from the IR's root.inputDefinitions."""
    parameters = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    return {name: definition.get("parameterType", "STRING") for name, definition in parameters.items()}


def _convert(kind: str, text: str) -> Any:
    """--param text as the JSON value the parameter type takes; ValueError when it does not fit."""
    if kind == "NUMBER_INTEGER":
        if not re.fullmatch(r"[+-]?\d+", text.strip()):
            raise ValueError
        return int(text)
    if kind == "NUMBER_DOUBLE":
        value = float(text)
        if not math.isfinite(value):
            raise ValueError
        return value
    if kind == "BOOLEAN":
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError
        return lowered == "true"
    if kind in ("LIST", "STRUCT"):
        value = json.loads(text)
        if not isinstance(value, list if kind == "LIST" else dict):
            raise ValueError
        return value
    return text


def parse_params(pairs: Sequence[str], parameters: Mapping[str, str]) -> dict[str, Any]:
    """KEY=VALUE pairs checked against the pipeline's inputs and typed as the IR says, before anything is sent."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise BakeoffError(f"--param {pair!r} is not KEY=VALUE: write e.g. --param shards=4")
        if key in RETIRED and key not in parameters:
            raise BakeoffError(f"--param {key}: {RETIRED[key]}")
        if key not in parameters:
            raise BakeoffError(
                f"--param {key!r}: the pipeline has no such parameter: use one of {', '.join(sorted(parameters))}"
            )
        if key in values:
            raise BakeoffError(f"--param {key!r} is given twice: give each parameter once")
        kind = parameters[key]
        description, example = PARAMETER_KINDS.get(kind, ("text", "hello"))
        try:
            values[key] = _convert(kind, text)
        except ValueError:
            raise BakeoffError(
                f"--param {key}={text!r}: {key} takes {description} ({kind}): write e.g. --param {key}={example}"
            ) from None
        if key in VALUE_CHECKS:
            VALUE_CHECKS[key](values[key])
    return values


def check_inputs(spec: Mapping, values: Mapping[str, Any]) -> None:
    """Refuses run parameters that a supported KFP API server would refuse (validatePipelineJobInputs), before the
    run or its experiment is created; names the first problem and the release."""
    from bakeoff.pipelines import conformance

    for version in conformance.SUPPORTED:
        found = conformance.input_violations(dict(spec), values, conformance.BACKENDS[version])
        if found:
            raise BakeoffError(f"KFP {version}'s API server would refuse this run ({found[0]}): fix the --param values")


def _typed(kind: str, value: Any) -> Any:
    """A default as the IR holds it (a whole number as a double) typed as the step receives it."""
    return int(value) if kind == "NUMBER_INTEGER" and isinstance(value, float) and value.is_integer() else value


def check_run(spec: Mapping, values: Mapping[str, Any]) -> None:
    """Runs the check step's own rules (``check_values``) on the run's parameters, the compiled defaults overlaid by
    ``values``, before anything is created: a value the step would refuse minutes into the run is refused here.

    The source and the store's reachability are left to the step, which sees them from its pod; that the store is one
    every pod shares (S3, not a folder) is checked here too.
    """
    import inspect

    from bakeoff.components.steps.check import check_values
    from bakeoff.components.storage import check_shared

    kinds = pipeline_parameters(spec)
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    run = {name: _typed(kinds[name], definition.get("defaultValue")) for name, definition in declared.items()}
    run.update(values)
    check_task = spec.get("root", {}).get("dag", {}).get("tasks", {}).get("check", {})
    rungs = check_task.get("inputs", {}).get("parameters", {}).get("rungs", {}).get("runtimeValue", {})
    taken = inspect.signature(check_values).parameters
    if "constant" not in rungs or not set(taken) <= {*run, "rungs"}:
        return  # a package of another pipeline: its own check step, if any, has other rules
    run["rungs"] = int(rungs["constant"])
    try:
        check_values(**{name: run[name] for name in taken})
        if "store" in run:  # the step's rule where it runs, on a cluster: a folder would be each pod's own
            check_shared(run["store"], "store")
    except BakeoffError as error:
        raise BakeoffError(f"the run's check step would refuse it, so nothing was created: {error}") from None
