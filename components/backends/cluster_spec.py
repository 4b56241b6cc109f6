"""TF_CONFIG for a worker of bakeoff's Trainer v2 runtime, derived from its pod's JobSet identity.

The Training Operator sets TF_CONFIG for a TFJob's replicas; Trainer v2's PlainML policy sets nothing, so the
worker builds it the way Trainer's jax and torch plugins name their peers (``<trainjob>-node-0-<i>.<trainjob>``):

* JobSet names the Jobs of a replicated job ``<jobset>-<replicatedJob>-<jobIndex>`` (GenJobName,
  kubernetes-sigs/jobset pkg/util/placement/placement.go, v0.10.1) and labels their pods with the JobSet's
  name, the replicated job's name and the job index (labelAndAnnotateObject, pkg/controllers/jobset_controller.go);
  it sets the pods' subdomain to the JobSet's name, ``spec.network.subdomain`` unset (GetSubdomain), and creates
  the headless Service of that name that resolves them (createHeadlessSvcIfNecessary).
* The Job controller gives the pod of completion index ``i`` the hostname ``<job>-<i>`` and the variable
  ``JOB_COMPLETION_INDEX`` (manageJob in k8s.io/kubernetes pkg/controller/job/job_controller.go,
  addCompletionIndexEnvVariable in indexed_job_utils.go).
* Trainer v2.1 names the JobSet after the TrainJob (pkg/runtime/framework/plugins/jobset/jobset.go Build).

bakeoff's runtime (manifests/trainer-v2/) passes the labels in through the downward API; the TrainJob backend
passes the number of nodes, which no pod can read, as ``BAKEOFF_NUM_NODES``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping

from bakeoff.components.backends.backend import PORT
from bakeoff.components.environment import (
    COMPLETION_INDEX_ENV,
    JOB_INDEX_ENV,
    JOBSET_ENV,
    NODES_ENV,
    REPLICATED_JOB_ENV,
    TF_CONFIG_ENV,
)
from bakeoff.components.errors import BakeoffError

LABELS = {
    JOBSET_ENV: "jobset.sigs.k8s.io/jobset-name",
    REPLICATED_JOB_ENV: "jobset.sigs.k8s.io/replicatedjob-name",
    JOB_INDEX_ENV: "jobset.sigs.k8s.io/job-index",
}


def host(jobset: str, replicated_job: str, job_index: int, pod_index: int) -> str:
    """A JobSet pod's DNS name within its namespace: its hostname under the JobSet's headless Service."""
    return f"{jobset}-{replicated_job}-{job_index}-{pod_index}.{jobset}"


def _number(env: Mapping[str, str], key: str) -> int:
    value = env.get(key, "")
    if not value.isdigit():
        raise BakeoffError(
            f"{key}={value!r} is not a whole number: this pod does not look like one of bakeoff's Trainer v2 runtime"
            f" (manifests/trainer-v2/); set TF_CONFIG instead"
        )
    return int(value)


def from_jobset(env: Mapping[str, str]) -> dict | None:
    """The TF_CONFIG of the pod whose environment is ``env``, or None when it does not run under bakeoff's runtime."""
    if not env.get(JOBSET_ENV):
        return None
    missing = [key for key in (REPLICATED_JOB_ENV, JOB_INDEX_ENV, COMPLETION_INDEX_ENV, NODES_ENV) if not env.get(key)]
    if missing:
        raise BakeoffError(
            f"{JOBSET_ENV} is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
            "submit the TrainJob with bakeoff's runtime (manifests/trainer-v2/) "
            f"and {NODES_ENV} equal to trainer.numNodes, or set TF_CONFIG"
        )
    jobset, replicated_job = env[JOBSET_ENV], env[REPLICATED_JOB_ENV]
    job_index, index, nodes = (_number(env, key) for key in (JOB_INDEX_ENV, COMPLETION_INDEX_ENV, NODES_ENV))
    if not index < nodes:
        raise BakeoffError(
            f"{COMPLETION_INDEX_ENV}={index} is not below {NODES_ENV}={nodes}: "
            f"set {NODES_ENV} to the TrainJob's trainer.numNodes"
        )
    workers = [f"{host(jobset, replicated_job, job_index, pod)}:{PORT}" for pod in range(nodes)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}, "environment": "cloud"}


def ensure_tf_config(environ: MutableMapping[str, str] = os.environ) -> None:
    """Sets TF_CONFIG from the pod's JobSet identity, unless it is set already or the pod is not one of the
    runtime's."""
    if environ.get(TF_CONFIG_ENV):
        return
    config = from_jobset(environ)
    if config is not None:
        environ[TF_CONFIG_ENV] = json.dumps(config)
