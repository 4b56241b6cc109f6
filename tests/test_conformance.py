"""The compiled pipeline against the KFP v2 backend's own rules, as kubeflow/pipelines' driver source decides them.

Rules from ``backend/src/v2/driver/resolve.go`` (``resolveInputs`` →
``handleParamTypeValidationAndConversion``, ``resolveInputParameter``'s
placeholder ``switch``; ``driver.go`` in 2.4.1 and 2.5.0) at each release tag
of ``bakeoff.pipelines.conformance.BACKENDS``; see that module's docstring.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import resolve_namespace, runs
from bakeoff.pipelines import conformance
from bakeoff.pipelines.cli.main import main
from bakeoff.pipelines.compiling import COMPILED, check_backends

pytestmark = pytest.mark.unit

# pipelines/bakeoff.yaml as compiled before the loop item was typed: `variants: list`
# made the ParallelFor item STRING and select fanned in with dsl.Collected.
STRING_ITEM_IR = Path(__file__).resolve().parent / "data" / "bakeoff-string-loop-item.yaml"
USER_CONFIG = """
defaults: {workers: 3, training: {epochs: 2}}
variants:
  - {name: wide, model: {type: cnn, filters: [64, 128], dense_units: 128}, resources: {cpu: "2", memory: 4Gi}}
  - {name: mlp, model: {type: mlp, hidden_units: [256, 128]}, workers: 1}
"""


def ir(path: Path) -> dict:
    return next(yaml.safe_load_all(path.read_text()))


@pytest.mark.parametrize("version", conformance.SUPPORTED)
def test_the_committed_pipeline_passes_every_supported_backend(version: str) -> None:
    assert conformance.violations(ir(COMPILED), conformance.BACKENDS[version]) == []


def test_a_pipeline_compiled_from_a_user_config_passes_every_supported_backend(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text(USER_CONFIG)
    out = tmp_path / "mine-pipeline.yaml"
    assert main(["compile", "--config", str(config), "-o", str(out), "--parallelism", "2"]) == 0
    for version in conformance.SUPPORTED:
        assert conformance.violations(ir(out), conformance.BACKENDS[version]) == [], version


@pytest.mark.parametrize("version", conformance.SUPPORTED)
def test_a_string_loop_item_feeding_a_struct_input_is_rejected_as_the_driver_does(version: str) -> None:
    found = conformance.violations(ir(STRING_ITEM_IR), conformance.BACKENDS[version])
    assert "root/for-loop-1/train: input parameter 'variant' type mismatch: expect STRUCT, got string" in found


def test_collected_fan_in_is_rejected_before_kfp_2_14() -> None:
    found = conformance.violations(ir(STRING_ITEM_IR), conformance.BACKENDS["2.5.0"])
    assert any(line.startswith("root/select: input 'candidates': fans in a ParallelFor's outputs") for line in found)
    assert not any(
        "fans in" in line for line in conformance.violations(ir(STRING_ITEM_IR), conformance.BACKENDS["2.14.0"])
    )


def test_kfp_2_4_leaves_the_run_id_placeholder_unsubstituted() -> None:
    """Kubeflow 1.10.0's KFP 2.4.1 substitutes no runtime placeholder: every run would share one literal run id."""
    found = conformance.violations(ir(COMPILED), conformance.BACKENDS["2.4.1"])
    assert found and all("'{{$.pipeline_job_uuid}}' is not substituted by KFP 2.4.1" in line for line in found)


@pytest.mark.parametrize(
    "declared,kind,accepted",
    [
        ("STRING", "struct", True),
        ("STRING", "number", True),
        ("STRING", "list", True),
        ("STRUCT", "string", False),
        ("STRUCT", "struct", True),
        ("LIST", "string", False),
        ("LIST", "list", True),
        ("NUMBER_INTEGER", "number", True),
        ("NUMBER_DOUBLE", "number", True),
        ("NUMBER_INTEGER", "string", False),
        ("BOOLEAN", "bool", True),
        ("BOOLEAN", "number", False),
        ("TASK_FINAL_STATUS", "struct", True),
    ],
)
def test_type_rule_matches_the_drivers_switch(declared: str, kind: str, accepted: bool) -> None:
    """STRING takes any value (as JSON text); every other type only its own protobuf kind."""
    assert conformance.accepts(declared, kind) is accepted


def test_compile_refuses_ir_a_supported_backend_would_reject() -> None:
    with pytest.raises(BakeoffError, match=r"^the compiled pipeline would fail on KFP 2\.5\.0 \(root/"):
        check_backends(STRING_ITEM_IR.read_text())


def test_a_run_id_left_as_a_placeholder_is_refused_before_anything_is_written() -> None:
    with pytest.raises(BakeoffError, match=r"needs KFP 2\.5 or newer"):
        runs.variant_prefix("{{$.pipeline_job_uuid}}", "cnn")


def test_the_store_uri_takes_the_pods_namespace(tmp_path: Path) -> None:
    """One compiled default writes below private/<namespace>/, where a multi-user profile's keys may write."""
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("team-a\n")
    assert (
        resolve_namespace("s3://mlpipeline/private/{namespace}/bakeoff", namespace_file)
        == "s3://mlpipeline/private/team-a/bakeoff"
    )
    assert resolve_namespace("s3://mlpipeline/shared/bakeoff", tmp_path / "absent") == "s3://mlpipeline/shared/bakeoff"
    with pytest.raises(BakeoffError, match="only a pod can resolve"):
        resolve_namespace("s3://mlpipeline/private/{namespace}/bakeoff", tmp_path / "absent")


# ---------------------------------------------------------------- the API server: the name and the run's parameters
# backend/src/apiserver/template/v2_template.go at each tag: the name rule at NAME_RULE_LINE (NewV2SpecTemplate),
# validatePipelineJobInputs at INPUTS_RULE_LINE, literals from 2.16.0 (util.ValidateLiteralParameter).

SERVER_VERSIONS = ("2.15.0", "2.16.0", "2.17.0")  # Kubeflow 1.11, 26.03 and the newest KFP


@pytest.mark.parametrize("version", SERVER_VERSIONS)
def test_the_servers_name_rule_is_unanchored_as_go_applies_it(version: str) -> None:
    spec = ir(COMPILED)
    backend = conformance.BACKENDS[version]
    assert conformance.violations(spec, backend) == []
    assert conformance.violations({**spec, "pipelineInfo": {"name": "Bake-Off 2"}}, backend) == [], (
        "regexp.MatchString finds 'ake-' in it: the server takes it"
    )
    assert conformance.violations({**spec, "pipelineInfo": {"name": ""}}, backend) == [
        "invalid v2 pipeline spec: name is empty"
    ]
    assert conformance.violations({**spec, "pipelineInfo": {"name": "BAKEOFF_"}}, backend) == [
        "invalid v2 pipeline spec: name should consist of lower case alphanumeric characters, '-' or '.', and must"
        " start and end with an alphanumeric character"
    ]


@pytest.mark.parametrize("version", SERVER_VERSIONS)
def test_run_parameters_as_validate_pipeline_job_inputs_checks_them(version: str) -> None:
    backend = conformance.BACKENDS[version]
    spec = {
        "root": {
            "inputDefinitions": {
                "parameters": {
                    "shards": {"parameterType": "NUMBER_INTEGER"},
                    "label": {"parameterType": "STRING", "defaultValue": "x"},
                    "mode": {"parameterType": "STRING", "defaultValue": "a", "literals": ["a", "b"]},
                    "flag": {"parameterType": "BOOLEAN", "isOptional": True},
                }
            }
        }
    }
    assert conformance.input_violations(spec, {"shards": 4}, backend) == []
    assert conformance.input_violations(spec, {"label": 3, "extra": 1, "flag": "true"}, backend) == [
        "input parameter flag requires type bool, but the input parameter is not of bool value type",
        "input parameter label requires type string, but the input parameter is not of string value type",
        "parameter shards is not optional, yet has neither default value nor user provided value",
        "parameter(s) provided are not required by pipeline: extra",
    ]
    assert conformance.input_violations(spec, {"shards": "4"}, backend) == [
        "input parameter shards requires type double or integer, but the parameter value is not of number value type"
    ]
    literal = conformance.input_violations(spec, {"shards": 4, "mode": "c"}, backend)
    assert literal == (
        []
        if version == "2.15.0"
        else ['input parameter "mode" value "c" does not match any of the allowed literal values: ["a", "b"]']
    ), "literals are checked from 2.16.0"


def test_the_committed_pipelines_parameters_pass_every_supported_server() -> None:
    from bakeoff.pipelines.kfp_client.parameters import check_inputs, parse_params, pipeline_parameters

    spec = ir(COMPILED)
    check_inputs(spec, {})
    check_inputs(spec, parse_params(["trainer=trainjob", "shards=2", "metric=val_loss"], pipeline_parameters(spec)))
    with pytest.raises(BakeoffError) as raised:
        check_inputs(spec, {"trainer": 1})
    assert str(raised.value) == (
        "KFP 2.5.0's API server would refuse this run (input parameter trainer requires type string, but the input"
        " parameter is not of string value type): fix the --param values"
    )
