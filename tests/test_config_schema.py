"""The config file's JSON Schema: the committed copy is current, and it takes and refuses what the reader does.

Editors check a variants file against pipelines/variants.schema.json as it is typed (the shipped files name it in
their first line). A schema that refused what bakeoff reads would mark good files red; one that took what bakeoff
refuses would keep quiet about a typo until `bakeoff run`.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from bakeoff.components import config_schema
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.spec import parse_config
from bakeoff.components.tfenv import DEVICES_ENV, LOG_LEVEL_ENV
from bakeoff.pipelines.cli.main import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "pipelines" / "variants.schema.json"
SHIPPED = ["variants.yaml", "quick.yaml", "search_small.yaml", "search_large.yaml"]
MODELINE = f"# yaml-language-server: $schema={COMMITTED.name}"


def errors(document: object) -> list[str]:
    validator = jsonschema.Draft7Validator(config_schema.config_schema())
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(document)]


def test_the_committed_schema_is_what_bakeoff_schema_prints(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (LOG_LEVEL_ENV, DEVICES_ENV):  # what main() exports for TensorFlow is undone after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    assert main(["schema"]) == 0
    printed = capsys.readouterr().out
    jsonschema.Draft7Validator.check_schema(json.loads(printed))
    assert COMMITTED.read_text() == printed, (
        f"{COMMITTED.relative_to(ROOT)} is not the schema this bakeoff reads by:"
        " run `bakeoff schema > pipelines/variants.schema.json`"
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_configs_name_the_schema_and_pass_it(name: str) -> None:
    text = (ROOT / "pipelines" / name).read_text()
    assert text.splitlines()[0] == MODELINE, f"{name}'s first line names the schema for editors"
    assert errors(yaml.safe_load(text)) == []


# Documents the reader takes in their looser forms: a schema that refused them would mark good files red.
TAKEN = {
    "each architecture": "variants: [{name: a, model: {type: cnn, filters: [8]}}, {name: b, model: {type: mlp}}]",
    "the model's type from defaults": "defaults: {model: {type: mlp}}\nvariants: [{name: a, model: {dropout: 0.1}}]",
    "the whole model from defaults": "defaults: {model: {type: cnn}}\nvariants: [{name: a}]",
    "a number for a string": "variants: [{name: a, model: {type: cnn}, resources: {cpu: 2, memory: 2Gi}}]",
    "whole floats for ints": "variants: [{name: a, model: {type: cnn}, workers: 2.0, training: {epochs: 3.0}}]",
    "spaces where they are taken": (
        "variants: [{name: a, model: {type: cnn, filters: {choice: [[8], [16]]}, dropout: {uniform: [0, 0.5]}},"
        " workers: {int_uniform: [1, 2]}, training: {learning_rate: {log_uniform: [0.001, 0.01]},"
        " optimizer: {choice: [adam, sgd]}}}]"
    ),
    "every top-level field": (
        "defaults: {workers: 1}\nvariants: [{name: a, model: {type: mlp}}]\n"
        "search: {samples: 2, seed: 1, halving: {min_epochs: 1, max_epochs: 3}, budget: {minutes: 5}}\n"
        "source: tfds:mnist\nimage_size: [28, 28]"
    ),
}


@pytest.mark.parametrize("text", TAKEN.values(), ids=TAKEN.keys())
def test_what_the_reader_takes_the_schema_takes(text: str) -> None:
    parse_config(yaml.safe_load(text), "taken.yaml")
    assert errors(yaml.safe_load(text)) == []


# Documents the reader refuses for what they are, not their values' bounds: the schema refuses each too.
REFUSED = {
    "an unknown field": ("variants: [{name: a, model: {type: cnn}, learning_rate: 1}]", "learning_rate"),
    "an unknown model field": ("variants: [{name: a, model: {type: cnn, filterz: [1]}}]", "model.filterz"),
    "another architecture's field": ("variants: [{name: a, model: {type: mlp, filters: [8]}}]", "model.filters"),
    "an unknown architecture": ("variants: [{name: a, model: {type: transformer}}]", "model.type"),
    "a string for an int": ("variants: [{name: a, model: {type: cnn}, training: {epochs: many}}]", "training.epochs"),
    "a fraction for an int": ("variants: [{name: a, model: {type: cnn}, workers: 2.5}]", "workers"),
    "a number for a bool": ("variants: [{name: a, model: {type: cnn, batch_norm: 1}}]", "model.batch_norm"),
    "an unknown optimizer": ("variants: [{name: a, model: {type: cnn}, training: {optimizer: lbfgs}}]", "optimizer"),
    "a name of capitals": ("variants: [{name: Wide, model: {type: cnn}}]", "name"),
    "a space on resources": (
        "variants: [{name: a, model: {type: cnn}, resources: {cpu: {choice: ['1', '2']}}}]",
        "resources.cpu",
    ),
    "a range on a list": (
        "variants: [{name: a, model: {type: cnn, filters: {int_uniform: [8, 16]}}}]",
        "model.filters",
    ),
    "an unknown space": ("variants: [{name: a, model: {type: cnn, dropout: {normal: [0, 1]}}}]", "model.dropout"),
    "an unknown top-level field": ("variant: [{name: a, model: {type: cnn}}]", "variant"),
    "no variants": ("variants: []", "variants"),
    "an unknown search field": ("variants: [{name: a, model: {type: cnn}}]\nsearch: {samplez: 3}", "search.samplez"),
    "a halving without min_epochs": (
        "variants: [{name: a, model: {type: cnn}}]\nsearch: {halving: {max_epochs: 3}}",
        "search.halving.min_epochs",
    ),
}


@pytest.mark.parametrize("text, field", REFUSED.values(), ids=REFUSED.keys())
def test_what_the_reader_refuses_the_schema_refuses(text: str, field: str) -> None:
    with pytest.raises(BakeoffError, match=field.rpartition(".")[2]):
        parse_config(yaml.safe_load(text), "refused.yaml")
    assert errors(yaml.safe_load(text)), f"the schema takes what the reader refuses at {field}"


def test_the_model_is_one_of_the_registered_architectures_by_its_type() -> None:
    """A new architecture in the registry is a new branch of the schema's model, named by its type."""
    model = config_schema.config_schema()["definitions"]["entry"]["properties"]["model"]
    typed = [branch["properties"]["type"]["const"] for branch in model["oneOf"] if "properties" in branch]
    assert typed == list(ARCHITECTURES)
