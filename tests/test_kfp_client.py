"""upload, submit, schedule and schedules through the real CLI and kfp.Client, against a KFP API: each test that
takes `server` runs against the fake held to KFP's spec (unit lane) and against the kfp lane's real KFP 2.16.0 API
server (`make test-kfp`). A test that takes `fake` needs what only the fake does: its docstring or comment says what.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import http.server
import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.environment import IMAGE_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.pipelines.cli.main import main
from bakeoff.pipelines.kfp_client.parameters import parse_params, pipeline_parameters
from bakeoff.pipelines.kfp_client.triggers import validate_cron
from tests.conftest import free_port
from tests.fake_kfp_api import SPEC_PATH, FakeKfpApi, stored_spec
from tests.kfp_fixtures import (  # noqa: F401  (fixtures)
    KfpApi,
    clean_environment,
    compile_once,
    fake,
    real_kfp_backend,
    server,
)

pytestmark = pytest.mark.unit

NOTHING = {"pipelines": 0, "versions": 0, "experiments": 0, "runs": 0, "recurring_runs": 0}
REACH = "e.g. `kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and --host http://localhost:8080"
CREDENTIALS = (
    "pass --token, set KF_PIPELINES_TOKEN or KF_PIPELINES_SA_TOKEN_PATH, or pass --cookies from a browser login"
)
TOKEN = "tok-3f9c1d7e-never-print-me"


IMAGE = "registry.example/you/bakeoff:1"  # an image of the user's, as upload, submit and schedule require


@pytest.fixture(autouse=True)
def users_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command here names the user's image through the variable, unless a test takes it away."""
    monkeypatch.setenv(IMAGE_ENV, IMAGE)


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def error(self) -> str:
        """The one error line, after checking that it is the only thing on stderr."""
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


@pytest.fixture
def bakeoff(capsys: pytest.CaptureFixture) -> Callable[..., Result]:
    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="module")
def parameters(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The compiled pipeline's input parameters, as the unknown-parameter message lists them."""
    from bakeoff.pipelines.compiling import compile_pipeline
    from bakeoff.pipelines.pipeline import Cluster

    compiled = compile_pipeline(tmp_path_factory.mktemp("compiled") / "bakeoff.yaml", cluster=Cluster())
    spec = next(iter(yaml.safe_load_all(compiled.read_text(encoding="utf-8"))))
    return ", ".join(sorted(pipeline_parameters(spec)))


def only(mapping: dict) -> dict:
    (value,) = mapping.values()
    return value


def nothing_sent(server: KfpApi) -> bool:
    """Nothing exists on the server; the fake also saw no request at all."""
    return server.created() == NOTHING and (not isinstance(server, FakeKfpApi) or server.calls == [])


def spec_validated(server: KfpApi, **counts: int) -> bool:
    """The fake held that many requests of each operation to KFP's spec (the real server has its own gateway)."""
    return not isinstance(server, FakeKfpApi) or all(
        server.validated.count(operation) == count for operation, count in counts.items()
    )


def pipeline_spec(version: dict) -> dict:
    """The PipelineSpec of a version as the server answers it, without its platform spec (stored_spec)."""
    spec = version["pipeline_spec"]
    return spec.get("pipeline_spec", spec)


def executor_images(version: dict) -> set[str]:
    executors = pipeline_spec(version)["deploymentSpec"]["executors"]
    return {executor["container"]["image"] for executor in executors.values()}


def by_name(versions: dict[str, dict]) -> dict[str, dict]:
    return {version["name"]: version for version in versions.values()}


# ------------------------------------------------------------------------------------------------ upload


def test_upload_creates_the_pipeline_then_the_same_name_adds_versions(server: KfpApi, bakeoff) -> None:
    result = bakeoff("upload", "--host", server.url)
    assert result.code == 0, result.err
    pipeline, version = only(server.pipelines), only(server.versions)
    assert (pipeline["name"], version["name"], version["pipeline_id"]) == (
        "bakeoff",
        "bakeoff",
        pipeline["pipeline_id"],
    )
    assert result.out == (
        f"created pipeline 'bakeoff' (id {pipeline['pipeline_id']}) with version 'bakeoff' (id "
        f"{version['pipeline_version_id']})\n"
        f"{server.url}/#/pipelines/details/{pipeline['pipeline_id']}/version/{version['pipeline_version_id']}\n"
    )
    assert pipeline_spec(version)["pipelineInfo"]["name"] == "bakeoff"

    result = bakeoff(
        "upload", "--host", server.url, "--version", "v2", "--image", "registry.example/bakeoff:2", "--parallelism", "2"
    )
    assert result.code == 0, result.err
    assert len(server.pipelines) == 1 and len(server.versions) == 2
    v2 = by_name(server.versions)["v2"]
    assert result.out == (
        f"added version 'v2' (id {v2['pipeline_version_id']}) to pipeline 'bakeoff' (id {pipeline['pipeline_id']})\n"
        f"{server.url}/#/pipelines/details/{pipeline['pipeline_id']}/version/{v2['pipeline_version_id']}\n"
    )
    assert executor_images(v2) == {"registry.example/bakeoff:2"}, "upload compiles with the same options as compile"

    result = bakeoff("upload", "--host", server.url)
    assert result.code == 0, result.err
    (v3,) = [name for name in by_name(server.versions) if name not in ("bakeoff", "v2")]
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", v3), v3

    result = bakeoff("upload", "--host", server.url, "--version", "v2")
    assert (result.code, result.out) == (1, "")
    assert result.error == (
        "bakeoff: error: pipeline 'bakeoff' already has a version 'v2': choose another --version, or leave it out "
        "for a new name"
    )
    assert len(server.versions) == 3
    assert spec_validated(server, UploadPipeline=1, UploadPipelineVersion=2)


SENDING = {"upload": ["upload"], "submit": ["submit"], "schedule": ["schedule", "--every", "6h"]}


@pytest.mark.parametrize("command", SENDING.values(), ids=SENDING.keys())
def test_no_image_is_refused_in_one_line_before_anything_is_sent(
    server: KfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Without --image or its variable the pipeline would name the project's default image, which nobody publishes."""
    monkeypatch.delenv(IMAGE_ENV)
    result = bakeoff(*command, "--host", server.url)
    assert (result.code, result.out) == (1, "")
    assert result.error == (
        "bakeoff: error: --image is missing, and nobody publishes the default ghcr.io/bakeoff/bakeoff:0.1.0, so "
        "every pod"
        " would fail to pull it: build and push yours (make image IMAGE=REGISTRY/bakeoff:TAG; docker push"
        " REGISTRY/bakeoff:TAG), then pass --image REGISTRY/bakeoff:TAG or set BAKEOFF_IMAGE"
    )
    assert nothing_sent(server)


def test_the_flag_names_the_image_over_the_variable(server: KfpApi, bakeoff) -> None:
    assert bakeoff("upload", "--host", server.url, "--version", "from-the-variable").code == 0
    flag = bakeoff("upload", "--host", server.url, "--version", "from-the-flag", "--image", "registry.example/other:2")
    assert flag.code == 0, flag.err
    versions = by_name(server.versions)
    assert executor_images(versions["from-the-variable"]) == {IMAGE}
    assert executor_images(versions["from-the-flag"]) == {"registry.example/other:2"}


def test_compile_says_when_the_file_names_the_unpublished_default_image(
    bakeoff, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The file is for the UI's "Upload pipeline", which no check of ours sees: compile says so while it still can."""
    monkeypatch.delenv(IMAGE_ENV)
    result = bakeoff("compile", "-o", str(tmp_path / "default.yaml"))
    assert result.code == 0, result.err
    budget = (
        f"bakeoff: {DEFAULT_CONFIG}'s search.budget (15 min) is for runs on this machine: the compiled pipeline trains"
        " the search as written (--budget plans it on this machine's costs)"
    )
    assert result.err.splitlines() == [
        f"compiled the pipeline to {tmp_path / 'default.yaml'} (image ghcr.io/bakeoff/bakeoff:0.1.0)",
        budget,
        "bakeoff: nobody publishes ghcr.io/bakeoff/bakeoff:0.1.0, the default image: compile with --image "
        "REGISTRY/bakeoff:TAG,"
        " your build of images/Dockerfile, before you upload this file",
    ]
    result = bakeoff("compile", "-o", str(tmp_path / "yours.yaml"), "--image", IMAGE)
    assert result.code == 0 and result.err.splitlines() == [
        f"compiled the pipeline to {tmp_path / 'yours.yaml'} (image {IMAGE})",
        budget,
    ]


def test_upload_of_a_new_pipeline_names_its_first_version(server: KfpApi, bakeoff) -> None:
    result = bakeoff("upload", "--host", server.url, "--name", "nightly", "--version", "first")
    assert result.code == 0, result.err
    pipeline, version = only(server.pipelines), only(server.versions)
    assert (pipeline["name"], version["name"]) == ("nightly", "first")
    assert result.out.startswith(
        f"created pipeline 'nightly' (id {pipeline['pipeline_id']}) with version 'first' (id "
        f"{version['pipeline_version_id']})\n"
    )
    assert spec_validated(server, PipelineService_CreatePipeline=1)


def test_upload_package_sends_a_compiled_file_as_it_is(server: KfpApi, bakeoff, tmp_path: Path) -> None:
    """The file goes up as it is: the version holds its spec, whatever this checkout would compile now."""
    package = tmp_path / "mine.yaml"
    assert bakeoff("compile", "-o", str(package), "--image", IMAGE, "--parallelism", "5").code == 0
    before = package.read_bytes()
    result = bakeoff("upload", "--host", server.url, "--package", str(package), "--version", "v1")
    assert (result.code, result.err) == (0, "")
    version = only(server.versions)
    assert version["pipeline_spec"] == stored_spec(*yaml.safe_load_all(before))
    assert package.read_bytes() == before
    assert result.out.startswith(
        f"created pipeline 'bakeoff' (id {only(server.pipelines)['pipeline_id']}) with version"
    )

    as_json = tmp_path / "mine.json"  # kfp's compiler writes JSON too, and the API server reads it by its name
    as_json.write_text(json.dumps(pipeline_spec(version)))
    result = bakeoff("upload", "--host", server.url, "--package", str(as_json), "--version", "v2")
    assert result.code == 0, result.err
    assert by_name(server.versions)["v2"]["pipeline_spec"] == pipeline_spec(version)


def test_upload_package_of_the_committed_file_says_its_image_is_unpublished(
    server: KfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bakeoff.pipelines.compiling import COMPILED

    monkeypatch.delenv(IMAGE_ENV)  # no image of the user's is needed: the file names its own
    result = bakeoff("upload", "--host", server.url, "--package", str(COMPILED))
    assert result.code == 0
    assert result.error == (
        f"bakeoff: {COMPILED} runs ghcr.io/bakeoff/bakeoff:0.1.0, the default image, which nobody publishes: its pods"
        " will not start unless your cluster has that image; compile with --image REGISTRY/bakeoff:TAG"
    )
    assert only(server.versions)["pipeline_spec"] == stored_spec(*yaml.safe_load_all(COMPILED.read_text()))


PACKAGE_ERRORS = {  # name, content, the line up to the fix ({where}: --package and the path)
    "not a package's name": (
        "notes.txt",
        "version: 1\n",
        "{where} is not named .yaml, .yml or .json, and the API server reads a package's format from its name",
    ),
    "missing": (None, None, "cannot read {where} (No such file or directory)"),
    "not YAML": ("bad.yaml", "root: [unclosed\n", "{where} is not YAML or JSON text at line 2"),
    "not UTF-8": ("binary.yaml", b"\xff\xfe\x00pipeline", "{where} is not YAML or JSON text"),
    "empty": ("empty.yaml", "", "{where} is not a compiled KFP pipeline (no pipelineInfo and root)"),
    "a variants file": (
        "variants.yaml",
        "variants:\n  - {name: a}\n",
        "{where} is not a compiled KFP pipeline (no pipelineInfo and root)",
    ),
    "a field KFP does not know": (
        "odd.yaml",
        "pipelineInfo: {name: x}\nroot: {dag: {tasks: {}}}\nschemaVersion: 2.1.0\nsdkVersion: kfp-2\nextra: 1\n",
        '{where} is not a KFP pipeline spec (Message type "ml_pipelines.PipelineSpec" has no field named "extra" at'
        ' "PipelineSpec". Available Fields(except extensions): ',
    ),
    "no name": (
        "anon.yaml",
        "pipelineInfo: {name: ''}\nroot: {dag: {tasks: {}}}\n",
        "{where} names no pipeline (pipelineInfo.name)",
    ),
}


@pytest.mark.parametrize("name, content, problem", PACKAGE_ERRORS.values(), ids=PACKAGE_ERRORS.keys())
def test_upload_package_that_is_no_package_is_one_line_and_nothing_is_sent(
    server: KfpApi, bakeoff, tmp_path: Path, name: str | None, content: str | bytes | None, problem: str
) -> None:
    path = tmp_path / (name or "absent.yaml")
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = bakeoff("upload", "--host", server.url, "--package", str(path))
    assert result.code == 1
    assert result.error.startswith("bakeoff: error: " + problem.format(where=f"--package {str(path)!r}"))
    assert result.error.endswith(": pass a file that `bakeoff compile` (or kfp's compiler) wrote")
    assert nothing_sent(server)


def test_upload_package_refuses_the_flags_it_would_ignore(server: KfpApi, bakeoff) -> None:
    from bakeoff.pipelines.compiling import COMPILED

    result = bakeoff(
        "upload", "--host", server.url, "--package", str(COMPILED), "--parallelism", "5", "--cpu", "ingest=2"
    )
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: --package uploads {str(COMPILED)!r} as it is, so --parallelism and --cpu would change"
        " nothing: drop them, or leave out --package to compile the pipeline with them"
    )
    assert nothing_sent(server)


def test_upload_to_a_multi_user_kfp_is_private_unless_shared_is_asked_for(fake: FakeKfpApi, bakeoff) -> None:
    """As the KFP UI's upload: private to the profile by default; shared, which every user sees and runs, only when
    asked. An upload without either created a shared pipeline without a word. Fake only: the lane's KFP is
    single-user."""
    fake.multi_user = True
    result = bakeoff("upload", "--host", fake.url)
    assert (result.code, result.error) == (
        1,
        f"bakeoff: error: the KFP API at {fake.url} is multi-user: pass --namespace with your profile's namespace"
        " for a private pipeline, or --shared for one that every user sees",
    )
    assert fake.calls == ["HealthzService_GetHealthz"] and fake.created() == NOTHING

    result = bakeoff("upload", "--host", fake.url, "--namespace", "team-a")
    assert result.code == 0, result.err
    private = only(fake.pipelines)
    assert private["namespace"] == "team-a"
    assert result.out.startswith(f"created pipeline 'bakeoff' (id {private['pipeline_id']}) in namespace 'team-a' with")

    result = bakeoff("upload", "--host", fake.url, "--shared")
    assert result.code == 0, result.err
    (shared,) = [p for p in fake.pipelines.values() if p["pipeline_id"] != private["pipeline_id"]]
    assert shared["namespace"] == ""
    (version,) = [v for v in fake.versions.values() if v["pipeline_id"] == shared["pipeline_id"]]
    assert result.out.splitlines()[0] == (
        f"created shared pipeline 'bakeoff' (id {shared['pipeline_id']}) with version 'bakeoff' (id"
        f" {version['pipeline_version_id']}): every user of this KFP sees it and may run it"
    )
    result = bakeoff("upload", "--host", fake.url, "--shared", "--version", "v2")
    assert result.code == 0, result.err
    assert result.out.startswith("added version 'v2' (id ")
    assert f"to shared pipeline 'bakeoff' (id {shared['pipeline_id']}): every user" in result.out


def test_shared_and_a_namespace_are_one_line(server: KfpApi, bakeoff) -> None:
    result = bakeoff("upload", "--host", server.url, "--shared", "--namespace", "team-a")
    assert (result.code, result.error) == (
        1,
        "bakeoff: error: --shared and --namespace are both given: --namespace uploads a private pipeline to that"
        " profile, --shared one that every user sees; choose one",
    )
    assert nothing_sent(server)


# ------------------------------------------------------------------------------------------------ submit


def test_submit_prints_the_run_and_its_url_and_sends_typed_parameters(server: KfpApi, bakeoff) -> None:
    variants = [{"name": "tiny", "model": {"type": "mlp", "hidden_units": [16]}}]
    result = bakeoff(
        "submit",
        "--host",
        server.url,
        "--name",
        "nightly check",
        "--param",
        "shards=4",
        "--param",
        "metric=val_loss",
        "--param",
        "max_train_examples=2048",
        "--param",
        f"variants={json.dumps(variants)}",
    )
    assert result.code == 0, result.err
    run, experiment = only(server.runs), only(server.experiments)
    assert result.out == (
        f"submitted run {run['run_id']} ('nightly check') to experiment 'bakeoff'\n"
        f"{server.url}/#/runs/details/{run['run_id']}\n"
    )
    parameters = run["runtime_config"]["parameters"]
    assert parameters == {"shards": 4, "metric": "val_loss", "max_train_examples": 2048, "variants": variants}
    assert type(parameters["shards"]) is int
    assert (run["display_name"], run["experiment_id"], experiment["display_name"]) == (
        "nightly check",
        experiment["experiment_id"],
        "bakeoff",
    )
    assert run["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "bakeoff"
    assert "kubernetes" in json.dumps(run["pipeline_spec"]["platform_spec"]), (
        "the store secret travels as kfp-kubernetes platform spec"
    )
    assert spec_validated(server, RunService_CreateRun=1, ExperimentService_CreateExperiment=1)

    assert bakeoff("submit", "--host", server.url).code == 0
    assert len(server.runs) == 2 and len(server.experiments) == 1, "the experiment is reused"


def test_submit_wait_follows_the_run_and_exits_0_when_it_succeeds(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: the outcome is the fake's to set (the lane's real runs end with the pipeline's own steps)."""
    fake.polls_until_done = 3
    result = bakeoff("submit", "--host", fake.url, "--wait")
    assert result.code == 0, result.err
    run_id = only(fake.runs)["run_id"]
    assert result.err == f"run {run_id}: RUNNING\nrun {run_id}: SUCCEEDED\n"
    assert result.out.endswith(f"{fake.url}/#/runs/details/{run_id}\nrun {run_id} succeeded\n")
    assert only(fake.runs)["_polls"] == 3


def test_submit_wait_exits_1_with_the_reason_when_the_run_fails(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: a failure injected with its reason."""
    fake.run_outcome = "FAILED"
    result = bakeoff("submit", "--host", fake.url, "--wait")
    run_id = only(fake.runs)["run_id"]
    assert result.code == 1
    assert result.err.splitlines() == [
        f"run {run_id}: FAILED",
        f"bakeoff: error: run {run_id} ended FAILED ({fake.run_error}): see its logs at "
        f"{fake.url}/#/runs/details/{run_id}",
    ]


# ---------------------------------------------------------------------------------------------- schedule


def test_schedule_with_cron_maps_every_option_into_the_recurring_run(server: KfpApi, bakeoff) -> None:
    result = bakeoff(
        "schedule",
        "--host",
        server.url,
        "--cron",
        "0 0 3 * * *",
        "--max-concurrency",
        "2",
        "--no-catchup",
        "--start",
        "2030-01-01T00:00:00Z",
        "--end",
        "2031-01-01T02:00:00+02:00",
        "--experiment",
        "nightly",
        "--param",
        "shards=4",
    )
    assert result.code == 0, result.err
    recurring, experiment = only(server.recurring_runs), only(server.experiments)
    assert recurring["trigger"] == {
        "cron_schedule": {
            "cron": "0 0 3 * * *",
            "start_time": "2030-01-01T00:00:00Z",
            "end_time": "2031-01-01T00:00:00Z",
        }
    }
    assert (recurring["max_concurrency"], recurring.get("no_catchup"), recurring["mode"]) == ("2", True, "ENABLE")
    assert recurring["runtime_config"]["parameters"] == {"shards": 4}
    assert (recurring["display_name"], recurring["experiment_id"], experiment["display_name"]) == (
        "bakeoff cron 0 0 3 * * *",
        experiment["experiment_id"],
        "nightly",
    )
    assert result.out == (
        f"created recurring run {recurring['recurring_run_id']} ('bakeoff cron 0 0 3 * * *': cron 0 0 3 * * *, "
        "from 2030-01-01T00:00:00Z, until 2031-01-01T00:00:00Z, at most 2 at a time, no catch-up) in experiment "
        "'nightly'\n"
        f"{server.url}/#/recurringrun/details/{recurring['recurring_run_id']}\n"
    )
    assert spec_validated(server, RecurringRunService_CreateRecurringRun=1)


def test_schedule_every_interval_becomes_a_periodic_schedule(server: KfpApi, bakeoff) -> None:
    result = bakeoff("schedule", "--host", server.url, "--every", "6h", "--name", "refresh")
    assert result.code == 0, result.err
    recurring = only(server.recurring_runs)
    assert recurring["trigger"] == {"periodic_schedule": {"interval_second": str(6 * 3600)}}  # int64: a string
    assert (recurring["max_concurrency"], recurring.get("no_catchup", False), recurring["display_name"]) == (
        "1",
        False,
        "refresh",
    )


def test_schedules_list_enable_disable_delete(server: KfpApi, bakeoff) -> None:
    assert bakeoff("schedules", "list", "--host", server.url).out == f"no recurring runs on {server.url}\n"
    assert bakeoff("schedule", "--host", server.url, "--every", "90s").code == 0
    assert bakeoff("schedule", "--host", server.url, "--cron", "0 30 2 * * MON-FRI", "--max-concurrency", "3").code == 0
    ids = {r["display_name"]: r["recurring_run_id"] for r in server.recurring_runs.values()}
    periodic, cron = ids["bakeoff every 90s"], ids["bakeoff cron 0 30 2 * * MON-FRI"]
    rows = {
        cron: f"{cron:<38}{'enabled':<10}{'cron 0 30 2 * * MON-FRI':<26}{'3':>4}  bakeoff cron 0 30 2 * * MON-FRI",
        periodic: f"{periodic:<38}{'enabled':<10}{'every 90s':<26}{'1':>4}  bakeoff every 90s",
    }
    # Newest first, as KFP sorts: created_at in whole seconds, then the id (list.go), so one second's two by their ids.
    newest = sorted(server.recurring_runs.values(), key=lambda r: (r["created_at"], r["recurring_run_id"]))[::-1]

    listing = bakeoff("schedules", "list", "--host", server.url)
    assert listing.code == 0, listing.err
    assert listing.out.splitlines() == [
        f"{'id':<38}{'status':<10}{'trigger':<26}{'max':>4}  name",
        *(rows[r["recurring_run_id"]] for r in newest),
    ]

    assert bakeoff("schedules", "disable", periodic, "--host", server.url).out == f"disabled recurring run {periodic}\n"
    assert server.recurring_runs[periodic]["status"] == "DISABLED"
    assert f"{periodic:<38}disabled" in bakeoff("schedules", "list", "--host", server.url).out
    assert bakeoff("schedules", "enable", periodic, "--host", server.url).out == f"enabled recurring run {periodic}\n"
    assert server.recurring_runs[periodic]["status"] == "ENABLED"
    assert bakeoff("schedules", "delete", periodic, "--host", server.url).out == f"deleted recurring run {periodic}\n"
    assert list(server.recurring_runs) == [cron]

    missing = bakeoff("schedules", "enable", "no-such-id", "--host", server.url)
    assert missing.code == 1
    assert (
        missing.error
        == f"bakeoff: error: no recurring run 'no-such-id' on {server.url}: `bakeoff schedules list` shows the ids"
    )


# ---------------------------------------------------------------------------------- bad input, refused early

CRON_EXAMPLE = "e.g. '0 0 3 * * *' for 03:00 every day"
LOCAL_ERRORS = {
    "five-field cron": (
        ["schedule", "--cron", "0 3 * * *"],
        "--cron '0 3 * * *' has 5 fields; KFP's cron has 6, seconds first "
        f"(second minute hour day-of-month month day-of-week): {CRON_EXAMPLE}",
    ),
    "hour out of range": (
        ["schedule", "--cron", "0 0 25 * * *"],
        f"--cron '0 0 25 * * *': hour field '25' is invalid (25 is outside 0-23): {CRON_EXAMPLE}",
    ),
    "unknown weekday": (
        ["schedule", "--cron", "0 0 3 * * MON-FUN"],
        f"--cron '0 0 3 * * MON-FUN': day-of-week field 'MON-FUN' is invalid ('FUN' is not a number): {CRON_EXAMPLE}",
    ),
    "cron and every": (
        ["schedule", "--cron", "0 0 3 * * *", "--every", "6h"],
        "--cron and --every are both given: choose one trigger",
    ),
    "no trigger": (["schedule"], f"a schedule needs a trigger: pass --cron ({CRON_EXAMPLE}) or --every (e.g. 6h)"),
    "bad interval": (
        ["schedule", "--every", "6 hours"],
        "--every '6 hours' is not an interval: write a whole number above 0 and s, m, h or d, e.g. 90s, 30m, 6h, 1d",
    ),
    "zero interval": (
        ["schedule", "--every", "0m"],
        "--every '0m' is not an interval: write a whole number above 0 and s, m, h or d, e.g. 90s, 30m, 6h, 1d",
    ),
    "end before start": (
        ["schedule", "--every", "1d", "--start", "2031-01-01", "--end", "2030-06-01T00:00:00Z"],
        "--end 2030-06-01T00:00:00Z is not after --start 2031-01-01T00:00:00Z: choose a later --end",
    ),
    "end in the past": (
        ["schedule", "--every", "1d", "--end", "2001-01-01T00:00:00Z"],
        "--end 2001-01-01T00:00:00Z is in the past, so nothing would ever run: choose a later --end",
    ),
    "bad start": (
        ["schedule", "--every", "1d", "--start", "tomorrow"],
        "--start 'tomorrow' is not an ISO 8601 time: write e.g. 2030-01-31T03:00:00Z",
    ),
    "too much concurrency": (
        ["schedule", "--every", "1d", "--max-concurrency", "11"],
        "--max-concurrency 11 is outside 1-10, the range KFP accepts: choose one within it",
    ),
    "unknown param": (
        ["submit", "--param", "epochs=3"],
        "--param 'epochs': the pipeline has no such parameter: use one of {parameters}",
    ),
    "param of the wrong type": (
        ["submit", "--param", "shards=four"],
        "--param shards='four': shards takes a whole number (NUMBER_INTEGER): write e.g. --param shards=8",
    ),
    "float for an integer": (
        ["schedule", "--every", "1d", "--param", "timeout_seconds=1.5"],
        "--param timeout_seconds='1.5': timeout_seconds takes a whole number (NUMBER_INTEGER): write e.g. --param "
        "timeout_seconds=8",
    ),
    "object for a list": (
        ["submit", "--param", 'variants={"name": "x"}'],
        "--param variants='{\"name\": \"x\"}': variants takes a JSON list (LIST): write e.g. --param variants='[1, 2]'",
    ),
    "param without value": (
        ["submit", "--param", "shards"],
        "--param 'shards' is not KEY=VALUE: write e.g. --param shards=4",
    ),
    "param twice": (
        ["submit", "--param", "shards=4", "--param", "shards=5"],
        "--param 'shards' is given twice: give each parameter once",
    ),
    "direction, now the metric's": (
        ["submit", "--param", "direction=min"],
        "--param direction: the metric sets its own direction (val_accuracy: max, val_loss: min); drop --param "
        "direction",
    ),
    "unknown metric": (
        ["schedule", "--every", "1d", "--param", "metric=bogus"],
        "unknown selection metric 'bogus': use one of val_accuracy, val_loss",
    ),
    "halving's eta below 2, the check step's rule": (
        ["submit", "--param", "eta=1"],
        "the run's check step would refuse it, so nothing was created: eta: must be at least 2, got 1",
    ),
    "no variants, the check step's rule": (
        ["schedule", "--every", "1d", "--param", "variants=[]"],
        "the run's check step would refuse it, so nothing was created: variants: expected a non-empty list of"
        " variants, got []",
    ),
    "a folder store, which each pod would have its own of": (
        ["submit", "--param", "store=/tmp/store"],
        "the run's check step would refuse it, so nothing was created: store '/tmp/store' is not one the cluster's"
        " steps can reach: write s3://BUCKET/PREFIX (default s3://mlpipeline/private/{namespace}/bakeoff)",
    ),
    "insecure and ca-cert": (
        ["upload", "--insecure", "--ca-cert", "ca.pem"],
        "--insecure and --ca-cert are both given: verify with --ca-cert, or skip verification with --insecure",
    ),
    "empty token": (
        ["submit", "--token", " "],
        "--token is empty: pass the token itself, or leave --token out and set KF_PIPELINES_TOKEN",
    ),
    "empty experiment": (
        ["submit", "--experiment", ""],
        "--experiment is empty: pass a name, or leave --experiment out for the default",
    ),
}


@pytest.mark.parametrize("args, message", LOCAL_ERRORS.values(), ids=LOCAL_ERRORS.keys())
def test_bad_input_is_one_line_and_nothing_reaches_the_server(
    server: KfpApi, bakeoff, parameters: str, args: list[str], message: str
) -> None:
    result = bakeoff(*args, "--host", server.url)
    assert (result.code, result.out) == (1, "")
    assert result.error == f"bakeoff: error: {message}".replace("{parameters}", parameters)
    assert nothing_sent(server)


def test_a_host_without_scheme_or_no_host_at_all(bakeoff) -> None:
    result = bakeoff("submit", "--host", "localhost:8080")
    assert (result.code, result.error) == (
        1,
        "bakeoff: error: --host 'localhost:8080' is not an http(s) URL: "
        "write e.g. http://localhost:8080 or https://kubeflow.example.com/pipeline",
    )
    result = bakeoff("schedules", "list")
    assert (result.code, result.error) == (
        1,
        f"bakeoff: error: no KFP API address: pass --host URL or set KF_PIPELINES_ENDPOINT ({REACH})",
    )


def test_an_unreadable_token_file_is_missing_credentials(
    server: KfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(tmp_path / "token"))
    result = bakeoff("upload", "--host", server.url)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: cannot read the token file '{tmp_path / 'token'}' that KF_PIPELINES_SA_TOKEN_PATH names "
        "(No such file or directory): fix or unset KF_PIPELINES_SA_TOKEN_PATH, or pass --token"
    )
    assert nothing_sent(server)


# ----------------------------------------------------------------------------------- the server says no

COMMANDS = {
    "upload": ["upload"],
    "submit": ["submit", "--param", "shards=4"],
    "schedule": ["schedule", "--every", "6h"],
    "schedules list": ["schedules", "list"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_an_unreachable_host_fails_at_the_probe_in_one_line(bakeoff, command: list[str]) -> None:
    # the message names the refused connection: the probe's single try, not kfp.Client's retries, saw it
    host = f"http://127.0.0.1:{free_port()}"
    result = bakeoff(*command, "--host", host)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: cannot reach the KFP API at {host} (connection refused): "
        f"check --host and that the API is reachable from here, {REACH}"
    )


@pytest.mark.parametrize("answer, seen", [("html", "HTTP 200 text/html"), ("not-found", "HTTP 404 text/plain")])
def test_a_host_that_is_not_a_kfp_api(fake: FakeKfpApi, bakeoff, answer: str, seen: str) -> None:
    """Fake only: its answers as another server's (the kube-apiserver and S3 refusals below are real servers)."""
    fake.answer = answer
    result = bakeoff("submit", "--host", fake.url)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: {fake.url} is not a Kubeflow Pipelines API (GET /apis/v2beta1/healthz answered {seen}): "
        f"pass the KFP API address as --host, {REACH}"
    )


def test_a_login_redirect_or_an_unhealthy_api(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: a login proxy in front of KFP, and an unhealthy API, are answers injected."""
    fake.answer = "login"
    result = bakeoff("schedule", "--host", fake.url, "--every", "1d")
    assert (result.code, result.error) == (
        1,
        f"bakeoff: error: the KFP API at {fake.url} redirects to {fake.url}/dex/auth, most likely a login page: "
        "pass --token, or --cookies with the session cookie of a browser login",
    )
    fake.answer = "unavailable"
    result = bakeoff("schedule", "--host", fake.url, "--every", "1d")
    assert (result.code, result.error) == (
        1,
        f"bakeoff: error: the KFP API at {fake.url} is not healthy (GET /apis/v2beta1/healthz answered HTTP 503): "
        "check the ml-pipeline deployment, e.g. `kubectl -n kubeflow get pods`",
    )


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_401_without_credentials(fake: FakeKfpApi, bakeoff, command: list[str]) -> None:
    """Fake only, as every credentials test: the lane's single-user KFP checks none (Kubeflow's auth proxy does)."""
    fake.token = TOKEN
    result = bakeoff(*command, "--host", fake.url)
    assert result.code == 1
    assert (
        result.error
        == f"bakeoff: error: the KFP API at {fake.url} requires credentials (HTTP 401: Unauthenticated): {CREDENTIALS}"
    )
    assert fake.created() == NOTHING


def test_401_with_a_rejected_token_does_not_show_it(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: a single-user KFP rejects no token."""
    fake.token = TOKEN
    result = bakeoff("submit", "--host", fake.url, "--token", "tok-stale-0000-never-print-me")
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: the KFP API at {fake.url} rejected the credentials (HTTP 401: Unauthenticated): "
        "pass a fresh token or fresh --cookies"
    )
    assert "never-print-me" not in result.out + result.err
    assert fake.created() == NOTHING


def test_403_from_kfp_itself_stops_before_anything_is_created(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: KFP's own authorization runs in multi-user mode, which the lane's KFP is not."""
    fake.healthz_open, fake.forbidden = True, True  # KFP's healthz needs no login; its authorization says no later
    result = bakeoff("submit", "--host", fake.url, "--namespace", "team-a", "--token", TOKEN)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: the KFP API at {fake.url} denied access "
        "(HTTP 403: PermissionDenied: access to the namespace is forbidden): "
        "use credentials allowed in namespace 'team-a', or pass --namespace with a profile you belong to"
    )
    assert "ExperimentService_ListExperiments" in fake.calls
    assert fake.created() == NOTHING


def test_403_from_a_proxy_in_front(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: a refusing proxy, injected."""
    fake.forbidden = True
    result = bakeoff("upload", "--host", fake.url)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: the KFP API at {fake.url} denied access "
        "(HTTP 403: PermissionDenied: access to the namespace is forbidden): "
        "use credentials allowed in this namespace, or pass --namespace with a profile you belong to"
    )
    assert fake.calls == ["HealthzService_GetHealthz"] and fake.created() == NOTHING


@contextlib.contextmanager
def kube_apiserver_refusing() -> Iterator[str]:
    """A server answering every request as a kube-apiserver answers an anonymous one where anonymous may do nothing:
    403 with a Kubernetes Status object (what --host on the cluster's API address, not KFP's, meets)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f'forbidden: User "system:anonymous" cannot get path "{self.path}"',
                "reason": "Forbidden",
                "details": {},
                "code": 403,
            }
            data = json.dumps(status).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["stand-in", pytest.param("real", marks=pytest.mark.kfp)])
def kube_apiserver(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[str]]]:
    """A Kubernetes API server that refuses an anonymous request, and the flags that reach it: the stand-in above, or
    the kfp lane's real one (its own CA's certificate, which `--ca-cert` passes)."""
    if request.param == "real":
        plane = request.getfixturevalue("real_kfp_backend").plane
        yield plane.server, ["--ca-cert", str(plane.ca)]
        return
    with kube_apiserver_refusing() as host:
        yield host, []


def test_403_from_a_kubernetes_api_server_says_it_is_not_kfp(kube_apiserver: tuple[str, list[str]], bakeoff) -> None:
    host, flags = kube_apiserver
    result = bakeoff("upload", "--host", host, *flags)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: {host} is not a Kubeflow Pipelines API but a Kubernetes API server, which refused GET"
        ' /apis/v2beta1/healthz (HTTP 403: forbidden: User "system:anonymous" cannot get path'
        f' "/apis/v2beta1/healthz"): pass the KFP API address as --host, {REACH}'
    )


def test_403_from_an_s3_server_says_it_is_not_kfp(s3_endpoint: str, bakeoff) -> None:
    """SeaweedFS's S3 port, KFP 2.16's own store, asked without keys: its XML error, not KFP's refusal."""
    host = f"http://{s3_endpoint}"
    result = bakeoff("submit", "--host", host)
    assert result.code == 1
    assert result.error == (
        f"bakeoff: error: {host} is not a Kubeflow Pipelines API but an S3 server, which refused GET"
        f" /apis/v2beta1/healthz (HTTP 403: AccessDenied): pass the KFP API address as --host, {REACH}"
    )


def test_multi_user_kfp_needs_a_namespace(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: multi-user mode (the lane's KFP is single-user)."""
    fake.multi_user = True
    result = bakeoff("schedule", "--host", fake.url, "--every", "1d")
    assert (result.code, result.error) == (
        1,
        f"bakeoff: error: the KFP API at {fake.url} is multi-user: pass --namespace with your profile's namespace",
    )
    assert fake.created() == NOTHING

    assert bakeoff("schedule", "--host", fake.url, "--every", "1d", "--namespace", "team-a").code == 0
    assert only(fake.experiments)["namespace"] == "team-a"
    listing = bakeoff("schedules", "list", "--host", fake.url, "--namespace", "team-a")
    assert listing.code == 0 and "bakeoff every 1d" in listing.out
    assert (
        bakeoff("schedules", "list", "--host", fake.url, "--namespace", "team-b").out
        == f"no recurring runs on {fake.url} in namespace 'team-b'\n"
    )


# ------------------------------------------------------------------------------------------- credentials


@pytest.mark.parametrize("source", ["flag", "token file", "variable"])
def test_the_token_reaches_the_server_as_bearer_and_is_never_printed(
    fake: FakeKfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str
) -> None:
    """Fake only: it captures the Authorization header each request carried."""
    fake.token = TOKEN
    flags = []
    if source == "flag":
        flags = ["--token", TOKEN]
    elif source == "token file":
        (tmp_path / "token").write_text(TOKEN + "\n")
        monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(tmp_path / "token"))
        monkeypatch.setenv("KF_PIPELINES_TOKEN", "tok-lower-precedence")
    else:
        monkeypatch.setenv("KF_PIPELINES_TOKEN", TOKEN)
    result = bakeoff("submit", "--host", fake.url, *flags)
    assert result.code == 0, result.err
    assert len(fake.runs) == 1
    assert set(fake.authorization_headers) == {f"Bearer {TOKEN}"}
    assert TOKEN not in result.out + result.err


def test_cookies_of_a_browser_session(fake: FakeKfpApi, bakeoff) -> None:
    """Fake only: it requires the cookie, which a single-user KFP never looks at."""
    fake.cookie = "authservice_session=MTcwOTk-never-print-me"
    result = bakeoff(
        "schedule", "--host", fake.url, "--every", "1d", "--cookies", "authservice_session=MTcwOTk-never-print-me"
    )
    assert result.code == 0, result.err
    assert len(fake.recurring_runs) == 1
    assert "never-print-me" not in result.out + result.err


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with `cryptography`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


def test_tls_verification_ca_cert_and_insecure(certificate: tuple[Path, Path], bakeoff) -> None:
    """Fake only: it serves https with a certificate of the test's; the lane's KFP serves plain http, as in-cluster."""
    with FakeKfpApi(tls=certificate) as fake:
        refused = bakeoff("upload", "--host", fake.url)
        assert refused.code == 1
        assert re.fullmatch(
            rf"bakeoff: error: TLS to {re.escape(fake.url)} failed \(self[- ]signed certificate\): "
            r"pass --ca-cert FILE with the CA that signed its certificate, or --insecure",
            refused.error,
        )
        assert fake.created() == NOTHING

        missing = bakeoff("upload", "--host", fake.url, "--ca-cert", "/nonexistent/ca.pem")
        assert missing.error == (
            "bakeoff: error: --ca-cert '/nonexistent/ca.pem' is not a file: "
            "pass the PEM file of the CA that signed the API's certificate"
        )

        assert bakeoff("upload", "--host", fake.url, "--ca-cert", str(certificate[0])).code == 0
        insecure = bakeoff("upload", "--host", fake.url, "--insecure", "--version", "v2")
        assert (insecure.code, insecure.err) == (0, "")
        assert len(fake.versions) == 2 and fake.violations == []


# ------------------------------------------------------------------------------------ pieces on their own


def test_parameter_types_the_pipeline_does_not_use_yet() -> None:
    types = {"rate": "NUMBER_DOUBLE", "fast": "BOOLEAN", "extra": "STRUCT", "tags": "LIST", "note": "STRING"}
    values = parse_params(["rate=0.25", "fast=True", 'extra={"a": [1]}', "tags=[]", "note=a=b"], types)
    assert values == {"rate": 0.25, "fast": True, "extra": {"a": [1]}, "tags": [], "note": "a=b"}
    with pytest.raises(
        BakeoffError, match=r"^--param fast='yes': fast takes true or false \(BOOLEAN\): write e.g. --param fast=true$"
    ):
        parse_params(["fast=yes"], types)
    with pytest.raises(BakeoffError, match=r"^--param rate='nan': rate takes a number \(NUMBER_DOUBLE\)"):
        parse_params(["rate=nan"], types)


@pytest.mark.parametrize(
    "cron", ["0 0 3 * * *", "*/15 * * * * ?", "0 0 9 ? * 2-6", "0 0,30 8-18/2 1 JAN-MAR sun", "@daily"]
)
def test_valid_crons_pass(cron: str) -> None:
    expected = cron.lower() if cron.startswith("@") else cron
    assert validate_cron(cron) == expected


def test_the_fake_rejects_what_kfp_would(server: KfpApi) -> None:
    """The checks above mean something only if the fake really refuses a body off the spec, as KFP's gateway does."""

    def post(path: str, body: dict) -> int:
        request = urllib.request.Request(
            server.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    assert post("/apis/v2beta1/experiments", {"display_name": "x", "colour": "red"}) == 400
    assert post("/apis/v2beta1/recurringruns", {"display_name": "x", "max_concurrency": "many"}) == 400
    assert post("/apis/v2beta1/recurringruns", {"display_name": "x", "mode": "SOMETIMES"}) == 400
    assert post("/apis/v2beta1/runs", {"display_name": "x", "created_at": "yesterday"}) == 400
    assert (
        post(
            "/apis/v2beta1/runs",
            {"display_name": "x", "pipeline_spec": {"pipelineInfo": {"name": "x"}, "root": {}, "colour": 1}},
        )
        == 500  # KFP's CreateRun answers a spec it cannot parse as its own failure (tests/fake_kfp_api.py)
    )
    assert server.created() == NOTHING
    if isinstance(server, FakeKfpApi):  # and it names what broke the spec
        problems = [violation.problem for violation in server.violations]
        assert len(problems) == 5 and "colour" in problems[0] and "many" in problems[1] and "SOMETIMES" in problems[2]
        assert SPEC_PATH.is_file()
        server.violations.clear()


def test_the_console_script(server: KfpApi, tmp_path: Path) -> None:
    """The installed `bakeoff` entry point, in its own process, as a user runs it."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KF_PIPELINES")}, "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "bakeoff"), "upload", "--host", server.url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    pipeline = only(server.pipelines)
    assert result.stdout.startswith(f"created pipeline 'bakeoff' (id {pipeline['pipeline_id']})")


@pytest.mark.parametrize("create", ["submit", "schedule"])
def test_run_parameters_a_server_would_refuse_stop_before_any_call(create: str) -> None:
    """validatePipelineJobInputs (backend/src/apiserver/template/v2_template.go) refuses a value of another kind; the
    client says so first, naming the release, and makes no call (no experiment is created either)."""
    from bakeoff.pipelines.compiling import COMPILED
    from bakeoff.pipelines.kfp_client import runs, schedules, triggers

    no_api: Any = object()  # any call on it would fail otherwise than with the refusal
    with pytest.raises(BakeoffError) as raised:
        if create == "submit":
            runs.submit(no_api, COMPILED, "default", {"shards": "4"}, "r")
        else:
            trigger = triggers.make_trigger(None, "1h", None, None)
            schedules.schedule(no_api, COMPILED, "default", trigger, {"shards": "4"}, "s")
    assert str(raised.value) == (
        "KFP 2.5.0's API server would refuse this run (input parameter shards requires type double or integer, but"
        " the parameter value is not of number value type): fix the --param values"
    )


# ---------------------------------------------------------------- each KFP release's server, as it answers


@pytest.mark.parametrize("version", ["2.15.0", "2.16.0", "2.17.0"])
def test_every_command_sends_only_what_each_releases_api_knows(version: str, bakeoff) -> None:
    """Kubeflow 1.11 runs KFP 2.15.0 and 26.03 runs 2.16.0, whose gateways refuse 2.17's new fields (tags,
    plugins_input) as unknown: each fake serves its own release's spec (tests/contracts/). Fake only: one fake per
    release's spec, where the lane runs the releases it has checkouts of (the tests above take each command there)."""
    with FakeKfpApi(version=version) as fake:
        for command, *options in SENDING.values():
            result = bakeoff(command, *options, "--host", fake.url)
            assert result.code == 0, result.err
        assert fake.violations == [], fake.violations
        assert {"UploadPipeline", "RunService_CreateRun", "RecurringRunService_CreateRecurringRun"} <= set(
            fake.validated
        )


def test_a_release_before_2_17_refuses_2_17s_fields() -> None:
    """Fake only: the fakes of three releases' specs."""

    def create(fake: FakeKfpApi) -> int:
        body = {"name": "p", "display_name": "p", "tags": {"team": "ml"}}
        request = urllib.request.Request(
            fake.url + "/apis/v2beta1/pipelines",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    answers = {}
    for version in ("2.15.0", "2.16.0", "2.17.0"):
        with FakeKfpApi(version=version) as fake:
            answers[version] = create(fake)
    assert answers == {"2.15.0": 400, "2.16.0": 400, "2.17.0": 200}


def test_an_upload_kfp_itself_denies_answers_400_and_says_what_to_do(bakeoff) -> None:
    """The upload handler answers its authorization's refusal with 400 "Failed to create a pipeline"
    (pipeline_upload_server.go, UPLOAD_DENIED in tests/fake_kfp_api.py), not 403. Fake only: KFP authorizes in
    multi-user mode, which the lane's KFP is not."""
    with FakeKfpApi() as fake:
        fake.read_only = True  # a profile's viewer: KFP lets it list pipelines, not create one
        result = bakeoff("upload", "--host", fake.url, "--namespace", "team-a")
    assert result.code == 1 and fake.created() == NOTHING
    assert result.error == (
        f"bakeoff: error: the KFP API at {fake.url} refused to upload pipeline 'bakeoff' (HTTP 400: Failed to create a"
        " pipeline): KFP's upload answers this when its authorization denies you, so use credentials that may create"
        " pipelines in namespace 'team-a' (or pass --namespace with a profile you belong to); else see the API"
        " server's log (`kubectl -n kubeflow logs deploy/ml-pipeline`)"
    )


def test_a_plain_text_refusal_of_the_upload_handler_is_shown(server: KfpApi, bakeoff) -> None:
    """Go's http.Error answers in plain text (a name past validation.ValidateFieldLength's 128): its words reach the
    error line."""
    result = bakeoff("upload", "--host", server.url, "--name", "n" * 129)
    assert result.code == 1 and server.created() == NOTHING
    assert "(HTTP 400: Invalid input error: Pipeline.Name length cannot exceed 128)" in result.error, result.error
    if isinstance(server, FakeKfpApi):
        server.violations.clear()  # the fake keeps each 400 of its own checks as a violation


def test_the_fake_checks_a_recurring_runs_trigger_as_the_server_does(server: KfpApi) -> None:
    """toModelJob (api_converter.go): concurrency 1-10, a cron robfig/cron v1.2.0 parses, an interval >= 1 s."""
    from bakeoff.pipelines.compiling import COMPILED

    spec = next(yaml.safe_load_all(COMPILED.read_text()))

    def create(trigger: dict, concurrency: int = 1) -> tuple[int, str]:
        body = {
            "display_name": "nightly",
            "mode": "ENABLE",
            "max_concurrency": concurrency,
            "trigger": trigger,
            "pipeline_spec": spec,
        }
        request = urllib.request.Request(
            server.url + "/apis/v2beta1/recurringruns",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, ""
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())["message"]

    assert create({"cron_schedule": {"cron": "0 0 3 * * *"}}) == (200, "")
    assert create({"periodic_schedule": {"interval_second": 3600}}) == (200, "")
    assert create({"cron_schedule": {"cron": "0 3 *"}}) == (
        400,
        "Failed to create a recurring run due to conversion error: Invalid input error: Schedule cron is not a"
        " supported format(https://godoc.org/github.com/robfig/cron). Error: Expected 5 to 6 fields, found 3: 0 3 *",
    )
    assert create({"periodic_schedule": {"interval_second": 0}}) == (
        400,
        "Failed to create a recurring run due to conversion error: Invalid input error: Found invalid period schedule"
        " interval 0. Set at interval to least 1 second",
    )
    assert create({"periodic_schedule": {"interval_second": 60}}, concurrency=11)[0] == 400
    assert len(server.recurring_runs) == 2
    if isinstance(server, FakeKfpApi):
        server.violations.clear()  # the fake keeps each 400 of its own checks as a violation
