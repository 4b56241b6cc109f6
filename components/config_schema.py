"""The config file's JSON Schema, for editors to check a variants file as it is typed.

Built from what spec.py reads a config file with: the ConfigFile, Variant and search dataclasses through the one
strict reader's hints and coercion, the architectures' configs, the optimizers and schedules, the name's pattern. So it
cannot drift from the reader; `bakeoff schema` prints it, and pipelines/variants.schema.json is the copy that the
shipped files name in their first line (tests/test_config_schema.py keeps it current). It holds the types and the
names; the bounds, a duplicate name and what an expanded variant must satisfy are the reader's alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from bakeoff.components import spaces, strict
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.modeling.backbone import NETWORKS, BackboneConfig
from bakeoff.components.modeling.optimizers import OPTIMIZERS, SCHEDULES
from bakeoff.components.modeling.precision import PRECISIONS
from bakeoff.components.spec import COERCION, MAX_NAME, NAME_PATTERN, ConfigFile, Training, Variant

# Draft 7: the newest that editors' YAML support (Red Hat's yaml-language-server) reads in full.
DIALECT = "http://json-schema.org/draft-07/schema#"
TITLE = "bakeoff config file (variants.yaml)"
ENTRY = "#/definitions/entry"  # a variant's fields, none required: defaults, and each entry of variants with its name


def config_schema() -> dict[str, Any]:
    """The schema of a config file; a variant's fields once, under ``definitions``, for defaults and each entry."""
    entry = strict.schema(Variant, COERCION, _variant_field)
    del entry["required"]  # any field, the model included, may come from defaults; an entry names itself (below)
    document = strict.schema(ConfigFile, COERCION, _document_field)
    return {"$schema": DIALECT, "title": TITLE} | document | {"definitions": {"entry": entry}}


def text() -> str:
    """The schema as `bakeoff schema` prints it and pipelines/variants.schema.json holds it."""
    return json.dumps(config_schema(), indent=2) + "\n"


def _document_field(cls: type, name: str, hint: Any, schema: dict[str, Any]) -> dict[str, Any]:
    if cls is not ConfigFile:
        return schema  # the search section, as its hints say
    if name == "variants":
        return {"type": "array", "minItems": 1, "items": {"allOf": [{"$ref": ENTRY}, {"required": ["name"]}]}}
    if name == "defaults":
        return {
            "description": "Merged into every entry of variants; an entry's own fields win.",
            "allOf": [{"$ref": ENTRY}],
        }
    if name == "source":
        return {"type": "string", "minLength": 1}  # read as written, where a variant's strings take numbers
    return schema


def _variant_field(cls: type, name: str, hint: Any, schema: dict[str, Any]) -> dict[str, Any]:
    if cls is Variant and name == "model":
        return _model()
    if cls is Variant and name == "name":
        return {"type": "string", "pattern": f"^{NAME_PATTERN}$", "maxLength": MAX_NAME}
    if cls is Training and name in ("optimizer", "schedule", "precision"):
        names: dict[str, Iterable[str]] = {"optimizer": OPTIMIZERS, "schedule": SCHEDULES, "precision": PRECISIONS}
        schema = {"enum": list(names[name])}
    if cls is BackboneConfig and name == "network":
        schema = {"enum": list(NETWORKS)}
    # Where spec.py's _find_spaces takes a search space: a training or model field, and workers.
    searched = cls is Training or cls in {architecture.config for architecture in ARCHITECTURES.values()}
    if searched or (cls is Variant and name == "workers"):
        return {"anyOf": [schema, *spaces.schema(hint, schema)]}
    return schema


def _model() -> dict[str, Any]:
    """One of the registered architectures, by its ``type``; or, with no type, a model whose type defaults give."""
    branches = []
    for kind, architecture in ARCHITECTURES.items():
        config = strict.schema(architecture.config, COERCION, _variant_field)
        config["properties"] = {"type": {"const": kind}} | config["properties"]
        config["required"] = ["type", *config.get("required", [])]
        branches.append(config)
    untyped = {"type": "object", "not": {"required": ["type"]}}
    return {
        "description": f"The network to train: its type ({', '.join(ARCHITECTURES)}) and that architecture's settings.",
        "type": "object",
        "oneOf": [*branches, untyped],
    }
