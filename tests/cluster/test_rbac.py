"""manifests/ on the real API server: every kustomization applies, and the real authorizer holds the train step
to its overlay's Role — with the service account's own token, not an admin impersonating it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from bakeoff.components.spec import from_dict
from bakeoff.components.training.tfjob import build_tfjob
from bakeoff.pipelines.pipeline import Cluster
from tests.cluster import controlplane
from tests.cluster.profile import NAMESPACE as PROFILE_NAMESPACE
from tests.cluster.profile import NAMESPACE_LABELS
from tests.test_manifests import (
    MANIFESTS,
    OFFLINE,
    OVERLAY_ROLES,
    REMOTE,
    RUNNER_RULES,
    USER_IMAGE,
    WITH_ENV_FILE,
    kserve_copy,
    settings_from_example,
)

pytestmark = pytest.mark.cluster

# Each overlay's namespace and the service account KFP runs its steps as there.
OVERLAYS = {
    "overlays/standalone": ("kubeflow", "pipeline-runner"),
    "overlays/multi-user-tfjob": ("kubeflow-user-example-com", "default-editor"),
}
ROLE = "bakeoff-tfjob-runner"
VARIANT = {"name": "rbac-probe", "model": {"type": "cnn", "filters": [8], "dense_units": 8}, "workers": 1}


def _namespaces(plane: controlplane.ControlPlane) -> None:
    for namespace in sorted({namespace for namespace, _ in OVERLAYS.values()}):
        # The profile's as profile.py labels it: a later apply without the label would take it away.
        labels = NAMESPACE_LABELS if namespace == PROFILE_NAMESPACE else {}
        metadata = {"name": namespace, "labels": labels}
        plane.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
        )


@pytest.fixture(scope="module")
def applied(control_plane: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Every kustomization that renders offline, applied server-side as its header comment says; their names."""
    _namespaces(control_plane)
    names = []
    for name in OFFLINE:
        if name.split("/")[0] == "base":
            continue  # applied only through an overlay, as its header says
        control_plane.kubectl("apply", "--server-side", "-k", str(MANIFESTS / name))
        names.append(name)
    for name, env_file in WITH_ENV_FILE.items():
        if name == "kserve":  # its settings.env as docs/kubeflow.md says to fill it in
            copy = kserve_copy(tmp_path_factory.mktemp(name), settings_from_example(USER_IMAGE, Cluster().s3_endpoint))
        else:
            copy = tmp_path_factory.mktemp(name) / name
            shutil.copytree(MANIFESTS / name, copy, ignore=shutil.ignore_patterns("*.env"))
            shutil.copy(copy / f"{env_file}.example", copy / env_file)
        control_plane.kubectl("apply", "--server-side", "-k", str(copy))
        names.append(name)
    return names


def _training_operator_copy(folder: Path, patched: bool = True) -> Path:
    """manifests/training-operator with its GitHub base read from the Go module cache (the same tag), optionally
    without its pod-security patch."""
    copy = folder / "training-operator"
    shutil.copytree(MANIFESTS / "training-operator", copy)
    config = yaml.safe_load((copy / "kustomization.yaml").read_text())
    upstream = controlplane.operator_manifests().parent / "overlays" / "standalone"
    config["resources"] = [os.path.relpath(upstream, copy)]  # kustomize takes no absolute base
    if not patched:
        config.pop("patches")
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(config))
    return copy


@pytest.mark.parametrize("patched", [True, False], ids=["as-committed", "without-its-patch"])
def test_the_training_operator_passes_kubeflows_restricted_pod_security(
    control_plane: controlplane.ControlPlane, tmp_path: Path, patched: bool
) -> None:
    """Kubeflow 1.11 and 26.03 enforce `restricted` in `kubeflow`: the real PodSecurity admission judges the operator.

    A dry run on the server: applying it would register upstream's Service-based webhook, which nothing here can route.
    """
    assert REMOTE == ["training-operator"]
    control_plane.kubectl("label", "namespace", "kubeflow", "--overwrite", "pod-security.kubernetes.io/warn=restricted")
    answer = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-k", str(_training_operator_copy(tmp_path, patched))
    )
    violations = [line for line in answer.stderr.splitlines() if "would violate PodSecurity" in line]
    assert bool(violations) is not patched, answer.stderr


def test_every_kustomization_applies_on_the_real_api_server(applied: list[str], control_plane) -> None:
    assert sorted(applied) == sorted([name for name in OFFLINE if name.split("/")[0] != "base"] + list(WITH_ENV_FILE))
    for overlay, (namespace, account) in OVERLAYS.items():
        binding = json.loads(control_plane.kubectl("get", "rolebinding", ROLE, "-n", namespace, "-o", "json").stdout)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}], overlay


def _api_as(plane: controlplane.ControlPlane, namespace: str, account: str) -> client.ApiClient:
    """An API client holding the service account's own token (TokenRequest), as a pod of it would."""
    plane.kubectl("create", "serviceaccount", account, "-n", namespace, check=False)
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    configuration = client.Configuration()
    configuration.host = plane.server
    configuration.ssl_ca_cert = str(plane.ca)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def _calls(api: client.ApiClient, namespace: str) -> dict[tuple[str, str, str], Callable[[], object]]:
    """One real request per (group, resource, verb) the TFJob backend makes (RUNNER_RULES), in the order it makes
    them."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    job = build_tfjob(from_dict(VARIANT), name="rbac-probe", image=controlplane.TEST_IMAGE, args=[], env={})
    body = api.sanitize_for_serialization(job)
    tfjobs = ("kubeflow.org", "v1", namespace, "tfjobs")
    return {
        ("kubeflow.org", "tfjobs", "create"): lambda: custom.create_namespaced_custom_object(*tfjobs, body),
        ("kubeflow.org", "tfjobs", "get"): lambda: custom.get_namespaced_custom_object(*tfjobs, "rbac-probe"),
        ("kubeflow.org", "tfjobs", "patch"): lambda: custom.patch_namespaced_custom_object(
            *tfjobs, "rbac-probe", {"metadata": {"labels": {"probed": "yes"}}}
        ),
        ("kubeflow.org", "tfjobs", "delete"): lambda: custom.delete_namespaced_custom_object(*tfjobs, "rbac-probe"),
        ("", "pods", "get"): lambda: core.read_namespaced_pod("no-such-pod", namespace),
        ("", "pods/log", "get"): lambda: core.read_namespaced_pod_log("no-such-pod", namespace),
    }


def _denied(calls: dict[tuple[str, str, str], Callable[[], object]]) -> list[tuple[str, str, str]]:
    """The calls the authorizer refused (403); any other answer (404 for the missing pod) was authorized."""
    denied = []
    for call, request in calls.items():
        try:
            request()
        except ApiException as error:
            if error.status == 403:
                denied.append(call)
            elif error.status != 404:
                raise
    return denied


@pytest.fixture
def role_without(control_plane: controlplane.ControlPlane) -> Iterator[Callable[[str, str, str], None]]:
    """Re-applies an overlay's Role with one verb removed; the overlay's own Role comes back afterwards."""
    touched: list[str] = []

    def remove(overlay: str, resource: str, verb: str) -> None:
        """From every Role the overlay binds to its account: the TrainJob runner's grants pods too."""
        namespace = OVERLAYS[overlay][0]
        roles = json.loads(
            control_plane.kubectl(
                "get", "roles", "-n", namespace, "-l", "app.kubernetes.io/part-of=bakeoff", "-o", "json"
            ).stdout
        )["items"]
        for role in roles:
            for rule in role["rules"]:
                if resource in rule["resources"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
            role["metadata"] = {"name": role["metadata"]["name"], "namespace": namespace}
            control_plane.kubectl("replace", "-f", "-", input=json.dumps(role))
        touched.append(overlay)

    yield remove
    # Every overlay with Roles in a touched namespace: the replace above drops the labels that find them.
    namespaces = {OVERLAYS[overlay][0] for overlay in touched}
    for overlay, (_, _, namespace) in OVERLAY_ROLES.items():
        if namespace in namespaces:
            control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(MANIFESTS / overlay))


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_the_overlays_service_account_may_make_every_call_of_the_train_step(
    applied: list[str], control_plane: controlplane.ControlPlane, overlay: str
) -> None:
    namespace, account = OVERLAYS[overlay]
    calls = _calls(_api_as(control_plane, namespace, account), namespace)
    assert set(calls) == {
        (group, resource, verb) for (group, resource), verbs in RUNNER_RULES.items() for verb in verbs
    }
    assert _denied(calls) == []


@pytest.mark.parametrize(
    "removed",
    sorted((g, r, v) for (g, r), verbs in RUNNER_RULES.items() for v in verbs),
    ids=lambda call: f"{call[1]}-{call[2]}",
)
def test_a_role_missing_one_verb_fails_exactly_that_call(
    applied: list[str], control_plane: controlplane.ControlPlane, role_without, removed: tuple[str, str, str]
) -> None:
    overlay = "overlays/multi-user-tfjob"
    namespace, account = OVERLAYS[overlay]
    role_without(overlay, removed[1], removed[2])
    calls = _calls(_api_as(control_plane, namespace, account), namespace)
    denied = _denied(calls)
    control_plane.kubectl("delete", "tfjob", "rbac-probe", "-n", namespace, "--ignore-not-found")
    # Without create there is nothing to get, patch or delete: those answer 404, which is not a refusal.
    assert denied == [removed]


def test_the_admin_did_not_do_the_calls(applied: list[str], control_plane: controlplane.ControlPlane) -> None:
    """A service account no overlay binds is refused every one of them: the tokens above were judged on their own."""
    namespace = OVERLAYS["overlays/standalone"][0]
    calls = _calls(_api_as(control_plane, namespace, "not-bound"), namespace)
    assert sorted(_denied(calls)) == sorted(calls)
