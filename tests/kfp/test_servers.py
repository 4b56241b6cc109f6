"""`bakeoff upload`, `submit` and `schedule` against the real KFP API server, its ScheduledWorkflow controller and
Argo's workflow controller: what a user with a KFP of their own meets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bakeoff.components.environment import HOST_ENV, IMAGE_ENV
from tests.kfp import backend

pytestmark = pytest.mark.kfp

IMAGE = "bakeoff.local/bakeoff:dev"  # the image the lane's pods run (the process kubelet maps it to a root filesystem)
BAKEOFF = Path(sys.executable).parent / "bakeoff"
FIRE_TIMEOUT = 120.0  # seconds for the ScheduledWorkflow controller to fire a recurring run (resync every 2 s)
# the runs' `variants` parameter: two small networks, so that a run's training takes seconds
TWO_MLPS = [
    {"name": "tiny", "model": {"type": "mlp", "hidden_units": [16]}},
    {"name": "small", "model": {"type": "mlp", "hidden_units": [32]}},
]


def bakeoff(kfp: backend.Backend, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script as a user runs it, against this backend, with no KFP settings of this machine's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("KF_PIPELINES")}
    env.update({HOST_ENV: kfp.host, IMAGE_ENV: IMAGE})
    return subprocess.run([str(BAKEOFF), *args], env=env, capture_output=True, text=True, timeout=300)


def api(kfp: backend.Backend, path: str) -> dict:
    with urllib.request.urlopen(f"{kfp.host}/apis/v2beta1/{path}", timeout=30) as response:
        return json.loads(response.read())


def workflows(kfp: backend.Backend) -> list[dict]:
    listed = kfp.plane.kubectl("get", "workflows.argoproj.io", "-n", backend.NAMESPACE, "-o", "json")
    return json.loads(listed.stdout)["items"]


def test_upload_creates_the_pipeline_then_versions_and_refuses_a_repeated_one(kfp_backend: backend.Backend) -> None:
    first = bakeoff(kfp_backend, "upload", "--name", "upload-check")
    assert first.returncode == 0, first.stderr
    created = re.match(r"created pipeline 'upload-check' \(id (\S+)\) with version 'upload-check'", first.stdout)
    assert created, first.stdout
    second = bakeoff(kfp_backend, "upload", "--name", "upload-check", "--version", "v2")
    assert second.returncode == 0, second.stderr
    versions = api(kfp_backend, f"pipelines/{created[1]}/versions")["pipeline_versions"]
    assert sorted(version["display_name"] for version in versions) == ["upload-check", "v2"]
    again = bakeoff(kfp_backend, "upload", "--name", "upload-check", "--version", "v2")
    assert (again.returncode, again.stdout) == (1, ""), again.stderr
    assert again.stderr.splitlines() == [
        "bakeoff: error: pipeline 'upload-check' already has a version 'v2': choose another --version, or leave it"
        " out for a new name"
    ]


def test_submit_creates_a_run_whose_workflow_carries_its_parameters(kfp_backend: backend.Backend) -> None:
    variants = TWO_MLPS
    done = bakeoff(
        kfp_backend,
        "submit",
        "--name",
        "submit-check",
        "--param",
        "max_train_examples=2048",
        "--param",
        f"variants={json.dumps(variants)}",
    )
    assert done.returncode == 0, done.stderr
    run_id = re.match(r"submitted run (\S+) \('submit-check'\)", done.stdout)[1]  # type: ignore[index]
    assert api(kfp_backend, f"runs/{run_id}")["display_name"] == "submit-check"
    [workflow] = [item for item in workflows(kfp_backend) if item["metadata"]["labels"].get("pipeline/runid") == run_id]
    # What the root driver is handed (KFP's argocompiler: the `runtime-config` argument of its task).
    configs = set(_values_named(workflow, "runtime-config"))
    assert configs, "the Workflow hands its driver no runtime-config"
    for config in configs:
        values = json.loads(config)["parameterValues"]
        assert (values["max_train_examples"], values["variants"]) == (2048, variants), values
    assert workflow["spec"]["serviceAccountName"] == backend.RUNNER


def _values_named(document: object, name: str) -> list[str]:
    """Every `value` of a `{name, value}` pair anywhere in `document`."""
    if isinstance(document, dict):
        own = [document["value"]] if document.get("name") == name and "value" in document else []
        return own + [found for item in document.values() for found in _values_named(item, name)]
    if isinstance(document, list):
        return [found for item in document for found in _values_named(item, name)]
    return []


def test_a_recurring_run_fires_through_the_scheduledworkflow_controller(kfp_backend: backend.Backend) -> None:
    done = bakeoff(kfp_backend, "schedule", "--name", "schedule-check", "--every", "60s", "--no-catchup")
    assert done.returncode == 0, done.stderr
    recurring_id = re.match(r"created recurring run (\S+) ", done.stdout)[1]  # type: ignore[index]
    deadline = time.monotonic() + FIRE_TIMEOUT
    fired: list[dict] = []
    while not fired and time.monotonic() < deadline:
        fired = [
            item
            for item in workflows(kfp_backend)
            if item["metadata"]["labels"].get("scheduledworkflows.kubeflow.org/scheduledWorkflowName")
        ]
        time.sleep(2)
    assert fired, f"no Workflow from recurring run {recurring_id} in {FIRE_TIMEOUT:.0f} s"
    assert bakeoff(kfp_backend, "schedules", "disable", recurring_id).returncode == 0
