"""The Kubernetes backend and the TFJobs it submits, against a fake API that enforces the real CRD schema."""
from __future__ import annotations

import re

import pytest
from kubeflow.training import TrainingClient
from kubernetes.client import ApiClient, Configuration

from components.errors import BakeoffError
from components.backends.kubernetes import KubernetesBackend
from components.training.tfjob import SPEC_LABEL, VARIANT_LABEL, build_tfjob, job_name, worker_args
from components.defaults import CONFIG as DEFAULT_CONFIG
from components.spec import from_dict, load_variants
from tests.fake_kubernetes import FakeKubernetes, tfjob_schema

LOG = "Epoch 1/1\n429/429 - 19s - loss: 0.51 - accuracy: 0.82\nbakeoff: error: the last words of the chief\n"


def tfjob(variant: dict | None = None, deadline: int = 3600, run_id: str = "run-1234"):
    spec = from_dict(variant or {"name": "batch_norm", "model": {"type": "cnn", "batch_norm": True}, "workers": 2})
    return build_tfjob(spec, name=job_name(run_id, spec.name), image="registry.example/bakeoff:1",
                       args=worker_args(spec, "minio://mlpipeline/v2/artifacts/x", "s3://mlpipeline/bakeoff", f"runs/{run_id}/{spec.name}", 0),
                       env={"BAKEOFF_S3_ENDPOINT": "minio-service.kubeflow:9000"}, active_deadline_seconds=deadline)


def body(job) -> dict:
    return ApiClient().sanitize_for_serialization(job)


def backend(fake: FakeKubernetes, lines: list[str]) -> KubernetesBackend:
    configuration = Configuration()
    configuration.host = fake.url
    client = TrainingClient(client_configuration=configuration, namespace=fake.namespace, job_kind="TFJob")
    return KubernetesBackend(client=client, polling_interval=0.05, grace_seconds=0, sink=lines.append)


@pytest.mark.parametrize("variant", [v.to_dict() for v in load_variants(DEFAULT_CONFIG)]
                         + [{"name": "gpu", "model": {"type": "mlp"}, "workers": 4, "resources": {"cpu": "4", "memory": "8Gi", "gpu": 1}}])
def test_every_tfjob_we_build_satisfies_the_operators_crd(variant: dict) -> None:
    import jsonschema

    body = ApiClient().sanitize_for_serialization(tfjob(variant))
    jsonschema.Draft7Validator(tfjob_schema()).validate(body)
    worker = body["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == variant["workers"] and worker["restartPolicy"] == "OnFailure"
    assert set(body["spec"]["runPolicy"]) == {"backoffLimit", "activeDeadlineSeconds", "cleanPodPolicy", "ttlSecondsAfterFinished"}
    pod = worker["template"]
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    container = pod["spec"]["containers"][0]
    assert container["name"] == "tensorflow" and container["image"] == "registry.example/bakeoff:1"
    assert container["command"] == ["python", "-m", "components.training.worker"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert secrets == {"AWS_ACCESS_KEY_ID": {"name": "mlpipeline-minio-artifact", "key": "accesskey", "optional": True},
                       "AWS_SECRET_ACCESS_KEY": {"name": "mlpipeline-minio-artifact", "key": "secretkey", "optional": True}}
    if variant.get("resources", {}).get("gpu"):
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_job_names_are_dns_1123_and_short() -> None:
    for variant in ("batch_norm", "x" * 100, "Mixed_Case-"):
        name = job_name("0f3b6a8e-2c1d-4a5b-9c7e-0123456789ab", variant)
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert job_name("run-a", "cnn") != job_name("run-b", "cnn")


@pytest.mark.parametrize(("cpu", "threads"), [("1", "1"), ("500m", "1"), ("100m", "1"), ("2", "2"), ("2500m", "2"), ("4", "4"), ("1.5", "1")])
def test_replica_thread_pools_follow_the_cpu_request(cpu: str, threads: str) -> None:
    job = body(tfjob({"name": "cnn", "model": {"type": "cnn"}, "workers": 2, "resources": {"cpu": cpu}}))
    env = {e["name"]: e.get("value") for e in job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]}
    assert {key: env[key] for key in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")} == dict.fromkeys(
        ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"), threads)


def test_a_cpu_that_is_no_quantity_is_a_clear_error() -> None:
    with pytest.raises(BakeoffError, match=r"^variant 'cnn': resources.cpu 'two' is not a CPU quantity: use e.g. \"2\" or \"500m\"$"):
        tfjob({"name": "cnn", "model": {"type": "cnn"}, "resources": {"cpu": "two"}})


def test_labels_are_valid_and_say_whose_the_job_is() -> None:
    value = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # IsValidLabelValue
    long_name = tfjob({"name": "a" * 40 + "_" + "b" * 40, "model": {"type": "mlp"}}).metadata.labels[VARIANT_LABEL]
    assert len(long_name) <= 63 and value.fullmatch(long_name), long_name
    same, again, other_run = (tfjob(run_id=run_id).metadata.labels for run_id in ("run-1", "run-1", "run-2"))
    assert same == again and same[SPEC_LABEL] != other_run[SPEC_LABEL] and same[VARIANT_LABEL] == other_run[VARIANT_LABEL] == "batch_norm"


def test_created_running_succeeded(capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Running", "Succeeded"], log="Epoch 1/1\nsaved\n") as fake:
        backend(fake, lines).run(job)
    assert fake.violations == []
    assert list(fake.jobs) == [job.metadata.name]
    assert fake.jobs[job.metadata.name]["metadata"]["namespace"] == "team-a"
    assert lines[-1] == f"TFJob team-a/{job.metadata.name} succeeded"
    assert f"[Pod {job.metadata.name}-worker-0]: saved" in capsys.readouterr().out  # the chief's log, streamed


def test_failed_job_raises_with_conditions_and_last_log_lines() -> None:
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Failed"], log=LOG) as fake:
        with pytest.raises(BakeoffError) as error:
            backend(fake, []).run(job)
    message = str(error.value)
    assert message.startswith(f"TFJob team-a/{job.metadata.name} failed: Created: TFJobCreated")
    assert f"Failed: TFJobFailed TFJob {job.metadata.name} is failed." in message
    assert message.endswith(f"last lines of {job.metadata.name}-worker-0: Epoch 1/1 / 429/429 - 19s - loss: 0.51 - accuracy: 0.82 / bakeoff: error: the last words of the chief")


def test_a_job_that_never_finishes_is_deleted_at_the_deadline() -> None:
    job = tfjob(deadline=1)
    with FakeKubernetes(["Created", "Running"], log="still going\n") as fake:
        with pytest.raises(BakeoffError, match=r"did not finish in time and was deleted: \| last lines of .*: still going raise --timeout"):
            backend(fake, []).run(job)
    assert fake.deleted == [job.metadata.name]


def test_a_job_the_api_rejects_is_a_clear_error() -> None:
    job = tfjob()
    job.spec.tf_replica_specs["Worker"].replicas = "two"  # the CRD says integer
    with FakeKubernetes(["Created"]) as fake:
        with pytest.raises(BakeoffError, match=r"could not create TFJob team-a/\S+ \(HTTP 422: spec/tfReplicaSpecs/Worker/replicas: 'two' is not of type 'integer'\): check that the Training Operator is installed"):
            backend(fake, []).run(job)
    assert fake.violations and fake.jobs == {}
