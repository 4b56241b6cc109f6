"""The compiled pipeline: what KFP will run on a cluster, and the committed copy kept current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.defaults import IMAGE as BASE_IMAGE
from bakeoff.components.defaults import MAX_RUNGS, STEP_RESOURCES
from bakeoff.pipelines.cli.main import main
from bakeoff.pipelines.compiling import COMPILED

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipeline of the default file's baseline variants without its search: the same general pipeline, whose
    halving parameters default to none (min_epochs and max_epochs 0).

    Its rungs, conditions and halve steps are checked in tests/test_general_pipeline.py.
    """
    folder = tmp_path_factory.mktemp("compiled")
    document = yaml.safe_load(DEFAULT_CONFIG.read_text())
    del document["search"]
    document["variants"] = [v for v in document["variants"] if v["name"] in ("cnn", "dropout", "batch_norm")]
    (folder / "plain.yaml").write_text(yaml.safe_dump(document))
    out = folder / "bakeoff.yaml"
    assert (
        main(
            [
                "compile",
                "--config",
                str(folder / "plain.yaml"),
                "-o",
                str(out),
                "--image",
                "registry.example/bakeoff:7",
                "--parallelism",
                "2",
            ]
        )
        == 0
    )
    return out


def documents(path: Path) -> tuple[dict, dict]:
    ir, platform = yaml.safe_load_all(path.read_text())
    return ir, platform


def test_committed_pipeline_is_current(tmp_path: Path) -> None:
    fresh = tmp_path / "bakeoff.yaml"
    assert main(["compile", "-o", str(fresh)]) == 0
    assert documents(fresh) == documents(COMPILED), "pipelines/bakeoff.yaml is stale: run `make compile`"
    # As text too: each compile writes the same file, so `make compile` leaves an unchanged pipeline unchanged in git.
    assert fresh.read_text() == COMPILED.read_text()


def test_fan_out_with_parallelism_and_a_fan_in_every_supported_backend_runs(compiled: Path) -> None:
    """Select waits for the search sub-pipeline and gets the checked variants list, not a dsl.Collected output (KFP
    >= 2.14 only)."""
    ir, _ = documents(compiled)
    tasks = ir["root"]["dag"]["tasks"]
    loop = ir["components"]["comp-rung-0"]["dag"]["tasks"]["for-loop-1"]
    assert loop["iteratorPolicy"] == {"parallelismLimit": 2}
    assert loop["parameterIterator"]["items"] == {"inputParameter": "pipelinechannel--variants"}
    assert "search" in tasks["select"]["dependentTasks"]
    assert tasks["select"]["inputs"]["parameters"]["variants"] == {
        "taskOutputParameter": {"outputParameterKey": "variants", "producerTask": "check"}
    }
    assert ir["components"]["comp-for-loop-1"]["inputDefinitions"]["parameters"][
        "pipelinechannel--variants-loop-item"
    ] == {"parameterType": "STRUCT"}, "a STRING item reaches train's STRUCT input as text and the driver rejects it"
    defaults = [v["name"] for v in ir["root"]["inputDefinitions"]["parameters"]["variants"]["defaultValue"]]
    assert defaults == ["cnn", "dropout", "batch_norm"]


def test_every_step_runs_the_image_and_the_tfjob_gets_it_too(compiled: Path) -> None:
    ir, _ = documents(compiled)
    executors = ir["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"registry.example/bakeoff:7"}
    assert {name.removeprefix("exec-").split("-")[0] for name in executors} == {
        "check",
        "ingest",
        "train",
        "halve",
        "select",
    }
    train = ir["components"]["comp-for-loop-1"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    assert train["image"] == {"runtimeValue": {"constant": "registry.example/bakeoff:7"}}
    assert train["concurrent_jobs"] == {"runtimeValue": {"constant": 2}}
    assert not any("pip install" in " ".join(e["container"]["command"]) for e in executors.values())


@pytest.mark.parametrize("which", ["plain", "committed default (halving)"])
def test_store_credentials_come_from_the_secret_only(compiled: Path, which: str) -> None:
    compiled = compiled if which == "plain" else COMPILED
    ir, platform = documents(compiled)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(ir["deploymentSpec"]["executors"]) >= {"exec-ingest", "exec-train", "exec-select"}
    for name in executors:
        (secret,) = executors[name]["secretAsEnv"]
        assert secret["secretName"] == "mlpipeline-minio-artifact"
        assert {m["secretKey"]: m["envVar"] for m in secret["keyToEnv"]} == {
            "accesskey": "AWS_ACCESS_KEY_ID",
            "secretkey": "AWS_SECRET_ACCESS_KEY",
        }
        env = {e["name"]: e["value"] for e in ir["deploymentSpec"]["executors"][name]["container"]["env"]}
        assert env == {"BAKEOFF_S3_INSECURE": "1"}
    assert "AWS_SECRET_ACCESS_KEY=" not in compiled.read_text()


def test_store_and_endpoint_are_run_time_parameters_whose_defaults_fit_kfp_2_16_and_multi_user(compiled: Path) -> None:
    """A run or schedule can point at another store without recompiling; the defaults work on SeaweedFS and in any
    profile."""
    ir, _ = documents(compiled)
    parameters = ir["root"]["inputDefinitions"]["parameters"]
    assert parameters["s3_endpoint"]["defaultValue"] == "seaweedfs.kubeflow:9000"
    assert parameters["store"]["defaultValue"] == "s3://mlpipeline/private/{namespace}/bakeoff"
    for step in ("train", "select"):
        declared = ir["components"][f"comp-{step}"]["inputDefinitions"]["parameters"]
        assert {"store", "s3_endpoint"} <= set(declared)


@pytest.mark.parametrize("which", ["plain", "committed default (halving)"])
def test_only_ingest_is_cached(compiled: Path, which: str) -> None:
    """Of the container tasks (KFP caches no DAG), ingest alone: trainings, halving and selection always run."""
    ir, _ = documents(compiled if which == "plain" else COMPILED)
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    cached = {
        name: task.get("cachingOptions") == {"enableCache": True}
        for dag in dags
        for name, task in dag["tasks"].items()
        if "componentRef" in task and "dag" not in ir["components"][task["componentRef"]["name"]]
    }
    assert cached.pop("ingest") and not any(cached.values()), cached
    assert {"select", "train"} <= set(cached)


@pytest.mark.parametrize("which", ["plain", "committed default (halving)"])
def test_the_first_step_checks_every_run_time_parameter_against_what_was_compiled_in(
    compiled: Path, which: str
) -> None:
    """Every parameter a UI or SDK user sets reaches the check step, which all work waits for, with the compiled-in
    search."""
    ir, _ = documents(compiled if which == "plain" else COMPILED)
    tasks = ir["root"]["dag"]["tasks"]
    check = tasks["check"]
    assert "dependentTasks" not in check

    def waits_for_check(name: str) -> bool:
        return any(
            upstream == "check" or waits_for_check(upstream) for upstream in tasks[name].get("dependentTasks", [])
        )

    assert tasks["ingest"]["dependentTasks"] == ["check"]
    assert all(waits_for_check(name) for name in tasks if name != "check")
    parameters = check["inputs"]["parameters"]
    run_time = set(ir["root"]["inputDefinitions"]["parameters"]) - {
        "source_digest"
    }  # the digest only keys ingest's cache
    assert {name: parameters[name] for name in run_time} == {
        name: {"componentInputParameter": name} for name in run_time
    }
    assert parameters["rungs"]["runtimeValue"]["constant"] == MAX_RUNGS  # the one compiled-in constant
    root = ir["root"]["inputDefinitions"]["parameters"]
    halving = {name: root[name]["defaultValue"] for name in ("min_epochs", "max_epochs", "eta")}
    assert halving == (
        {"min_epochs": 0, "max_epochs": 0, "eta": 3}
        if which == "plain"
        else {
            "min_epochs": 3,
            "max_epochs": 20,
            "eta": 3,
        }
    )
    assert check.get("cachingOptions") != {"enableCache": True}, "a cached check would not prove the store reachable"


@pytest.mark.parametrize("which", ["plain", "committed default (halving)"])
def test_the_ir_is_ascii_so_a_database_without_utf8mb4_stores_it(compiled: Path, which: str) -> None:
    """The API server keeps the spec in pipeline_versions.PipelineSpec: on a MySQL or MariaDB whose default charset is
    not utf8mb4, one non-ASCII character (a step's embedded source, a comment in it) failed every upload with HTTP 500
    (Error 1366: Incorrect string value)."""
    ir, platform = documents(compiled if which == "plain" else COMPILED)
    for name, executor in ir["deploymentSpec"]["executors"].items():
        embedded = "\n".join(executor["container"]["command"] + executor["container"].get("args", []))
        lines = [line.strip() for line in embedded.splitlines() if not line.isascii()]
        assert not lines, f"{name} embeds a non-ASCII line of its step's source: {lines[0]!r}"
    document = json.dumps([ir, platform], ensure_ascii=False)
    assert document.isascii(), [char for char in document if not char.isascii()]


def test_kfp_loads_it_back(compiled: Path) -> None:
    from kfp import components

    pipeline = components.load_component_from_file(str(compiled))
    assert pipeline.name == "bakeoff"
    assert {"store", "variants", "model_name", "max_train_examples"} <= set(pipeline.component_spec.inputs)


def test_default_image_is_the_projects(tmp_path: Path) -> None:
    ir, _ = documents(COMPILED)
    assert ir["deploymentSpec"]["executors"]["exec-train"]["container"]["image"] == BASE_IMAGE


def sizes(ir: dict) -> dict[str, tuple[str, str, str, str]]:
    """Each step's (CPU request, CPU limit, memory request, memory limit), as its executor asks KFP's driver; every
    executor of one step alike."""
    found: dict[str, set[tuple[str, str, str, str]]] = {}
    for name, executor in ir["deploymentSpec"]["executors"].items():
        resources = executor["container"].get("resources", {})
        size = tuple(
            resources.get(key)
            for key in ("resourceCpuRequest", "resourceCpuLimit", "resourceMemoryRequest", "resourceMemoryLimit")
        )
        found.setdefault(name.removeprefix("exec-").split("-")[0], set()).add(size)
    assert all(len(alike) == 1 for alike in found.values()), found
    return {step: alike.pop() for step, alike in found.items()}


@pytest.mark.parametrize("which", ["plain", "committed default (halving)"])
def test_every_step_requests_and_is_limited_to_its_own_cpu_and_memory(compiled: Path, which: str) -> None:
    """A profile namespace whose ResourceQuota counts requests.cpu and requests.memory refuses a pod without them:
    every step asks, sized to its work, the train step least since its TFJob's replicas do the training."""
    ir, _ = documents(compiled if which == "plain" else COMPILED)
    assert sizes(ir) == {
        "check": ("250m", "1", "512Mi", "1Gi"),
        "ingest": ("1", "2", "2Gi", "4Gi"),
        "train": ("100m", "500m", "512Mi", "1Gi"),
        "halve": ("250m", "1", "512Mi", "1Gi"),
        "select": ("1", "2", "2Gi", "4Gi"),
    }
    assert sizes(ir) == {step: size for step, size in STEP_RESOURCES.items() if step in sizes(ir)}


def test_the_steps_sizes_change_at_compile_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sized.yaml"
    args = ["compile", "-o", str(out), "--image", "registry.example/bakeoff:7"]
    assert main([*args, "--cpu", "ingest=2,4", "--memory", "select=6Gi", "--cpu", "train=200m"]) == 0
    ir, _ = documents(out)
    assert {step: size for step, size in sizes(ir).items() if step in ("ingest", "select", "train", "check")} == {
        "ingest": ("2", "4", "2Gi", "4Gi"),
        "select": ("1", "2", "6Gi", "6Gi"),  # a request alone is the limit too
        "train": ("200m", "200m", "512Mi", "1Gi"),
        "check": ("250m", "1", "512Mi", "1Gi"),
    }


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--cpu", "ingest"], "--cpu 'ingest' is not STEP=REQUEST[,LIMIT]: write e.g. --cpu ingest=2,4"),
        (
            ["--memory", "select=1Gi,2Gi,3Gi"],
            "--memory 'select=1Gi,2Gi,3Gi' is not STEP=REQUEST[,LIMIT]: write e.g. --memory select=4Gi,8Gi",
        ),
        (["--cpu", "deploy=1"], "--cpu 'deploy=1': no step 'deploy': use one of check, ingest, train, halve, select"),
        (["--cpu", "ingest=1", "--cpu", "ingest=2"], "--cpu ingest= is given twice: give each step once"),
        (
            ["--cpu", "ingest=two"],
            "--cpu ingest: 'two' is not a quantity above 0 that kfp and Kubernetes read: write e.g. 500m or 2",
        ),
        (
            ["--cpu", "check=0"],
            "--cpu check: '0' is not a quantity above 0 that kfp and Kubernetes read: write e.g. 500m or 2",
        ),
        (
            ["--memory", "ingest=4GB"],
            "--memory ingest: '4GB' is not a quantity above 0 that kfp and Kubernetes read: write e.g. 512Mi or 4Gi",
        ),
        (
            ["--memory", "ingest=4K"],
            "--memory ingest: '4K' is not a quantity above 0 that kfp and Kubernetes read: write e.g. 512Mi or 4Gi",
        ),
        (
            ["--memory", "halve=2Gi,1024Mi"],
            "--memory halve: the request 2Gi is above the limit 1024Mi, which"
            " Kubernetes refuses: write --memory halve=REQUEST,LIMIT with the request at most the limit",
        ),
        (
            ["--cpu", "select=1500m,1"],
            "--cpu select: the request 1500m is above the limit 1, which Kubernetes"
            " refuses: write --cpu select=REQUEST,LIMIT with the request at most the limit",
        ),
    ],
)
def test_a_bad_size_is_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "sized.yaml"
    assert main(["compile", "-o", str(out), *flags]) == 1
    assert capsys.readouterr().err.strip() == f"bakeoff: error: {message}"
    assert not out.exists()


def test_bad_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("variants:\n  - {name: a, model: {type: rnn}}\n")
    assert main(["compile", "--config", str(bad), "-o", str(tmp_path / "x.yaml")]) == 1
    assert (
        capsys.readouterr().err.strip() == f"bakeoff: error: {bad}: variant 'a': model.type: unknown architecture 'rnn'"
        " (known: cnn, mlp, resnet, backbone)"
    )
    assert not (tmp_path / "x.yaml").exists()
