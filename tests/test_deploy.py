"""`bakeoff deploy` against a fake Kubernetes API that holds KServe's CRDs and plays its InferenceService controller."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from bakeoff.components import defaults
from bakeoff.components.serving import deploy
from bakeoff.components.storage import Store, open_store, registry
from bakeoff.pipelines.cli.main import main
from tests.conftest import free_port
from tests.fake_kubernetes import FakeKubernetes, knative_port_errors, kserve_errors, merge_ports
from tests.samples import manifest

pytestmark = pytest.mark.unit

NAMESPACE = "team-a"
ISVC, RUNTIME = "inferenceservices", "servingruntimes"
STORE_URI = f"s3://mlpipeline/private/{NAMESPACE}/bakeoff/models/fashion-mnist"
IMAGE = "registry.example/you/bakeoff:1"  # the user's build: deploy creates no runtime without one


def kubeconfig(path: Path, server: str, namespace: str | None = NAMESPACE) -> Path:
    """A kube-config whose current context is ``server``, as `kubectl config` writes one."""
    context = {"cluster": "fake", "user": "someone"} | ({"namespace": namespace} if namespace else {})
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "someone", "user": {}}],
                "contexts": [{"name": "fake", "context": context}],
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine that runs the tests is no pod; waits poll fast."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(deploy, "POLL_SECONDS", 0.01)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKubernetes]:
    with FakeKubernetes(phases=["Created"], namespace=NAMESPACE) as api:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", api.url)))
        yield api


def bakeoff(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(["deploy", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def stored(fake: FakeKubernetes, plural: str, name: str, namespace: str | None = None) -> dict:
    found = fake.kserve_object(plural, name, namespace)
    assert found is not None, f"no {plural} {name!r}"
    return found


def service(fake: FakeKubernetes) -> dict:
    return stored(fake, ISVC, "fashion-mnist")


def version_of(body: dict) -> str:
    return body["spec"]["predictor"]["annotations"][deploy.VERSION_ANNOTATION]


def verbs(fake: FakeKubernetes) -> list[tuple[str, str]]:
    return [(call.verb, call.resource) for call in fake.calls]


def managers(body: dict) -> set[tuple[str, str]]:
    """Who owns fields of the object, and how: (manager, "Apply" or "Update")."""
    return {(entry["manager"], entry["operation"]) for entry in body["metadata"].get("managedFields") or []}


def owns(body: dict, manager: str, *path: str) -> bool:
    """Whether ``manager`` owns the field at ``path`` (fieldsV1's ``f:`` names) by an apply."""
    for entry in body["metadata"].get("managedFields") or []:
        node = entry["fieldsV1"] if (entry["manager"], entry["operation"]) == (manager, "Apply") else None
        for part in path:
            node = (node or {}).get(f"f:{part}")
        if node is not None:
            return True
    return False


# ---------------------------------------------------------------- creating and rolling


def test_first_deploy_creates_the_runtime_and_the_service_valid_against_the_crds(fake: FakeKubernetes, capsys) -> None:
    code, out, err = bakeoff(capsys, "--image", IMAGE, "--version", "1")
    assert code == 0, err
    runtime, isvc = stored(fake, RUNTIME, deploy.RUNTIME_NAME), service(fake)
    assert fake.violations == []
    assert kserve_errors(RUNTIME, runtime) == [] and kserve_errors(ISVC, isvc) == []
    assert ("create", RUNTIME) in verbs(fake) and ("create", ISVC) in verbs(fake)
    # Both are server-side applied, their fields owned by bakeoff's field manager.
    assert managers(runtime) == managers(isvc) == {(defaults.FIELD_MANAGER, "Apply")}
    assert owns(isvc, "bakeoff", "spec", "predictor", "annotations", deploy.VERSION_ANNOTATION)

    assert isvc["metadata"]["namespace"] == runtime["metadata"]["namespace"] == NAMESPACE
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"] == "bakeoff"
    assert model["modelFormat"] == {"name": "tensorflow"} and model["storageUri"] == STORE_URI
    assert isvc["spec"]["predictor"]["serviceAccountName"] == "bakeoff-s3"
    assert version_of(isvc) == "1"
    assert runtime["spec"]["containers"][0]["image"] == IMAGE
    # The predictor runs bakeoff's server on the model KServe's storage initializer copied, HTTP and gRPC on
    # KServe's ports, and declares the one port Knative (the default Serverless mode) takes.
    container = fake.effective_container("fashion-mnist")
    assert container["command"] == ["python", "-m", "bakeoff.components.serving.server"]
    assert container["args"] == [
        "--model-dir",
        "/mnt/models",
        "--model-name",
        "fashion-mnist",
        "--http-port",
        "8080",
        "--grpc-port",
        "8081",
    ]
    assert container["ports"] == [{"containerPort": 8080, "name": "http1", "protocol": "TCP"}]
    assert knative_port_errors([container]) == []
    assert out[0] == f"created servingruntime bakeoff in {NAMESPACE} (image {IMAGE})"
    assert out[1] == f"created inferenceservice fashion-mnist in {NAMESPACE}: version 1 from {STORE_URI}"


def test_a_new_version_is_applied_to_the_same_service_so_kserve_rolls_it(fake: FakeKubernetes, capsys) -> None:
    assert bakeoff(capsys, "--image", IMAGE, "--version", "1")[0] == 0
    first = service(fake)
    # The user resizes the predictor meanwhile; deploy must not undo it.
    api(fake).patch_namespaced_custom_object(
        deploy.GROUP,
        "v1beta1",
        NAMESPACE,
        ISVC,
        "fashion-mnist",
        {"spec": {"predictor": {"model": {"resources": {"limits": {"memory": "4Gi"}}}}}},
    )

    code, out, err = bakeoff(capsys, "--version", "2")
    assert code == 0, err
    second = service(fake)
    assert second["metadata"]["uid"] == first["metadata"]["uid"], "the same object, not a new one"
    assert not [call for call in fake.calls if call.verb == "delete"]
    assert verbs(fake).count(("create", ISVC)) == 1 and verbs(fake).count(("create", RUNTIME)) == 1
    assert version_of(second) == "2" and second["metadata"]["generation"] == first["metadata"]["generation"] + 2
    assert second["spec"]["predictor"]["model"]["resources"]["limits"]["memory"] == "4Gi"
    assert second["spec"]["predictor"]["model"]["storageUri"] == STORE_URI
    assert out == [
        f"updated inferenceservice fashion-mnist in {NAMESPACE}: version 1 -> version 2; the old revision serves "
        "until the new"
        " one is Ready",
        f"follow it with `kubectl get inferenceservice fashion-mnist -n {NAMESPACE} -w`, or run deploy with --wait",
    ]

    # The same version again changes nothing, so nothing restarts: not even a write.
    code, out, _ = bakeoff(capsys, "--version", "2")
    assert code == 0 and out[0] == f"inferenceservice fashion-mnist in {NAMESPACE} already serves version 2"
    assert service(fake)["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    assert fake.violations == []


def test_deploys_own_size_stays_on_every_roll(fake: FakeKubernetes, capsys) -> None:
    """An apply removes what its manager applied before and leaves out: deploy sets the size when it creates the
    service, and later rolls must not drop it."""
    for version in ("1", "2", "3"):
        assert bakeoff(capsys, "--image", IMAGE, "--version", version)[0] == 0
    model = service(fake)["spec"]["predictor"]["model"]
    assert model["resources"] == {"requests": deploy.REQUESTS, "limits": deploy.LIMITS}


def test_a_service_kubectl_applied_is_taken_over_with_its_extra_fields_kept(fake: FakeKubernetes, capsys) -> None:
    """manifests/kserve applied by `kubectl apply -k` (client-side: an Update under kubectl's manager), or written by
    an older deploy: those managers own the version annotation, so rolling it needs force."""
    fake.add_kserve(deploy.as_dict(deploy.serving_runtime(IMAGE)))
    applied = deploy.as_dict(deploy.inference_service("fashion-mnist", STORE_URI, 1, IMAGE))
    applied["metadata"]["labels"]["team"] = "vision"
    fake.add_kserve(applied)

    code, out, err = bakeoff(capsys, "--version", "2")
    assert code == 0, err
    assert out[0].startswith("updated inferenceservice fashion-mnist in team-a: version 1 -> version 2")
    isvc = service(fake)
    assert version_of(isvc) == "2" and isvc["metadata"]["labels"]["team"] == "vision"
    assert owns(isvc, "bakeoff", "spec", "predictor", "annotations", deploy.VERSION_ANNOTATION)
    assert managers(isvc) == {("bakeoff", "Apply"), ("kubectl-client-side-apply", "Update")}


def test_a_runtime_the_user_resized_keeps_its_size_when_the_image_changes(fake: FakeKubernetes, capsys) -> None:
    assert bakeoff(capsys, "--image", IMAGE, "--version", "1")[0] == 0
    containers = stored(fake, RUNTIME, "bakeoff")["spec"]["containers"]
    containers[0]["resources"]["limits"]["memory"] = "4Gi"
    api(fake).patch_namespaced_custom_object(
        deploy.GROUP, "v1alpha1", NAMESPACE, RUNTIME, "bakeoff", {"spec": {"containers": containers}}
    )
    code, out, err = bakeoff(capsys, "--version", "1", "--image", "registry.example/bakeoff:2")
    assert code == 0 and out[0].startswith("updated servingruntime bakeoff"), err
    (server,) = stored(fake, RUNTIME, "bakeoff")["spec"]["containers"]
    assert server["image"] == "registry.example/bakeoff:2" and server["resources"]["limits"]["memory"] == "4Gi"


def test_a_new_image_replaces_the_runtimes_and_rolls_the_predictor(fake: FakeKubernetes, capsys) -> None:
    assert bakeoff(capsys, "--image", IMAGE, "--version", "1")[0] == 0
    generation = service(fake)["metadata"]["generation"]
    code, out, err = bakeoff(capsys, "--version", "1", "--image", "registry.example/bakeoff:2")
    assert code == 0, err
    assert stored(fake, RUNTIME, "bakeoff")["spec"]["containers"][0]["image"] == "registry.example/bakeoff:2"
    assert service(fake)["spec"]["predictor"]["annotations"][deploy.IMAGE_ANNOTATION] == "registry.example/bakeoff:2"
    assert service(fake)["metadata"]["generation"] == generation + 1
    assert out[0] == f"updated servingruntime bakeoff in {NAMESPACE} (image registry.example/bakeoff:2)"
    # Without --image a later deploy keeps whatever image the runtime has (kustomize's images: entry, say).
    assert bakeoff(capsys, "--version", "2")[0] == 0
    assert stored(fake, RUNTIME, "bakeoff")["spec"]["containers"][0]["image"] == "registry.example/bakeoff:2"


def test_without_an_image_deploy_creates_no_runtime(fake: FakeKubernetes, capsys) -> None:
    """Nobody publishes the project's default image: a runtime made with it would never start."""
    code, out, err = bakeoff(capsys, "--version", "1")
    assert (code, out) == (1, [])
    assert err == [
        f"bakeoff: error: there is no servingruntime 'bakeoff' in '{NAMESPACE}' yet, and deploy would create it with"
        f" {defaults.IMAGE}, which nobody publishes: pass --image REGISTRY/bakeoff:TAG, your build of "
        "images/Dockerfile,"
        " or apply manifests/kserve first"
    ]
    assert verbs(fake) == [("get", RUNTIME)]


def test_grpc_in_standard_mode_comes_from_the_services_ports_and_survives_deploy(fake: FakeKubernetes, capsys) -> None:
    """inferenceservice.yaml's Standard-mode lines: the service lists both ports, HTTP first, so KServe's Service
    keeps port 80 for HTTP and gives 8081 to gRPC (createDefaultSvc and isGrpcPort, pkg/controller/v1beta1/
    inferenceservice/reconcilers/service/service_reconciler.go); Knative could not take them."""
    assert bakeoff(capsys, "--image", IMAGE, "--version", "1")[0] == 0
    ports = [
        {"containerPort": 8080, "name": "http1", "protocol": "TCP"},
        {"containerPort": 8081, "name": "grpc", "protocol": "TCP"},
    ]
    api(fake).patch_namespaced_custom_object(
        deploy.GROUP,
        "v1beta1",
        NAMESPACE,
        ISVC,
        "fashion-mnist",
        {
            "metadata": {"annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
            "spec": {"predictor": {"model": {"ports": ports}}},
        },
    )
    code, _, err = bakeoff(capsys, "--version", "2")
    assert code == 0, err
    assert service(fake)["spec"]["predictor"]["model"]["ports"] == ports
    container = fake.effective_container("fashion-mnist")
    assert container["ports"] == ports and "grpc" in container["ports"][1]["name"]
    assert knative_port_errors([container]) == [
        "more than one container port is set: Only a single port is allowed across all containers"
    ]
    # Listing only the gRPC port would put it before the runtime's, where KServe's Service sends port 80.
    assert [port["containerPort"] for port in merge_ports([ports[0]], [ports[1]])] == [8081, 8080]


def test_the_namespace_flag_and_the_store_follow_each_other(fake: FakeKubernetes, capsys) -> None:
    code, _, err = bakeoff(capsys, "--image", IMAGE, "--version", "3", "--namespace", "team-b")
    assert code == 0, err
    isvc = stored(fake, ISVC, "fashion-mnist", namespace="team-b")
    assert (
        isvc["spec"]["predictor"]["model"]["storageUri"]
        == "s3://mlpipeline/private/team-b/bakeoff/models/fashion-mnist"
    )
    assert fake.kserve_object(RUNTIME, "bakeoff", namespace="team-b") is not None
    assert fake.kserve_object(ISVC, "fashion-mnist") is None, "nothing in the kube-config's namespace"


# ---------------------------------------------------------------- --wait


def test_wait_prints_the_url_once_the_new_version_is_ready_not_the_old_one(fake: FakeKubernetes, capsys) -> None:
    code, out, err = bakeoff(capsys, "--image", IMAGE, "--version", "1", "--wait")
    assert code == 0, err
    assert out[-1] == f"http://fashion-mnist.{NAMESPACE}.example.com"
    assert fake.isvc_reports[-1] == (1, 1, True)

    fake.isvc_reports.clear()
    code, out, err = bakeoff(capsys, "--version", "2", "--wait")
    assert code == 0, err
    assert out[-1] == f"http://fashion-mnist.{NAMESPACE}.example.com"
    # The first read after the patch still showed version 1's Ready status; deploy waited past it.
    assert (2, 1, True) in fake.isvc_reports
    assert fake.isvc_reports[-1] == (2, 2, True)
    assert [ready for _, _, ready in fake.isvc_reports].count(False) >= 1


def test_wait_does_not_trust_observed_generation_to_be_the_services(fake: FakeKubernetes, capsys) -> None:
    """KServe copies observedGeneration from the predictor's Knative Service (kserve/kserve#6081): it may stay below
    ours."""
    fake.isvc_observed_offset = -1
    assert bakeoff(capsys, "--image", IMAGE, "--version", "1", "--wait", "--timeout", "5")[0] == 0
    code, out, err = bakeoff(capsys, "--version", "2", "--wait", "--timeout", "5")
    assert code == 0, err
    assert out[-1].startswith("http://fashion-mnist.")


def test_wait_fails_in_one_line_naming_the_conditions_when_never_ready(fake: FakeKubernetes, capsys) -> None:
    fake.isvc_ready_after = None
    fake.isvc_failure = "Container failed with: Op type not registered 'DisableCopyOnRead'"
    code, out, err = bakeoff(capsys, "--image", IMAGE, "--version", "1", "--wait", "--timeout", "1")
    assert code == 1
    errors = [line for line in err if line.startswith("bakeoff: error:")]
    assert len(errors) == 1, err
    assert "inferenceservice 'fashion-mnist' in 'team-a' is not Ready after 1 s" in errors[0]
    assert (
        'PredictorReady=False (RevisionFailed: Revision "fashion-mnist-predictor-00001" failed with message:'
        " Container failed with:"
        " Op type not registered 'DisableCopyOnRead'.)" in errors[0]
    )
    assert "kubectl describe inferenceservice fashion-mnist -n team-a" in errors[0]
    assert not [line for line in out if line.startswith("http")]


def test_a_runtime_that_cannot_serve_the_model_never_gets_ready(fake: FakeKubernetes, capsys) -> None:
    """The fake's controller checks the named runtime as KServe does; so deploy's Ready above means they fit."""
    fake.add_kserve(
        json.loads(json.dumps(deploy.as_dict(deploy.serving_runtime(defaults.IMAGE))).replace('"tensorflow"', '"onnx"'))
    )
    code, _, err = bakeoff(capsys, "--version", "1", "--wait", "--timeout", "1")
    assert code == 1
    assert "NoSupportingRuntime: Specified runtime bakeoff does not support specified framework/version" in err[-1]


# ---------------------------------------------------------------- the store


def test_the_version_comes_from_the_store_when_not_given(
    fake: FakeKubernetes, capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The newest complete version, read from the store the flags name (a folder stands in for S3:
    tests/test_store.py covers both)."""
    folder = open_store(f"file://{tmp_path / 'store'}")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    for _ in range(2):
        registry.publish(folder, "fashion-mnist", saved, manifest(variant="cnn"))
    (tmp_path / "store" / "models" / "fashion-mnist" / "3").mkdir()  # a version still being published: no manifest
    opened: list[tuple] = []

    def open_folder(*args: object) -> Store:
        opened.append(args)
        return folder

    monkeypatch.setattr(deploy, "open_store", open_folder)

    code, _, err = bakeoff(capsys, "--image", IMAGE, "--s3-endpoint", "minio.example:9000", "--s3-insecure")
    assert code == 0, err
    assert opened == [(f"s3://mlpipeline/private/{NAMESPACE}/bakeoff", "minio.example:9000", True)]
    assert version_of(service(fake)) == "2"

    code, _, err = bakeoff(capsys, "--model-name", "other")
    assert code == 1 and err == [
        f"bakeoff: error: no published version of 'other' in s3://mlpipeline/private/{NAMESPACE}/bakeoff:"
        " run the pipeline first, or check --store and --model-name"
    ]


def test_without_a_version_or_an_s3_endpoint_it_says_what_to_pass(
    fake: FakeKubernetes, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BAKEOFF_S3_ENDPOINT", raising=False)
    code, _, err = bakeoff(capsys)
    assert code == 1 and len(err) == 1
    assert "needs an S3 endpoint" in err[0] and err[0].endswith("or pass --version N (see `bakeoff models list`)")
    assert ("create", ISVC) not in verbs(fake)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model-name", "Fashion_MNIST"], "model name 'Fashion_MNIST' cannot name an InferenceService"),
        (
            ["--store", "./bakeoff-store"],
            "store './bakeoff-store' is not one KServe can read: pass --store s3://BUCKET/PREFIX",
        ),
        (["--namespace", " "], "--namespace is empty"),
    ],
)
def test_bad_flags_fail_in_one_line_before_writing(
    fake: FakeKubernetes, capsys, flags: list[str], message: str
) -> None:
    code, _, err = bakeoff(capsys, "--version", "1", *flags)
    assert code == 1 and len(err) == 1 and err[0].startswith(f"bakeoff: error: {message}"), err
    assert not [call for call in fake.calls if call.verb != "get"]


# ---------------------------------------------------------------- the API refusing or absent


@pytest.fixture(scope="module")
def role_rules(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str, str]]:
    """(group, resource, verb) that manifests/kserve's Role grants, rendered as a user applies it."""
    from tests.test_manifests import granted, one, render_kserve

    role = one(render_kserve(tmp_path_factory.mktemp("kserve")), "Role")
    return {(group, resource, verb) for (group, resource), verbs in granted(role).items() for verb in verbs}


def every_deploy(capsys) -> list[tuple[int, list[str]]]:
    """Create with a new runtime, roll a new version and image (both applied again), then the same again (nothing to
    write)."""
    runs = []
    for flags in (
        ["--version", "1", "--image", IMAGE],
        ["--version", "2", "--image", "registry.example/bakeoff:2"],
        ["--version", "2"],
    ):
        code, _, err = bakeoff(capsys, *flags, "--wait", "--timeout", "5")
        runs.append((code, err))
    return runs


def test_the_roles_rules_allow_every_call_deploy_makes_and_nothing_more(
    fake: FakeKubernetes, capsys, role_rules
) -> None:
    fake.granted = set(role_rules)
    assert [code for code, _ in every_deploy(capsys)] == [0, 0, 0]
    calls = {(call.group, call.resource, call.verb) for call in fake.calls}
    assert calls == role_rules, f"denied: {sorted(calls - role_rules)}, unused: {sorted(role_rules - calls)}"


def test_each_rule_of_the_role_is_needed(capsys, role_rules, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Role with one verb taken away: some deploy stops with a 403 that names what was refused."""
    for rule in sorted(role_rules):
        with FakeKubernetes(phases=["Created"], namespace=NAMESPACE, granted=role_rules - {rule}) as api:
            monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / f"{rule[1]}-{rule[2]}", api.url)))
            refusals = [err for code, err in every_deploy(capsys) if code == 1]
        assert refusals and len(refusals[0]) == 1 and f'cannot {rule[2]} resource "{rule[1]}"' in refusals[0][0], (
            rule,
            refusals,
        )


def test_forbidden_is_one_line(fake: FakeKubernetes, capsys, role_rules) -> None:
    fake.granted = role_rules - {(deploy.GROUP, ISVC, "create")}
    code, _, err = bakeoff(capsys, "--image", IMAGE, "--version", "1")
    assert code == 1 and len(err) == 1, err
    # A server-side apply that would create is authorized for create too.
    assert err[0].startswith(
        "bakeoff: error: not allowed to create inferenceservices.serving.kserve.io 'fashion-mnist' in namespace"
        " 'team-a' (HTTP 403: inferenceservices.serving.kserve.io \"fashion-mnist\" is forbidden: User "
        '"system:serviceaccount:team-a:default-editor"'
        ' cannot create resource "inferenceservices" in API group "serving.kserve.io" in the namespace "team-a")'
    )
    assert err[0].endswith(
        "you need get, create and patch on inferenceservices and servingruntimes (serving.kserve.io) there, or "
        "another --namespace"
    )


def test_kserve_missing_is_one_line(fake: FakeKubernetes, capsys) -> None:
    fake.crds = frozenset()  # no KServe CRDs: the API server's plain 404, which names no object
    code, _, err = bakeoff(capsys, "--version", "1")
    assert code == 1 and err == [
        "bakeoff: error: cannot read servingruntimes.serving.kserve.io 'bakeoff': the API at"
        f" {fake.url} has no serving.kserve.io resources (HTTP 404: Not Found): install KServe on the cluster first"
    ]


def test_a_namespace_that_does_not_exist_is_one_line_not_install_kserve(fake: FakeKubernetes, capsys) -> None:
    fake.namespaces = {NAMESPACE}
    code, _, err = bakeoff(capsys, "--version", "1", "--namespace", "team-b", "--image", IMAGE)
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(
        "bakeoff: error: cannot create servingruntimes.serving.kserve.io 'bakeoff': namespace 'team-b' does not "
        f"exist on {fake.url}"
    )
    assert err[0].endswith("pass --namespace with your profile's namespace, or leave it out for the kube-config's")


def write_an_unknown_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy's InferenceService from now on carries storageURI beside storageUri: a field no KServe CRD declares,
    as a field a newer deploy writes would be to an older KServe."""
    written = deploy.as_dict

    def with_unknown_field(model: object) -> dict:
        body = written(model)
        if body.get("kind") == "InferenceService":
            body["spec"]["predictor"]["model"]["storageURI"] = body["spec"]["predictor"]["model"]["storageUri"]
        return body

    monkeypatch.setattr(deploy, "as_dict", with_unknown_field)


def test_a_field_the_clusters_kserve_lacks_is_one_line_naming_it(
    fake: FakeKubernetes, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older KServe's CRD lacks a field deploy writes: the apply fails (a 500, the API server's own) and the line
    names the field and what to do."""
    assert bakeoff(capsys, "--image", IMAGE, "--version", "1")[0] == 0
    write_an_unknown_field(monkeypatch)
    code, _, err = bakeoff(capsys, "--version", "2")
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(
        f"bakeoff: error: the API at {fake.url} refused to patch inferenceservices.serving.kserve.io 'fashion-mnist'"
    )
    assert err[0].endswith(
        ".spec.predictor.model.storageURI: field not declared in schema): the cluster's serving.kserve.io CRDs refuse"
        " the field named; an older KServe may lack it: upgrade KServe there"
    )
    assert version_of(service(fake)) == "1"


def test_an_unreachable_api_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    server = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", server)))
    code, _, err = bakeoff(capsys, "--version", "1")
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(
        f"bakeoff: error: cannot reach the Kubernetes API at {server} to read servingruntimes.serving.kserve.io "
        "'bakeoff'"
    )
    assert "ConnectionRefusedError" in err[0] and err[0].endswith(
        "check the kube-config context (kubectl config current-context) and the network"
    )


def test_no_kube_config_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    code, _, err = bakeoff(capsys, "--version", "1")
    assert code == 1 and len(err) == 1
    assert err[0].startswith(
        "bakeoff: error: no Kubernetes API to deploy to: not in a pod, and no usable kube-config at "
        f"{tmp_path / 'absent'}"
    )


def test_the_kube_config_namespace_is_the_default_and_default_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "with", "http://127.0.0.1:1")))
    assert deploy.connect().namespace == NAMESPACE
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "without", "http://127.0.0.1:1", namespace=None)))
    assert deploy.connect().namespace == "default"


# ---------------------------------------------------------------- the fake itself


def api(fake: FakeKubernetes) -> client.CustomObjectsApi:
    configuration = client.Configuration()
    configuration.host = fake.url
    return client.CustomObjectsApi(client.ApiClient(configuration))


def test_the_fake_refuses_what_the_api_server_and_kserve_refuse(fake: FakeKubernetes) -> None:
    objects = api(fake)
    body = deploy.as_dict(deploy.inference_service("fashion-mnist", STORE_URI, 1, defaults.IMAGE))
    objects.create_namespaced_custom_object(deploy.GROUP, "v1beta1", NAMESPACE, ISVC, body)
    with pytest.raises(client.ApiException) as taken:
        objects.create_namespaced_custom_object(deploy.GROUP, "v1beta1", NAMESPACE, ISVC, body)
    assert taken.value.status == 409 and json.loads(taken.value.body)["reason"] == "AlreadyExists"

    no_predictor = dict(body, metadata={"name": "other"}, spec={})
    bad_name = dict(body, metadata={"name": "Fashion_MNIST"})
    for wrong, why in (
        (no_predictor, "'predictor' is a required property"),
        (bad_name, "a InferenceService name must consist of lower case"),
    ):
        with pytest.raises(client.ApiException) as refused:
            objects.create_namespaced_custom_object(deploy.GROUP, "v1beta1", NAMESPACE, ISVC, wrong)
        assert refused.value.status == 422 and why in json.loads(refused.value.body)["message"]

    # A misspelt field: refused when the request asks for strict field validation, as deploy does; else pruned.
    typo = json.loads(json.dumps(body).replace('"storageUri"', '"storageURI"'))
    typo["metadata"]["name"] = "typo"
    with pytest.raises(client.ApiException) as refused:
        objects.create_namespaced_custom_object(
            deploy.GROUP, "v1beta1", NAMESPACE, ISVC, typo, field_validation="Strict"
        )
    assert refused.value.status == 400 and json.loads(refused.value.body)["message"].endswith(
        'strict decoding error: unknown field "spec.predictor.model.storageURI"'
    )
    stored = objects.create_namespaced_custom_object(deploy.GROUP, "v1beta1", NAMESPACE, ISVC, typo)
    assert "storageURI" not in stored["spec"]["predictor"]["model"] and fake.violations[-1].endswith("pruned")


def test_the_fake_applies_as_the_api_server_does(fake: FakeKubernetes) -> None:
    """A field manager is required; another manager's field is a conflict unless forced; an applied field left out
    later is removed; an unknown field fails the apply."""
    objects = api(fake)
    body = deploy.as_dict(deploy.inference_service("fashion-mnist", STORE_URI, 1, defaults.IMAGE))
    with pytest.raises(client.ApiException) as refused:
        deploy.server_side_apply(objects, NAMESPACE, ISVC, body, field_manager=None)
    assert refused.value.status == 422 and json.loads(refused.value.body)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    assert fake.kserve_object(ISVC, "fashion-mnist") is None

    created, code, _ = deploy.server_side_apply(objects, NAMESPACE, ISVC, body, field_manager="someone", force=None)
    assert code == 201 and managers(created) == {("someone", "Apply")}
    rolled = deploy.as_dict(deploy.inference_service("fashion-mnist", STORE_URI, 2, defaults.IMAGE))
    with pytest.raises(client.ApiException) as conflict:
        deploy.server_side_apply(objects, NAMESPACE, ISVC, rolled, field_manager="bakeoff", force=None)
    assert conflict.value.status == 409 and json.loads(conflict.value.body)["message"] == (
        'Apply failed with 1 conflict: conflict with "someone": .spec.predictor.annotations.bakeoff/version'
    )
    forced, code, _ = deploy.server_side_apply(objects, NAMESPACE, ISVC, rolled, field_manager="bakeoff", force=True)
    assert code == 200 and version_of(forced) == "2" and forced["metadata"]["generation"] == 2
    assert not owns(forced, "someone", "spec", "predictor", "annotations", deploy.VERSION_ANNOTATION)

    labelled = json.loads(json.dumps(rolled))
    labelled["metadata"]["labels"]["extra"] = "yes"
    deploy.server_side_apply(objects, NAMESPACE, ISVC, labelled)
    again, code, _ = deploy.server_side_apply(objects, NAMESPACE, ISVC, rolled)
    assert "extra" not in again["metadata"]["labels"] and again["metadata"]["generation"] == 2

    typo = json.loads(json.dumps(rolled).replace('"storageUri"', '"storageURI"'))
    with pytest.raises(client.ApiException) as undeclared:
        deploy.server_side_apply(objects, NAMESPACE, ISVC, typo)
    assert undeclared.value.status == 500 and json.loads(undeclared.value.body)["message"].endswith(
        ".spec.predictor.model.storageURI: field not declared in schema"
    )


def test_the_fakes_controller_reports_ready_after_the_configured_reads(fake: FakeKubernetes) -> None:
    fake.isvc_ready_after = 4
    objects = api(fake)
    objects.create_namespaced_custom_object(
        deploy.GROUP, "v1alpha1", NAMESPACE, RUNTIME, deploy.as_dict(deploy.serving_runtime(defaults.IMAGE))
    )
    objects.create_namespaced_custom_object(
        deploy.GROUP,
        "v1beta1",
        NAMESPACE,
        ISVC,
        deploy.as_dict(deploy.inference_service("fashion-mnist", STORE_URI, 1, defaults.IMAGE)),
    )
    states = []
    for _ in range(5):
        status = (
            objects.get_namespaced_custom_object(deploy.GROUP, "v1beta1", NAMESPACE, ISVC, "fashion-mnist").get(
                "status"
            )
            or {}
        )
        states.append({c["type"]: c["status"] for c in status.get("conditions") or []}.get("Ready"))
    assert states == [None, "Unknown", "Unknown", "True", "True"]
