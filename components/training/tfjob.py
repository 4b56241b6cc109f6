"""A variant's training described once as a kubeflow-training TFJob; backends only execute it."""
from __future__ import annotations

import hashlib
import json
import re

from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
)
from kubernetes.client import (
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

from components.defaults import BACKOFF_LIMIT, TIMEOUT_SECONDS
from components.spec import Variant

CONTAINER = "tensorflow"  # the container name the Training Operator looks for
PORT = 2222  # the Training Operator's default TFJob port
WORKER = "Worker"
WORKER_PROGRAM = "components.training.worker"  # run as `python -m`
# KFP's own object-store secret, present in every KFP namespace: data key → variable.
STORE_SECRET = "mlpipeline-minio-artifact"
STORE_SECRET_KEYS = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}


def job_name(run_id: str, variant: str) -> str:
    """A DNS-1123 name of at most 63 characters, unique per run and variant."""
    digest = hashlib.sha256(f"{run_id}/{variant}".encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-z0-9-]+", "-", f"bakeoff-{variant}".lower()).strip("-")[:50].rstrip("-")
    return f"{stem}-{digest}"


def worker_args(variant: Variant, data_uri: str, store_uri: str, prefix: str, max_train_examples: int) -> list[str]:
    """The worker program's argument list: the TFJob is just this plus the image."""
    return [
        "--variant", json.dumps(variant.to_dict(), separators=(",", ":")),
        "--data", data_uri,
        "--store", store_uri,
        "--prefix", prefix,
        "--max-train-examples", str(max_train_examples),
    ]


def _secret_env() -> list[V1EnvVar]:
    """Store credentials by reference to the secret; never their values."""
    return [
        V1EnvVar(name=variable, value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name=STORE_SECRET, key=key, optional=True)))
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
        env=[V1EnvVar(name=key, value=value) for key, value in sorted(env.items())] + _secret_env(),
        ports=[V1ContainerPort(name="tfjob-port", container_port=PORT)],
        resources=V1ResourceRequirements(requests=dict(limits), limits=limits),
    )
    template = V1PodTemplateSpec(
        # Istio sidecars never exit, so TFJob pods in injected namespaces would never complete.
        metadata=V1ObjectMeta(annotations={"sidecar.istio.io/inject": "false"}),
        spec=V1PodSpec(containers=[container]),
    )
    return KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=V1ObjectMeta(name=name, labels={"app.kubernetes.io/part-of": "bakeoff", "bakeoff/variant": variant.name}),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(
                backoff_limit=backoff_limit,
                active_deadline_seconds=active_deadline_seconds,
                clean_pod_policy="Running",
                ttl_seconds_after_finished=86400,
            ),
            tf_replica_specs={
                WORKER: KubeflowOrgV1ReplicaSpec(replicas=variant.workers, restart_policy="OnFailure", template=template)
            },
        ),
    )
