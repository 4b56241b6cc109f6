"""`bakeoff deploy` on the real API server with KServe's CRDs (stored and validated; no KServe controller runs),
as a service account that holds only deploy's Role; and the fake Kubernetes API held to the real server's answers.

The service account, Role and RoleBinding are manifests/kserve/deploy-rbac.yaml's, put in a fresh namespace;
tests/test_deploy.py holds that Role to the calls deploy makes.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from bakeoff.components.errors import BakeoffError
from bakeoff.components.kubeapi import STRICT_DECODING
from bakeoff.components.serving import deploy
from bakeoff.components.storage import open_store, registry
from tests import test_deploy
from tests.cluster import controlplane
from tests.conftest import BUCKET
from tests.fake_kubernetes import FakeKubernetes
from tests.samples import manifest
from tests.test_deploy import IMAGE

pytestmark = pytest.mark.cluster

DEPLOYER = "bakeoff-deploy"  # the service account, Role and RoleBinding of manifests/kserve/deploy-rbac.yaml
DEPLOY_RBAC = controlplane.REPO / "manifests" / "kserve" / "deploy-rbac.yaml"
MODEL = "fashion-mnist"
STORE = f"s3://{BUCKET}/{{namespace}}/bakeoff"  # the pipeline's layout: a prefix per namespace
ISVC, RUNTIME = deploy.ISVC_PLURAL, deploy.RUNTIME_PLURAL
NEW_IMAGE = "registry.example/bakeoff:2"
RBAC_WAIT = 30.0  # seconds for the authorizer's cache to see a changed Role; it takes milliseconds


@dataclass(frozen=True)
class Team:
    """A fresh namespace whose service account may make exactly deploy's calls; its kube-config holds that account's
    token."""

    namespace: str
    kubeconfig: Path
    user: str
    api: client.CustomObjectsApi  # the service account's
    admin: client.CustomObjectsApi  # system:masters, for what someone else does meanwhile


def _role(namespace: str, rules: set[tuple[str, str, str]]) -> dict:
    by_resource: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in sorted(rules):
        by_resource.setdefault((group, resource), []).append(verb)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": DEPLOYER, "namespace": namespace},
        "rules": [
            {"apiGroups": [group], "resources": [resource], "verbs": verbs}
            for (group, resource), verbs in by_resource.items()
        ],
    }


def bakeoff(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, list[str], list[str]]:
    """`bakeoff deploy ARGS`, with the user's image unless ARGS name one: deploy creates no runtime without it."""
    return test_deploy.bakeoff(capsys, *args, *(() if "--image" in args else ("--image", IMAGE)))


def _deploy_rbac(namespace: str) -> list[dict]:
    """manifests/kserve/deploy-rbac.yaml as kustomize's `namespace:` line places it."""
    documents = [doc for doc in yaml.safe_load_all(DEPLOY_RBAC.read_text()) if doc]
    for doc in documents:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    assert {doc["metadata"]["name"] for doc in documents} == {DEPLOYER}
    return documents


def _granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the manifest's Role grants."""
    role = next(doc for doc in _deploy_rbac("any") if doc["kind"] == "Role")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


DEPLOY_RULES = _granted()


def _until_authorizer(
    plane: controlplane.ControlPlane, team_namespace: str, user: str, verb: str, resource: str, allowed: bool
) -> None:
    """Waits until the authorizer answers ``allowed`` for the call: it reads Roles through a watch cache."""
    deadline = time.monotonic() + RBAC_WAIT
    while True:
        answer = plane.kubectl(
            "auth", "can-i", verb, f"{resource}.{deploy.GROUP}", "-n", team_namespace, f"--as={user}", check=False
        )
        if (answer.stdout.strip() == "yes") == allowed or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _custom_objects(configuration: client.Configuration) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(client.ApiClient(configuration))


@pytest.fixture
def team(control_plane: controlplane.ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    namespace = f"deploy-{uuid.uuid4().hex[:8]}"
    user = f"system:serviceaccount:{namespace}:{DEPLOYER}"
    control_plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                *_deploy_rbac(namespace),
            ]
        ),
    )
    _until_authorizer(control_plane, namespace, user, "get", RUNTIME, allowed=True)
    token = control_plane.kubectl("create", "token", DEPLOYER, "-n", namespace, "--duration=1h").stdout.strip()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "deployer",
                "clusters": [
                    {
                        "name": "bakeoff",
                        "cluster": {"server": control_plane.server, "certificate-authority": str(control_plane.ca)},
                    }
                ],
                "users": [{"name": DEPLOYER, "user": {"token": token}}],
                "contexts": [
                    {"name": "deployer", "context": {"cluster": "bakeoff", "user": DEPLOYER, "namespace": namespace}}
                ],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # the test runner is no pod
    configuration, admin = client.Configuration(), client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=admin)
    yield Team(namespace, kubeconfig, user, _custom_objects(configuration), _custom_objects(admin))
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def publish(namespace: str, tmp_path: Path) -> int:
    """A version of MODEL in the namespace's store, as the pipeline publishes one; returns its number."""
    saved = tmp_path / f"saved-{uuid.uuid4().hex[:6]}"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    return registry.publish(open_store(STORE.format(namespace=namespace)), MODEL, saved, manifest())


def find(team: Team, plural: str, name: str) -> dict | None:
    version = deploy.ISVC_VERSION if plural == ISVC else deploy.RUNTIME_VERSION
    try:
        return team.admin.get_namespaced_custom_object(deploy.GROUP, version, team.namespace, plural, name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def read(team: Team, plural: str, name: str) -> dict:
    found = find(team, plural, name)
    assert found is not None, f"no {plural} {name!r} in {team.namespace}"
    return found


def version_of(body: dict) -> str:
    return body["spec"]["predictor"]["annotations"][deploy.VERSION_ANNOTATION]


def one_error(err: list[str]) -> str:
    assert len(err) == 1 and err[0].startswith("bakeoff: error: "), err
    return err[0]


# ---------------------------------------------------------------- creating and rolling


def test_deploy_creates_the_service_then_applies_each_new_version(
    team: Team, s3_env: str, tmp_path: Path, capsys
) -> None:
    """The newest version in the store (SeaweedFS), served from the model's folder there; a new one is applied to the
    same object."""
    assert publish(team.namespace, tmp_path) == 1
    code, out, err = bakeoff(capsys, "--store", STORE)
    assert code == 0, err
    uri = f"s3://{BUCKET}/{team.namespace}/bakeoff/models/{MODEL}"
    assert out[1] == f"created inferenceservice {MODEL} in {team.namespace}: version 1 from {uri}"
    first, runtime = read(team, ISVC, MODEL), read(team, RUNTIME, deploy.RUNTIME_NAME)
    assert first["spec"]["predictor"]["model"]["storageUri"] == uri and version_of(first) == "1"
    assert first["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]
    assert runtime["spec"]["containers"][0]["image"] == IMAGE
    # Server-side applied: the real API server records bakeoff's field manager as the fields' owner.
    for body in (first, runtime):
        assert {(e["manager"], e["operation"]) for e in body["metadata"]["managedFields"]} == {
            (deploy.FIELD_MANAGER, "Apply")
        }
    # The user resizes the predictor meanwhile; deploy must not undo it.
    resized = team.admin.patch_namespaced_custom_object(
        deploy.GROUP,
        deploy.ISVC_VERSION,
        team.namespace,
        ISVC,
        MODEL,
        {"spec": {"predictor": {"model": {"resources": {"limits": {"memory": "4Gi"}}}}}},
    )

    assert publish(team.namespace, tmp_path) == 2
    code, out, err = bakeoff(capsys, "--store", STORE)
    assert code == 0, err
    assert out[0] == (
        f"updated inferenceservice {MODEL} in {team.namespace}: version 1 -> version 2;"
        " the old revision serves until the new one is Ready"
    )
    second = read(team, ISVC, MODEL)
    assert second["metadata"]["uid"] == first["metadata"]["uid"], "the same object, applied to"
    assert second["metadata"]["resourceVersion"] != resized["metadata"]["resourceVersion"]
    assert second["metadata"]["generation"] == resized["metadata"]["generation"] + 1
    assert version_of(second) == "2" and second["spec"]["predictor"]["model"]["storageUri"] == uri
    assert second["spec"]["predictor"]["model"]["resources"]["limits"]["memory"] == "4Gi"

    # The same version again writes nothing: no new generation, so KServe starts no new revision.
    code, out, err = bakeoff(capsys, "--store", STORE)
    assert code == 0 and out[0] == f"inferenceservice {MODEL} in {team.namespace} already serves version 2", err
    assert read(team, ISVC, MODEL)["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]

    # A new image: the runtime's container, and the predictor's annotation so that KServe rolls it.
    code, out, err = bakeoff(capsys, "--store", STORE, "--image", NEW_IMAGE)
    assert code == 0, err
    assert out[0] == f"updated servingruntime bakeoff in {team.namespace} (image {NEW_IMAGE})"
    assert read(team, RUNTIME, deploy.RUNTIME_NAME)["spec"]["containers"][0]["image"] == NEW_IMAGE
    assert read(team, RUNTIME, deploy.RUNTIME_NAME)["metadata"]["generation"] == runtime["metadata"]["generation"] + 1
    third = read(team, ISVC, MODEL)
    assert third["spec"]["predictor"]["annotations"][deploy.IMAGE_ANNOTATION] == NEW_IMAGE
    assert third["metadata"]["generation"] == second["metadata"]["generation"] + 1


@pytest.mark.parametrize("removed", sorted(DEPLOY_RULES), ids=lambda rule: f"{rule[1]}-{rule[2]}")
def test_a_role_missing_one_of_deploys_verbs_fails_that_call_in_one_line(
    team: Team, control_plane: controlplane.ControlPlane, capsys, removed: tuple[str, str, str]
) -> None:
    """The real authorizer: every rule of the Role is needed, and a refusal names the verb and the resource.

    An apply is a patch, and one that creates is authorized for create too (withAuthorization in PatchResource,
    k8s.io/apiserver/pkg/endpoints/handlers/patch.go).
    """
    _, resource, verb = removed
    control_plane.kubectl("replace", "-f", "-", input=json.dumps(_role(team.namespace, DEPLOY_RULES - {removed})))
    _until_authorizer(control_plane, team.namespace, team.user, verb, resource, allowed=False)

    code, _, err = bakeoff(capsys, "--version", "2", "--image", NEW_IMAGE)
    assert code == 1
    line = one_error(err)
    assert (
        line.startswith("bakeoff: error: not allowed to ") and f"in namespace '{team.namespace}' (HTTP 403: " in line
    ), line
    assert f'User "{team.user}" cannot {verb} resource "{resource}" in API group "{deploy.GROUP}"' in line, line
    assert find(team, ISVC, MODEL) is None


# ---------------------------------------------------------------- someone else writing meanwhile


class Interleaved(client.CustomObjectsApi):
    """The real client, with ``meanwhile`` run after each of the first ``times`` reads of ``plural``: another
    writer's turn."""

    def __init__(self, api_client: client.ApiClient, plural: str, meanwhile: Callable[[], Any], times: int = 1) -> None:
        super().__init__(api_client)
        self.plural, self.meanwhile, self.times = plural, meanwhile, times

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **kwargs: Any
    ) -> Any:
        try:
            return super().get_namespaced_custom_object(group, version, namespace, plural, name, **kwargs)
        finally:
            if plural == self.plural and self.times:
                self.times -= 1
                self.meanwhile()


def interleaved(team: Team, plural: str, meanwhile: Callable[[], Any], times: int = 1) -> deploy.Cluster:
    """The deployer's connection, with another writer's change between deploy's read of ``plural`` and its write."""
    return deploy.Cluster(
        Interleaved(team.api.api_client, plural, meanwhile, times),
        team.namespace,
        team.api.api_client.configuration.host,
    )


def admin_patch(team: Team, plural: str, name: str, patch: dict) -> Callable[[], Any]:
    version = deploy.ISVC_VERSION if plural == ISVC else deploy.RUNTIME_VERSION
    return lambda: team.admin.patch_namespaced_custom_object(deploy.GROUP, version, team.namespace, plural, name, patch)


def uri(team: Team) -> str:
    return deploy.storage_uri(STORE, team.namespace, MODEL)


def deployer(team: Team) -> deploy.Cluster:
    return deploy.Cluster(team.api, team.namespace, team.api.api_client.configuration.host)


def test_a_runtime_changed_between_read_and_apply_fails_in_one_line_and_keeps_the_other_change(
    team: Team, capsys
) -> None:
    """deploy applies the runtime's whole container list (an atomic list) on the resourceVersion it read: another
    writer's change meanwhile answers 409 rather than being undone; the next deploy applies over it."""
    assert bakeoff(capsys, "--version", "1")[0] == 0
    containers = read(team, RUNTIME, deploy.RUNTIME_NAME)["spec"]["containers"]
    containers[0]["resources"]["limits"]["memory"] = "4Gi"
    cluster = interleaved(
        team, RUNTIME, admin_patch(team, RUNTIME, deploy.RUNTIME_NAME, {"spec": {"containers": containers}})
    )

    with pytest.raises(BakeoffError) as failed:
        deploy.deploy(cluster, team.namespace, MODEL, uri(team), 2, NEW_IMAGE)
    assert str(failed.value).startswith(
        f"cannot patch servingruntimes.serving.kserve.io 'bakeoff' in namespace '{team.namespace}': someone changed"
        " it after deploy read it (HTTP 409: Operation cannot be fulfilled"
    ) and str(failed.value).endswith("run deploy again"), str(failed.value)
    (server,) = read(team, RUNTIME, deploy.RUNTIME_NAME)["spec"]["containers"]
    assert server["image"] == IMAGE and server["resources"]["limits"]["memory"] == "4Gi"

    done = deploy.deploy(deployer(team), team.namespace, MODEL, uri(team), 2, NEW_IMAGE)
    assert (done.runtime, done.image) == ("updated", NEW_IMAGE)
    (server,) = read(team, RUNTIME, deploy.RUNTIME_NAME)["spec"]["containers"]
    assert server["image"] == NEW_IMAGE and server["resources"]["limits"]["memory"] == "4Gi"


def test_a_service_changed_between_read_and_apply_gets_deploys_fields_and_keeps_the_others(team: Team, capsys) -> None:
    """Someone else rolled it to version 5 and labelled it meanwhile: deploy's forced apply sets its version, the
    label stays, and deploy reports the version it read."""
    assert bakeoff(capsys, "--version", "1")[0] == 0
    other = admin_patch(
        team,
        ISVC,
        MODEL,
        {
            "metadata": {"labels": {"owner": "someone"}},
            "spec": {"predictor": {"annotations": {deploy.VERSION_ANNOTATION: "5"}}},
        },
    )

    done = deploy.deploy(interleaved(team, ISVC, other), team.namespace, MODEL, uri(team), 7)
    assert (done.action, done.previous) == ("updated", 1)
    body = read(team, ISVC, MODEL)
    assert version_of(body) == "7" and body["metadata"]["labels"]["owner"] == "someone"


def test_a_service_created_between_read_and_apply_is_taken_over(team: Team) -> None:
    """The name is taken meanwhile, by someone else's create: deploy's apply updates that object instead of
    failing."""
    body = deploy.as_dict(deploy.inference_service(MODEL, uri(team), 3, IMAGE))

    def other() -> object:
        return team.admin.create_namespaced_custom_object(deploy.GROUP, deploy.ISVC_VERSION, team.namespace, ISVC, body)

    done = deploy.deploy(interleaved(team, ISVC, other), team.namespace, MODEL, uri(team), 4, IMAGE)
    assert (done.action, done.previous) == ("updated", None)
    assert version_of(read(team, ISVC, MODEL)) == "4"


# ---------------------------------------------------------------- what the API server refuses


def test_a_field_the_crd_schema_refuses_fails_in_one_line_naming_it_before_anything_is_written(
    team: Team, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No flag reaches a field the schema constrains; deploy's own size does (a quantity pattern), so a wrong one
    stands in."""
    monkeypatch.setattr(deploy, "LIMITS", {"cpu": "1", "memory": "2 GB"})
    code, out, err = bakeoff(capsys, "--version", "1")
    assert code == 1 and out == []
    line = one_error(err)
    assert line.startswith(
        f"bakeoff: error: the API at {team.api.api_client.configuration.host} refused to create servingruntimes"
        f".serving.kserve.io 'bakeoff' in namespace '{team.namespace}' (HTTP 422: "
    ), line
    assert 'spec.containers[0].resources.limits.memory: Invalid value: "2 GB"' in line, line
    assert find(team, RUNTIME, deploy.RUNTIME_NAME) is None and find(team, ISVC, MODEL) is None


def test_an_unknown_field_is_refused_in_one_short_line_not_pruned(
    team: Team, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A field the cluster's CRD lacks (an older KServe) fails any server-side apply: the API server cannot type the
    applied object (a 500, kubernetes/kubernetes#139253); the line names the field and what to do."""
    assert bakeoff(capsys, "--version", "1")[0] == 0
    test_deploy.write_an_unknown_field(monkeypatch)
    code, _, err = bakeoff(capsys, "--version", "2")
    assert code == 1
    line = one_error(err)
    assert line.endswith(
        ".spec.predictor.model.storageURI: field not declared in schema): the cluster's"
        f" {deploy.GROUP} CRDs refuse the field named; an older KServe may lack it: upgrade KServe there"
    ), line
    assert version_of(read(team, ISVC, MODEL)) == "1", "nothing written"


def test_a_namespace_that_does_not_exist_is_named_in_one_line(
    control_plane: controlplane.ControlPlane, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin (whom no Role stops first) deploying to a namespace nobody created: not "install KServe"."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = f"absent-{uuid.uuid4().hex[:8]}"
    code, _, err = bakeoff(capsys, "--version", "1", "--namespace", missing)
    assert code == 1
    assert one_error(err) == (
        f"bakeoff: error: cannot create servingruntimes.serving.kserve.io 'bakeoff': namespace '{missing}' does not"
        f' exist on {control_plane.server} (HTTP 404: namespaces "{missing}" not found): pass --namespace with'
        " your profile's namespace, or leave it out for the kube-config's"
    )


# ---------------------------------------------------------------- the fake, held to the real server


def _answer(call: Callable[[], tuple[Any, int, Any]]) -> tuple[int, Any]:
    """The HTTP status and the decoded body of one call, failed or not."""
    try:
        body, status, _ = call()
        return status, body
    except ApiException as error:
        try:
            return error.status, json.loads(error.body)
        except ValueError:
            return error.status, error.body


_MANAGED_AT = re.compile(r" at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # when an Update manager last wrote: the fake's clock


def _seen(status: int, body: Any, previous: dict | None) -> dict:
    """What deploy reads of an answer: status; of an object its fields, its field managers and whether it was written;
    of an error its Status."""
    if not isinstance(body, dict):
        return {"status": status, "text": body}
    if body.get("kind") == "Status":
        details = {key: value for key, value in (body.get("details") or {}).items() if key in ("name", "kind")}
        seen = {"status": status, "reason": body.get("reason"), "details": details}
        message = _MANAGED_AT.sub("", body.get("message", ""))
        # Invalid and BadRequest are worded by each validator; deploy shows them, and keeps a strict decoding error's
        # reason.
        seen["message"] = (
            message[message.find(STRICT_DECODING) :]
            if STRICT_DECODING in message
            else ("" if status in (400, 422) and "PatchOptions" not in message else message)
        )
        return seen
    metadata, spec = body["metadata"], body.get("spec") or {}
    fields = (
        {"containers": spec["containers"], "formats": spec.get("supportedModelFormats")}
        if "containers" in spec
        else {"predictor": spec.get("predictor")}
    )
    return {
        "status": status,
        "generation": metadata.get("generation"),
        "labels": metadata.get("labels"),
        "managers": sorted((e["manager"], e["operation"]) for e in metadata.get("managedFields") or []),
        **fields,
        "written": previous is None or metadata["resourceVersion"] != previous["metadata"]["resourceVersion"],
    }


def _deploys_calls(api: client.CustomObjectsApi, namespace: str, model_uri: str) -> list[tuple[str, dict]]:
    """deploy's calls in the order it makes them, and the answers it handles: applies that create, change, change
    nothing, conflict, drop a field, come without a field manager or on a stale resourceVersion; a user's merge patch
    between them; refused values and unknown fields; a verb the Role lacks; a version no CRD serves."""
    runtime = deploy.as_dict(deploy.serving_runtime(IMAGE))
    service = deploy.as_dict(deploy.inference_service(MODEL, model_uri, 1, IMAGE))
    seen: list[tuple[str, dict]] = []
    last: dict[str, dict] = {}

    def record(name: str, plural: str, status: int, body: Any) -> Any:
        seen.append((name, _seen(status, body, last.get(plural))))
        if isinstance(body, dict) and body.get("kind") != "Status":
            last[plural] = body
        return body

    def step(name: str, verb: str, plural: str, *args: Any, version: str | None = None, **kwargs: Any) -> Any:
        """One call of ``verb`` on ``plural``."""
        version = version or (deploy.ISVC_VERSION if plural == ISVC else deploy.RUNTIME_VERSION)
        call = getattr(api, f"{verb}_namespaced_custom_object_with_http_info")
        return record(name, plural, *_answer(lambda: call(deploy.GROUP, version, namespace, plural, *args, **kwargs)))

    def apply(name: str, plural: str, body: dict, **kwargs: Any) -> Any:
        """deploy's own request: bakeoff's field manager, forced, unless told otherwise."""
        return record(name, plural, *_answer(lambda: deploy.server_side_apply(api, namespace, plural, body, **kwargs)))

    step("get a missing runtime", "get", RUNTIME, deploy.RUNTIME_NAME)
    apply("apply the runtime without a field manager", RUNTIME, runtime, field_manager=None)
    apply("apply the runtime, which creates it", RUNTIME, runtime)
    current = apply("apply it again", RUNTIME, runtime)
    newer = json.loads(json.dumps(runtime).replace(IMAGE, NEW_IMAGE))
    newer["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    apply("apply a new image on the resourceVersion read", RUNTIME, newer)
    apply("apply on a stale resourceVersion", RUNTIME, newer)

    step("get a missing service", "get", ISVC, MODEL)
    apply("apply the service, which creates it", ISVC, service)
    step(
        "resize it with a merge patch (someone else's Update)",
        "patch",
        ISVC,
        MODEL,
        {"spec": {"predictor": {"model": {"resources": {"limits": {"memory": "4Gi"}}}}}},
    )
    rolled = deploy.as_dict(deploy.inference_service(MODEL, model_uri, 2, NEW_IMAGE))
    apply("apply version 2 with deploy's size, not forced", ISVC, rolled, force=None)
    rolled["spec"]["predictor"]["model"]["resources"]["limits"]["memory"] = "4Gi"
    apply("apply version 2 with the size as it stands", ISVC, rolled)
    apply("apply it again", ISVC, rolled)
    labelled = json.loads(json.dumps(rolled))
    labelled["metadata"]["labels"]["extra"] = "yes"
    apply("apply one more label", ISVC, labelled)
    apply("apply without that label", ISVC, rolled)
    step("get it", "get", ISVC, MODEL)

    wrong = json.loads(json.dumps(rolled).replace('"4Gi"', '"2 GB"'))
    apply("apply a value the schema refuses", ISVC, wrong)
    typo = json.loads(json.dumps(rolled).replace('"storageUri"', '"storageURI"'))
    apply("apply an unknown field", ISVC, typo)
    step("delete it, which the Role does not grant", "delete", ISVC, MODEL)
    step("list them, which the Role does not grant", "list", ISVC)
    step("get at a version no CRD serves", "get", ISVC, MODEL, version="v1alpha9")
    return seen


def _missing_namespace_calls(api: client.CustomObjectsApi, missing: str, model_uri: str) -> list[tuple[str, dict]]:
    """What an admin, whom no Role stops first, gets in a namespace that does not exist."""
    body = deploy.as_dict(deploy.inference_service(MODEL, model_uri, 1, IMAGE))
    return [
        (name, _seen(*_answer(call), None))
        for name, call in (
            (
                "get",
                lambda: api.get_namespaced_custom_object_with_http_info(
                    deploy.GROUP, deploy.ISVC_VERSION, missing, ISVC, MODEL
                ),
            ),
            ("apply", lambda: deploy.server_side_apply(api, missing, ISVC, body)),
        )
    ]


def _create_refused(api: client.CustomObjectsApi, namespace: str, model_uri: str) -> dict:
    """An apply that would create, by a Role that lacks create: withAuthorization's 403."""
    body = deploy.as_dict(deploy.inference_service("other", model_uri, 1, IMAGE))
    return _seen(*_answer(lambda: deploy.server_side_apply(api, namespace, ISVC, body)), None)


def test_the_fake_answers_deploys_calls_as_the_real_api_server_does(
    team: Team, control_plane: controlplane.ControlPlane
) -> None:
    """The same calls against tests/fake_kubernetes.py and the real server: the same statuses, Status reasons, details
    and messages deploy reads, and the same objects (generation, field managers, written or not). The fake's
    InferenceService status is its own."""
    model_uri = uri(team)
    real = _deploys_calls(team.api, team.namespace, model_uri)
    missing = f"absent-{uuid.uuid4().hex[:8]}"
    real_admin = _missing_namespace_calls(team.admin, missing, model_uri)
    no_create = DEPLOY_RULES - {(deploy.GROUP, ISVC, "create")}
    control_plane.kubectl("replace", "-f", "-", input=json.dumps(_role(team.namespace, no_create)))
    _until_authorizer(control_plane, team.namespace, team.user, "create", ISVC, allowed=False)
    real_refused = _create_refused(team.api, team.namespace, model_uri)
    with FakeKubernetes(
        phases=["Created"],
        namespace=team.namespace,
        granted=set(DEPLOY_RULES),
        user=team.user,
        namespaces={team.namespace},
    ) as fake:
        configuration = client.Configuration()
        configuration.host = fake.url
        fake_api = _custom_objects(configuration)
        faked = _deploys_calls(fake_api, team.namespace, model_uri)
        fake.granted = None
        faked_admin = _missing_namespace_calls(fake_api, missing, model_uri)
        fake.granted = set(no_create)
        faked_refused = _create_refused(fake_api, team.namespace, model_uri)
    assert [name for name, _ in faked] == [name for name, _ in real]
    for (name, fake_seen), (_, real_seen) in zip(faked, real, strict=True):
        assert fake_seen == real_seen, name
    assert faked_admin == real_admin
    assert faked_refused == real_refused
