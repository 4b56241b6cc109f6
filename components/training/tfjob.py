"""A variant's training described once as a kubeflow-training TFJob; backends only execute it."""

from __future__ import annotations

import hashlib
import json
import math
import re
from decimal import Decimal

from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
)
from kubernetes.client import (
    ApiClient,
    V1Container,
    V1ContainerPort,
    V1EnvVar,
    V1EnvVarSource,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1ResourceRequirements,
    V1SecretKeySelector,
)
from kubernetes.utils import parse_quantity

from bakeoff.components.backends.backend import CONTAINER, PORT, VARIANT_ANNOTATION, WORKER, operator_backoff_limit
from bakeoff.components.defaults import BACKOFF_LIMIT, TIMEOUT_SECONDS
from bakeoff.components.environment import ACCESS_KEY_ENV, SECRET_KEY_ENV, THREAD_VARIABLES
from bakeoff.components.spec import Variant
from bakeoff.components.training import WORKER_PROGRAM

# KFP's own object-store secret, present in every KFP namespace: data key → variable.
STORE_SECRET = "mlpipeline-minio-artifact"
STORE_SECRET_KEYS = {"accesskey": ACCESS_KEY_ENV, "secretkey": SECRET_KEY_ENV}
# The labels that say whose a TFJob is: a job found under our name is ours only if it carries the same values.
PART_OF_LABEL = "app.kubernetes.io/part-of"
VARIANT_LABEL = "bakeoff/variant"
SPEC_LABEL = "bakeoff/spec"  # digest of the spec, whose args name the run's store prefix and the variant
LABEL_VALUE_MAX = 63  # Kubernetes' limit on a label value


def job_name(run_id: str, variant: str, rung: int = 0) -> str:
    """A DNS-1123 name of at most 63 characters, unique per run, variant and rung (a rung's finished job may still
    exist)."""
    key = f"{run_id}/{variant}" + (f"/rung-{rung}" if rung else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-z0-9-]+", "-", f"bakeoff-{variant}".lower()).strip("-")[:50].rstrip("-")
    return f"{stem}-{digest}"


def label_value(text: str) -> str:
    """``text`` as a valid label value: kept when it fits, else truncated with a digest of the whole."""
    if len(text) <= LABEL_VALUE_MAX and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    stem = re.sub(r"[^-A-Za-z0-9_.]+", "-", text)[: LABEL_VALUE_MAX - len(digest) - 1]
    stem = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", stem)
    return f"{stem}-{digest}" if stem else digest


def quota_thread_env(variant: Variant) -> dict[str, str]:
    """TensorFlow's and OpenMP's pool sizes from the replica's CPU: more threads than its quota only get throttled."""
    threads = str(max(1, math.floor(_cpus(variant))))
    return dict.fromkeys(THREAD_VARIABLES, threads)


def _cpus(variant: Variant) -> Decimal:
    return parse_quantity(variant.resources.cpu)  # a valid quantity: components/spec.py checked it


def worker_args(
    variant: Variant,
    data_uri: str,
    store_uri: str,
    prefix: str,
    max_train_examples: int,
    stop_epoch: int = 0,
    rung: int = 0,
) -> list[str]:
    """The worker program's argument list: the TFJob is just this plus the image."""
    return [
        "--variant",
        json.dumps(variant.to_dict(), separators=(",", ":")),
        "--data",
        data_uri,
        "--store",
        store_uri,
        "--prefix",
        prefix,
        "--max-train-examples",
        str(max_train_examples),
        "--stop-epoch",
        str(stop_epoch),
        "--rung",
        str(rung),
    ]


def _secret_env() -> list[V1EnvVar]:
    """Store credentials by reference to the secret; never their values."""
    return [
        V1EnvVar(
            name=variable,
            value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name=STORE_SECRET, key=key, optional=True)),
        )
        for key, variable in STORE_SECRET_KEYS.items()
    ]


def build_tfjob(
    variant: Variant,
    *,
    name: str,
    image: str,
    args: list[str],
    env: dict[str, str],
    backoff_limit: int = BACKOFF_LIMIT,
    active_deadline_seconds: int = TIMEOUT_SECONDS,
) -> KubeflowOrgV1TFJob:
    """The TFJob for one variant: ``variant.workers`` Worker replicas running the worker program."""
    resources = variant.resources
    limits = {"cpu": resources.cpu, "memory": resources.memory}
    if resources.gpu:
        limits["nvidia.com/gpu"] = str(resources.gpu)
    container = V1Container(
        name=CONTAINER,
        image=image,
        command=["python", "-m", WORKER_PROGRAM],
        args=args,
        # The caller's variables win: the local backend sizes its pools by the machine's cores instead.
        env=[V1EnvVar(name=key, value=value) for key, value in sorted({**quota_thread_env(variant), **env}.items())]
        + _secret_env(),
        ports=[V1ContainerPort(name="tfjob-port", container_port=PORT)],
        resources=V1ResourceRequirements(requests=dict(limits), limits=limits),
    )
    template = V1PodTemplateSpec(
        # Istio sidecars never exit, so TFJob pods in injected namespaces would never complete.
        metadata=V1ObjectMeta(annotations={"sidecar.istio.io/inject": "false"}),
        spec=V1PodSpec(containers=[container]),
    )
    spec = KubeflowOrgV1TFJobSpec(
        run_policy=KubeflowOrgV1RunPolicy(
            backoff_limit=operator_backoff_limit(backoff_limit, variant.workers),
            active_deadline_seconds=active_deadline_seconds,
            clean_pod_policy="Running",
            ttl_seconds_after_finished=86400,
        ),
        tf_replica_specs={
            WORKER: KubeflowOrgV1ReplicaSpec(replicas=variant.workers, restart_policy="OnFailure", template=template)
        },
    )
    labels = {PART_OF_LABEL: "bakeoff", VARIANT_LABEL: label_value(variant.name), SPEC_LABEL: spec_digest(spec)}
    metadata = V1ObjectMeta(name=name, labels=labels, annotations={VARIANT_ANNOTATION: variant.name})
    return KubeflowOrgV1TFJob(api_version="kubeflow.org/v1", kind="TFJob", metadata=metadata, spec=spec)


def spec_digest(spec: KubeflowOrgV1TFJobSpec) -> str:
    """A digest of everything the job does: the same run and variant give the same one, another gives another."""
    body = json.dumps(ApiClient().sanitize_for_serialization(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]
