"""The KFP v2 backend's rules for a compiled pipeline, as its driver applies them, checked before a file leaves here.

``kfp.local`` applies none of these rules, so a pipeline that runs locally can
still fail on a cluster. Each rule is read from kubeflow/pipelines at the
release tags of ``SUPPORTED`` (the table in docs/kubeflow.md):

- input types: ``resolveInputs`` → ``handleParamTypeValidationAndConversion``
  (``backend/src/v2/driver/resolve.go`` from 2.14; ``driver.go`` in 2.4–2.5). A
  STRING input takes any value, turned into JSON text; every other type takes
  only a value of its own kind (``input parameter %q type mismatch``). The rule
  runs in every driver: the DAG drivers of sub-pipelines and loop iterations
  too, whose outputs are then the converted values.
- loop items: the iteration driver hands each element of the items list to the
  loop's item input, then converts it by the item input's declared type.
- placeholders: ``resolveInputParameter`` substitutes a runtime constant only
  when the whole constant is one of the placeholders its ``switch`` lists.
- fan-in: ``resolveUpstreamParameters`` gathers a ParallelFor's outputs
  (``dsl.Collected``) from KFP 2.14 on; earlier drivers skip ParallelFor DAGs
  (``getDAGTasks``: "ParallelFor outputs should be handled with dsl.Collected").

And the API server's, before any driver runs (``backend/src/apiserver/template/v2_template.go``):

- the pipeline's name, on upload and on a run with an inline spec (``NewV2SpecTemplate``): not empty, and
  Go's ``regexp.MatchString`` of a DNS-1123-subdomain pattern, which is not anchored, so any name holding one
  lowercase letter or digit passes (``NAME_RULE_LINE``).
- a run's or recurring run's parameters (``validatePipelineJobInputs``, ``INPUTS_RULE_LINE``): every root input
  without a default that is not optional must be given; a given value must be of its type's kind exactly (a
  STRING takes only a string here, unlike the driver); a name the root does not declare is refused; from 2.16
  a value must be one of the input's ``literals`` when it lists them (``util.ValidateLiteralParameter``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

# A parameter type → the kind of protobuf value that satisfies it (structpb kinds).
KIND_OF_TYPE = {
    "STRING": "string",
    "NUMBER_INTEGER": "number",
    "NUMBER_DOUBLE": "number",
    "BOOLEAN": "bool",
    "LIST": "list",
    "STRUCT": "struct",
    "TASK_FINAL_STATUS": "struct",
    "TASK_CONFIG": "struct",
}
_PLACEHOLDERS_2_5 = frozenset(
    {
        "{{$.pipeline_job_name}}",
        "{{$.pipeline_job_resource_name}}",
        "{{$.pipeline_job_uuid}}",
        "{{$.pipeline_task_name}}",
        "{{$.pipeline_task_uuid}}",
    }
)


@dataclasses.dataclass(frozen=True)
class KfpBackend:
    """One KFP backend release as its driver's source decides what it runs."""

    version: str
    placeholders: frozenset[str]  # runtime constants the driver substitutes
    collected: bool  # whether the driver resolves dsl.Collected of a ParallelFor's outputs

    def __str__(self) -> str:
        return f"KFP {self.version}"


BACKENDS = {
    "2.4.1": KfpBackend("2.4.1", frozenset(), collected=False),  # Kubeflow 1.10.0: substitutes no placeholder
    "2.5.0": KfpBackend("2.5.0", _PLACEHOLDERS_2_5, collected=False),  # Kubeflow 1.10.1, 1.10.2
    "2.14.0": KfpBackend("2.14.0", _PLACEHOLDERS_2_5, collected=True),
    "2.15.0": KfpBackend("2.15.0", _PLACEHOLDERS_2_5, collected=True),  # also Kubeflow 1.11.0
    "2.16.0": KfpBackend(
        "2.16.0",
        _PLACEHOLDERS_2_5 | {"{{$.pipeline_job_create_time_utc}}", "{{$.pipeline_job_schedule_time_utc}}"},
        collected=True,
    ),
    "2.17.0": KfpBackend(
        "2.17.0",
        _PLACEHOLDERS_2_5 | {"{{$.pipeline_job_create_time_utc}}", "{{$.pipeline_job_schedule_time_utc}}"},
        collected=True,
    ),
}
SUPPORTED = ("2.5.0", "2.14.0", "2.15.0", "2.16.0", "2.17.0")  # 2.4.1 fails the placeholder rule
# Where v2_template.go holds the name rule's regexp.MatchString and validatePipelineJobInputs, per release tag.
NAME_RULE_LINE = {"2.5.0": 196, "2.14.0": 214, "2.15.0": 213, "2.16.0": 219, "2.17.0": 236}
INPUTS_RULE_LINE = {"2.5.0": 358, "2.14.0": 384, "2.15.0": 384, "2.16.0": 424, "2.17.0": 442}
LITERALS_FROM = "2.16.0"  # the first release whose validatePipelineJobInputs checks literals (line 495; 2.17.0: 513)
# The pattern as the API server uses it: searched, not matched whole (MatchString is unanchored).
_NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# validatePipelineJobInputs's wording of each type, and the structpb kind it requires.
_INPUT_KINDS = {
    "NUMBER_DOUBLE": ("double or integer", "number"),
    "NUMBER_INTEGER": ("double or integer", "number"),
    "STRING": ("string", "string"),
    "BOOLEAN": ("bool", "bool"),
    "LIST": ("list", "list"),
    "STRUCT": ("struct", "struct"),
}


def value_kind(value: Any) -> str:
    """The protobuf Value kind a JSON value becomes."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "struct"


def accepts(declared: str, kind: str) -> bool:
    """The driver's type check: STRING takes anything (as JSON text), other types only their own kind."""
    return declared == "STRING" or KIND_OF_TYPE.get(declared) == kind


def _after_check(declared: str, kind: str) -> str:
    """The kind a value has once a driver has validated it against ``declared``."""
    return "string" if declared == "STRING" else kind


@dataclasses.dataclass(frozen=True)
class _Scope:
    """A DAG being walked: its component, and the kind each of its input parameters holds at run time."""

    path: str
    component: dict
    input_kinds: dict[str, str]
    element_kinds: dict[str, str]  # for LIST inputs whose elements are known: the elements' kind


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def name_violations(spec: dict) -> list[str]:
    """What the API server says of the pipeline's name (the same rule in every supported release)."""
    name = (spec.get("pipelineInfo") or {}).get("name") or ""
    if not name:
        return ["invalid v2 pipeline spec: name is empty"]
    if not _NAME_PATTERN.search(name):
        return [
            "invalid v2 pipeline spec: name should consist of lower case alphanumeric characters, '-' or '.', and"
            " must start and end with an alphanumeric character"
        ]
    return []


def input_violations(spec: dict, values: Mapping[str, Any], backend: KfpBackend) -> list[str]:
    """What the backend's API server refuses in a run's parameter values, in its words (validatePipelineJobInputs
    returns the first; this lists each)."""
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    found = []
    for name, parameter in sorted(declared.items()):
        if name not in values:
            if not parameter.get("isOptional") and "defaultValue" not in parameter:
                found.append(f"parameter {name} is not optional, yet has neither default value nor user provided value")
            continue
        wording, kind = _INPUT_KINDS.get(parameter.get("parameterType", ""), ("unknown", ""))
        if value_kind(values[name]) != kind:
            subject = "the parameter value" if kind == "number" else "the input parameter"  # as each case words it
            found.append(f"input parameter {name} requires type {wording}, but {subject} is not of {kind} value type")
        elif _release(backend.version) >= _release(LITERALS_FROM) and values[name] not in parameter.get(
            "literals", [values[name]]
        ):
            # util.ValidateLiteralParameter (backend/src/common/util/validate_literal.go): proto.Equal to one of them.
            found.append(
                f'input parameter "{name}" value {json.dumps(values[name])} does not match any of the allowed literal'
                f" values: {json.dumps(parameter['literals'])}"
            )
    extra = sorted(set(values) - set(declared))
    if extra:
        found.append(f"parameter(s) provided are not required by pipeline: {', '.join(extra)}")
    return found


def violations(spec: dict, backend: KfpBackend) -> list[str]:
    """Every problem the backend's API server (the name) or drivers (the inputs) would reject in the pipeline IR
    ``spec``, one line each."""
    named = name_violations(spec)
    if named:
        return named
    components = spec["components"]
    root = spec["root"]
    root_inputs = root.get("inputDefinitions", {}).get("parameters", {})
    kinds = {name: KIND_OF_TYPE[p["parameterType"]] for name, p in root_inputs.items()}
    elements = {
        name: kind
        for name, p in root_inputs.items()
        if p["parameterType"] == "LIST" and (kind := _element_kind(p.get("defaultValue")))
    }
    return list(_walk(_Scope("root", root, kinds, elements), components, backend))


def _element_kind(items: list | None) -> str | None:
    found = {value_kind(item) for item in items or []}
    return found.pop() if len(found) == 1 else None


def _walk(scope: _Scope, components: dict, backend: KfpBackend) -> Iterator[str]:
    tasks = scope.component["dag"]["tasks"]
    for task_name, task in sorted(tasks.items()):
        where = f"{scope.path}/{task_name}"
        callee = components[task["componentRef"]["name"]]
        declared = callee.get("inputDefinitions", {}).get("parameters", {})
        iterator = task.get("parameterIterator")
        item_input = iterator["itemInput"] if iterator else None
        kinds: dict[str, str] = {}
        elements: dict[str, str] = {}
        for name, source in sorted(task.get("inputs", {}).get("parameters", {}).items()):
            kind, problem = _produced_kind(source, scope, tasks, components, backend)
            if problem:
                yield f"{where}: input {name!r}: {problem}"
                continue
            wanted = declared.get(name, {}).get("parameterType")
            if wanted is None:
                yield f"{where}: input {name!r} is not declared by {task['componentRef']['name']}"
                continue
            if kind is not None and not accepts(wanted, kind):
                yield f"{where}: input parameter {name!r} type mismatch: expect {wanted}, got {kind}"
                continue
            kinds[name] = _after_check(wanted, kind) if kind else KIND_OF_TYPE[wanted]
            element = _source_elements(source, scope)
            if element:
                elements[name] = element
        if iterator and item_input is not None:
            items = iterator["items"].get("inputParameter")
            element = elements.get(items) if items else _element_kind(json.loads(iterator["items"].get("raw") or "[]"))
            wanted = declared.get(item_input, {}).get("parameterType")
            if element and wanted and not accepts(wanted, element):
                yield f"{where}: loop item {item_input!r} type mismatch: expect {wanted}, got {element}"
            elif wanted:
                kinds[item_input] = _after_check(wanted, element or KIND_OF_TYPE[wanted])
        if "dag" in callee:
            yield from _walk(_Scope(where, callee, kinds, elements), components, backend)


def _source_elements(source: dict, scope: _Scope) -> str | None:
    if "componentInputParameter" in source:
        return scope.element_kinds.get(source["componentInputParameter"])
    if "runtimeValue" in source and isinstance(source["runtimeValue"].get("constant"), list):
        return _element_kind(source["runtimeValue"]["constant"])
    return None


def _produced_kind(
    source: dict, scope: _Scope, tasks: dict, components: dict, backend: KfpBackend
) -> tuple[str | None, str | None]:
    """(the kind of value a task input resolves to, or why the backend cannot resolve it)."""
    if "componentInputParameter" in source:
        name = source["componentInputParameter"]
        if name not in scope.input_kinds:
            return None, f"reads {name!r}, which {scope.path} does not define"
        return scope.input_kinds[name], None
    if "runtimeValue" in source:
        constant = source["runtimeValue"].get("constant")
        if isinstance(constant, str) and "{{$." in constant and constant not in backend.placeholders:
            return None, f"placeholder {constant!r} is not substituted by {backend}: it would arrive as literal text"
        return value_kind(constant), None
    if "taskOutputParameter" in source:
        output = source["taskOutputParameter"]
        producer = tasks.get(output["producerTask"])
        if producer is None:
            return None, f"reads an output of {output['producerTask']!r}, which is not a task of {scope.path}"
        component = components[producer["componentRef"]["name"]]
        if producer.get("parameterIterator") and not backend.collected:
            return (
                None,
                f"fans in a ParallelFor's outputs (dsl.Collected), which {backend} does not resolve (needs KFP 2.14)",
            )
        declared = component.get("outputDefinitions", {}).get("parameters", {}).get(output["outputParameterKey"])
        if declared is None:
            return (
                None,
                f"reads output {output['outputParameterKey']!r}, which {output['producerTask']!r} does not declare",
            )
        return KIND_OF_TYPE[declared["parameterType"]], None
    return None, None  # task final status and other sources carry no parameter value to check
