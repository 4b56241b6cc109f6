"""The Kubernetes backend and the TFJobs it submits, against a fake API that enforces the real CRD schema and API
rules."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from kubeflow.training import TrainingClient
from kubernetes.client import ApiClient, Configuration

from bakeoff.components.backends.backend import JobFailed, job_restarts, operator_backoff_limit
from bakeoff.components.backends.kubernetes import KubernetesBackend
from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.environment import POD_NAME_ENVS, SERVICE_ACCOUNT_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import from_dict, load_variants
from bakeoff.components.training.tfjob import SPEC_LABEL, VARIANT_LABEL, build_tfjob, job_name, worker_args
from tests.fake_kubernetes import FakeKubernetes, metadata_errors, tfjob_schema

pytestmark = pytest.mark.unit

LOG = "Epoch 1/1\n429/429 - 19s - loss: 0.51 - accuracy: 0.82\nbakeoff: error: the last words of the chief\n"
STEP_POD = "bakeoff-run-1234-train-batch-norm-2718281828"
OVERLAYS = ("overlays/standalone", "overlays/multi-user-tfjob")  # the ones holding the TFJob Role


def tfjob(variant: dict | None = None, deadline: int = 3600, run_id: str = "run-1234"):
    spec = from_dict(variant or {"name": "batch_norm", "model": {"type": "cnn", "batch_norm": True}, "workers": 2})
    return build_tfjob(
        spec,
        name=job_name(run_id, spec.name),
        image="registry.example/bakeoff:1",
        args=worker_args(
            spec, "minio://mlpipeline/v2/artifacts/x", "s3://mlpipeline/bakeoff", f"runs/{run_id}/{spec.name}", 0
        ),
        env={"BAKEOFF_S3_ENDPOINT": "minio-service.kubeflow:9000"},
        active_deadline_seconds=deadline,
    )


def body(job) -> dict:
    return ApiClient().sanitize_for_serialization(job)


def backend(fake: FakeKubernetes, lines: list[str], **options) -> KubernetesBackend:
    configuration = Configuration()
    configuration.host = fake.url
    client = TrainingClient(client_configuration=configuration, namespace=fake.namespace, job_kind="TFJob")
    return KubernetesBackend(
        client=client, polling_interval=0.01, grace_seconds=0, sink=lines.append, retry_delay=0.001, **options
    )


@pytest.fixture(autouse=True)
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pod name and no service account from the machine that runs the tests."""
    for key in (*POD_NAME_ENVS, SERVICE_ACCOUNT_ENV):
        monkeypatch.delenv(key, raising=False)


def in_step_pod(fake: FakeKubernetes, monkeypatch: pytest.MonkeyPatch, service_account: str = "pipeline-runner") -> str:
    """Runs the backend as KFP runs a step: its pod's name from the downward API."""
    monkeypatch.setenv("KFP_POD_NAME", STEP_POD)
    monkeypatch.setenv("HOSTNAME", STEP_POD[:20])  # cut, as Kubernetes cuts long pod names: must not be used
    return fake.add_pod(STEP_POD, service_account)


def run(
    fake: FakeKubernetes, job, make: Callable[..., Any] = backend, **options
) -> tuple[list[str], BakeoffError | None]:
    """Runs ``job`` with the backend ``make(fake, lines, **options)`` builds: its lines, and its error if it failed."""
    lines: list[str] = []
    try:
        make(fake, lines, **options).run(job)
    except BakeoffError as error:
        return lines, error
    return lines, None


# ---------------------------------------------------------------- the TFJob


@pytest.mark.parametrize(
    "variant",
    [v.to_dict() for v in load_variants(DEFAULT_CONFIG)]
    + [{"name": "gpu", "model": {"type": "mlp"}, "workers": 4, "resources": {"cpu": "4", "memory": "8Gi", "gpu": 1}}],
)
def test_every_tfjob_we_build_satisfies_the_operators_crd(variant: dict) -> None:
    import jsonschema

    job = body(tfjob(variant))
    jsonschema.Draft7Validator(tfjob_schema()).validate(job)
    assert metadata_errors(job["metadata"]) == []
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == variant["workers"] and worker["restartPolicy"] == "OnFailure"
    assert set(job["spec"]["runPolicy"]) == {
        "backoffLimit",
        "activeDeadlineSeconds",
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
    }
    pod = worker["template"]
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    container = pod["spec"]["containers"][0]
    assert container["name"] == "tensorflow" and container["image"] == "registry.example/bakeoff:1"
    assert container["command"] == ["python", "-m", "bakeoff.components.training.worker"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert secrets == {
        "AWS_ACCESS_KEY_ID": {"name": "mlpipeline-minio-artifact", "key": "accesskey", "optional": True},
        "AWS_SECRET_ACCESS_KEY": {"name": "mlpipeline-minio-artifact", "key": "secretkey", "optional": True},
    }
    if variant.get("resources", {}).get("gpu"):
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_job_names_are_dns_1123_and_short() -> None:
    for variant in ("batch_norm", "x" * 100, "Mixed_Case-"):
        name = job_name("0f3b6a8e-2c1d-4a5b-9c7e-0123456789ab", variant)
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert job_name("run-a", "cnn") != job_name("run-b", "cnn")


@pytest.mark.parametrize(
    ("cpu", "threads"), [("1", "1"), ("500m", "1"), ("100m", "1"), ("2", "2"), ("2500m", "2"), ("4", "4"), ("1.5", "1")]
)
def test_replica_thread_pools_follow_the_cpu_request(cpu: str, threads: str) -> None:
    job = body(tfjob({"name": "cnn", "model": {"type": "cnn"}, "workers": 2, "resources": {"cpu": cpu}}))
    env = {
        e["name"]: e.get("value")
        for e in job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    }
    assert {
        key: env[key] for key in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")
    } == dict.fromkeys(("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"), threads)


def test_labels_are_valid_and_say_whose_the_job_is() -> None:
    long_name = body(tfjob({"name": "a" * 40 + "_" + "b" * 40, "model": {"type": "mlp"}}))
    assert metadata_errors(long_name["metadata"]) == [] and len(long_name["metadata"]["labels"][VARIANT_LABEL]) <= 63
    same, again, other_run = (tfjob(run_id=run_id).metadata.labels for run_id in ("run-1", "run-1", "run-2"))
    assert (
        same == again
        and same[SPEC_LABEL] != other_run[SPEC_LABEL]
        and same[VARIANT_LABEL] == other_run[VARIANT_LABEL] == "batch_norm"
    )


# ---------------------------------------------------------------- running it


def test_created_running_succeeded() -> None:
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Running", "Succeeded"], log="Epoch 1/1\nsaved\n") as fake:
        lines, error = run(fake, job)
    assert error is None and fake.violations == []
    assert list(fake.jobs) == [job.metadata.name]
    assert fake.jobs[job.metadata.name]["metadata"]["namespace"] == "team-a"
    assert lines[-1] == f"TFJob team-a/{job.metadata.name} succeeded"
    chief = f"{job.metadata.name}-worker-0"
    # The chief's log, streamed once although it is followed again at every poll.
    assert [line for line in lines if line.startswith(f"[{chief}]")] == [f"[{chief}] Epoch 1/1", f"[{chief}] saved"]


def test_the_chief_log_is_followed_once_its_pod_runs_and_again_after_each_restart() -> None:
    """A Worker-only TFJob is Running as soon as any worker runs, while worker 0 may still be Pending."""
    job = tfjob()
    chief = f"{job.metadata.name}-worker-0"
    first = "".join(f"epoch {n}\n" for n in range(1, 25))  # stamps .05 … 1.2 s: .1 and .15 do not sort as text
    with FakeKubernetes(
        ["Created", "Running", "Running", "Running", "Running", "Running", "Succeeded"],
        pod_phases=["Pending", "Pending", "Pending", "Running", "Running", "Running", "Succeeded"],
        restarts=[5],
        log=[first, "resumed from checkpoint\nsaved\n"],
    ) as fake:
        lines, error = run(fake, job)
    assert error is None
    assert fake.log_reads and all(read.phase != "Pending" for read in fake.log_reads)
    assert {read.restarts for read in fake.log_reads if read.follow and read.phase == "Running"} == {
        0,
        1,
    }  # both containers followed
    shown = [line for line in lines if line.startswith(f"[{chief}]") or "restarted" in line]
    assert shown == (
        [f"[{chief}] epoch {n}" for n in range(1, 25)]
        + [f"{chief}: its container restarted (restart 1); following the new one"]
        + [f"[{chief}] resumed from checkpoint", f"[{chief}] saved"]
    )


def test_failed_job_raises_with_conditions_and_last_log_lines() -> None:
    job = tfjob()
    with FakeKubernetes(
        ["Created", "Running", "Failed"], log=LOG, worker_logs={1: "Epoch 1/1\nworker 1 waits\n"}
    ) as fake:
        _, error = run(fake, job)
    assert isinstance(error, JobFailed)
    message = str(error)
    assert message.startswith(f"TFJob team-a/{job.metadata.name} failed: Created: TFJobCreated")
    assert (
        f"Failed: TFJobFailed Job {job.metadata.name} has failed because it has reached the specified backoff"
        in message
    )
    assert message.endswith(
        f"last lines of {job.metadata.name}-worker-0: Epoch 1/1 / 429/429 - 19s - loss: 0.51 - accuracy: 0.82"
        f" / bakeoff: error: the last words of the chief | last lines of {job.metadata.name}-worker-1: Epoch 1/1 / "
        "worker 1 waits"
    )


def test_a_job_the_operator_stopped_at_its_deadline_is_not_a_failure_that_spends_its_backup() -> None:
    """Only a job past its restarts is JobFailed (launch then removes its backup); a deadline is the run's timeout."""
    job = tfjob(deadline=60)
    with FakeKubernetes(["Created", "Running", "Failed"], log="epoch 3\n", failure="deadline") as fake:
        _, error = run(fake, job)
    assert isinstance(error, BakeoffError) and not isinstance(error, JobFailed), error
    message = str(error)
    assert message.startswith(f"TFJob team-a/{job.metadata.name} ran past its activeDeadlineSeconds and was stopped:")
    assert "active longer than specified deadline" in message and message.endswith("raise --timeout or train less")


def test_a_job_that_never_finishes_is_deleted_at_the_deadline() -> None:
    job = tfjob(deadline=1)
    with FakeKubernetes(["Created", "Running"], log="still going\n") as fake:
        _, error = run(fake, job)
    assert re.search(
        r"did not finish in time and was deleted: \| last lines of \S+-worker-0: still going raise --timeout",
        str(error),
    )
    assert fake.deleted == [job.metadata.name]


@pytest.mark.parametrize(("timeout", "grace"), [(20, 15.0), (200, 50.0), (3600, 120.0)])
def test_a_stuck_job_is_deleted_a_quarter_of_its_timeout_past_it_within_15_s_to_2_min(
    timeout: int, grace: float
) -> None:
    """The runner waits past the timeout for the controller to stop the job itself, but not 2 min for a 20 s job."""
    assert KubernetesBackend(client=object(), sink=print).grace(timeout) == grace


def test_a_job_the_api_rejects_is_a_clear_error() -> None:
    job = tfjob()
    job.spec.tf_replica_specs["Worker"].replicas = "two"  # the CRD says integer
    with FakeKubernetes(["Created"]) as fake:
        _, error = run(fake, job)
    assert re.fullmatch(
        r"could not create TFJob team-a/\S+ \(HTTP 422: spec/tfReplicaSpecs/Worker/replicas: 'two' is not of type "
        r"'integer'\):"
        r" check that the Training Operator is installed and that this service account may create tfjobs"
        r" \(manifests/\)",
        str(error),
    )
    assert fake.violations and fake.jobs == {}


def test_a_cluster_without_the_tfjob_crd_fails_at_its_first_create_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kubeflow 1.11 and 26.03 install Trainer v2, not the v1 operator: the API server does not know tfjobs at all."""
    job = tfjob()
    with FakeKubernetes(["Created"], crds=frozenset()) as fake:
        in_step_pod(fake, monkeypatch)
        lines, error = run(fake, job)
    assert str(error) == (
        f"cannot create TFJob team-a/{job.metadata.name}: this cluster has no TFJob resource (HTTP 404: Not Found for"
        " tfjobs.kubeflow.org), so the Kubeflow Training Operator v1 is not installed (Kubeflow 1.11 and later install"
        " Trainer v2 instead, which runs no TFJob): run with `--param trainer=trainjob`, or install it with"
        " `kubectl apply --server-side -k manifests/training-operator`, then retry the run"
    )
    assert [(call.verb, call.resource) for call in fake.calls] == [("get", "pods"), ("create", "tfjobs")], (
        "no retry, no wait"
    )
    assert not [line for line in lines if "trying again" in line]


def test_the_fake_answers_an_unknown_resource_type_as_the_api_server_does() -> None:
    """Authorized first, then Go's plain 404 from the NotFoundHandler: no Status body to parse."""
    import urllib.error
    import urllib.request

    def post(fake: FakeKubernetes) -> urllib.error.HTTPError:
        request = urllib.request.Request(
            f"{fake.url}/apis/kubeflow.org/v1/namespaces/team-a/tfjobs",
            data=b"{}",
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=10)
        return answer.value

    with FakeKubernetes(["Created"], crds=frozenset()) as fake:
        missing = post(fake)
        assert (missing.code, missing.headers["Content-Type"], missing.read()) == (
            404,
            "text/plain; charset=utf-8",
            b"404 page not found\n",
        )
        fake.granted = set()
        assert post(fake).code == 403


# ---------------------------------------------------------------- an API that hiccups


def test_transient_api_errors_are_retried() -> None:
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Succeeded"], log="saved\n") as fake:
        fake.fail("create", "tfjobs", times=2, answer=503)
        fake.fail("get", "tfjobs", times=2, answer=500)
        fake.fail("get", "pods", times=1, answer=502)
        fake.fail("get", "pods/log", times=1, answer=500)
        lines, error = run(fake, job)
    assert error is None and lines[-1] == f"TFJob team-a/{job.metadata.name} succeeded"
    retried = [line for line in lines if line.startswith("Kubernetes API could not")]
    assert any(f"create TFJob team-a/{job.metadata.name} (HTTP 503" in line for line in retried)
    assert any(f"read TFJob team-a/{job.metadata.name} (HTTP 500" in line for line in retried)
    assert any("(HTTP 502" in line for line in retried)
    assert f"[{job.metadata.name}-worker-0] saved" in lines
    assert not any(failure.times for failure in fake.failures)


def test_dropped_connections_are_retried() -> None:
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Succeeded"]) as fake:
        fake.fail("get", "tfjobs", times=8, answer="drop")  # more than urllib3's own retries let through
        lines, error = run(fake, job)
    assert error is None
    assert any(line.startswith(f"Kubernetes API could not read TFJob team-a/{job.metadata.name} (") for line in lines)


def test_an_api_that_keeps_failing_is_its_own_error_not_a_failed_tfjob() -> None:
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Succeeded"]) as fake:
        fake.fail("get", "tfjobs", times=100, answer=503)
        _, error = run(fake, job, api_attempts=3)
    assert not isinstance(error, JobFailed)  # the job may still succeed: a retry resumes it from its backup
    assert str(error) == (
        f"the Kubernetes API failed 3 times in a row to read TFJob team-a/{job.metadata.name}"
        " (HTTP 503: etcdserver: request timed out): check the API server, then retry the run"
    )
    assert fake.deleted == [] and list(fake.jobs) == [job.metadata.name]  # the job itself is left to run


# ---------------------------------------------------------------- a job already under our name (a KFP retry)


def check_adoption(
    fake: FakeKubernetes,
    monkeypatch: pytest.MonkeyPatch,
    earlier: dict,
    execute: Callable[[], tuple[list[str], BakeoffError | None]],
) -> list[str]:
    """``earlier``, an unfinished job of another attempt of the run, is adopted by ``execute()``: this step's pod joins
    its owners, so it outlives the earlier attempt's pod and goes with this one's. Returns the backend's lines."""
    name, kind = earlier["metadata"]["name"], earlier["kind"]
    earlier_uid = fake.add_pod("earlier-attempt")
    earlier["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "earlier-attempt", "uid": earlier_uid}
    ]
    uid = fake.add_job(earlier, ["Created", "Running", "Running", "Succeeded"])["metadata"]["uid"]
    step_uid = in_step_pod(fake, monkeypatch)
    lines, error = execute()
    assert error is None and fake.deleted == [] and fake.job_uid(name) == uid
    assert (
        f"adopted {kind} team-a/{name}: an earlier attempt of this run and variant started it and it has not finished"
        in lines
    )
    owners = {ref["name"]: ref["uid"] for ref in fake.jobs[name]["metadata"]["ownerReferences"]}
    assert owners == {"earlier-attempt": earlier_uid, STEP_POD: step_uid}
    fake.delete_pod("earlier-attempt")  # KFP deletes a retried run's failed pods: the job must outlive that
    assert name in fake.jobs
    fake.delete_pod(STEP_POD)
    assert fake.collected == [name]
    return lines


def test_an_unfinished_job_of_the_same_run_and_variant_is_adopted(monkeypatch: pytest.MonkeyPatch) -> None:
    job = tfjob()
    with FakeKubernetes(["Running", "Succeeded"], log="resumed\nsaved\n") as fake:
        lines = check_adoption(fake, monkeypatch, body(tfjob()), lambda: run(fake, job))
    assert f"[{job.metadata.name}-worker-0] saved" in lines


@pytest.mark.parametrize(
    ("existing", "why"),
    [
        (("Created", "Running", "Succeeded"), "an earlier attempt's job has already succeeded"),
        (("Created", "Running", "Failed"), "an earlier attempt's job has already failed"),
        (("Created", "Running"), "it is another run's or variant's (its labels differ)"),
    ],
)
def test_a_finished_or_foreign_job_is_replaced(existing: tuple[str, ...], why: str) -> None:
    job = tfjob(deadline=5)  # a short one: the foreign job, wrongly adopted, would never finish
    name = job.metadata.name
    with FakeKubernetes(["Created", "Running", "Succeeded"], log="saved\n") as fake:
        earlier = body(tfjob(deadline=5, run_id="run-1234" if "already" in why else "another-run"))
        earlier["metadata"]["name"] = name
        old_uid = fake.add_job(earlier, list(existing))["metadata"]["uid"]
        fake.timelines[old_uid].gets = len(existing)  # it has reached its last state
        lines, error = run(fake, job)
    assert error is None and lines[-1] == f"TFJob team-a/{name} succeeded"
    assert f"replacing TFJob team-a/{name}: {why}" in lines
    # Deleted in the foreground (its pods go first), created again only once it is gone.
    assert [call.verb for call in fake.calls if call.resource == "tfjobs" and call.verb in ("create", "delete")] == [
        "create",
        "delete",
        "create",
    ]
    assert fake.propagations == ["Foreground"] and fake.job_uid(name) != old_uid
    assert fake.jobs[name]["metadata"]["labels"] == job.metadata.labels


# ---------------------------------------------------------------- owner and service account


def test_the_step_pod_owns_the_job_and_deleting_it_deletes_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    job = tfjob()
    name = job.metadata.name
    with FakeKubernetes(["Created", "Running", "Running", "Running", "Succeeded"]) as fake:
        uid = in_step_pod(fake, monkeypatch)
        fake.on_state[2] = lambda: fake.delete_pod(STEP_POD)  # the run is deleted while the job runs
        submitted: list[dict] = []
        fake.on_state[0] = lambda: submitted.append(dict(fake.jobs[name]))
        _, error = run(fake, job)
    assert submitted[0]["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": STEP_POD, "uid": uid}
    ]
    assert fake.collected == [name]
    assert str(error) == (
        f"TFJob team-a/{name} was deleted while this step waited for it (the run was cancelled, or someone deleted it):"
        " retry the run"
    )


def test_replicas_run_as_the_step_or_the_configured_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    for configured, expected in ((None, "pipeline-runner"), ("trainer", "trainer")):
        if configured:
            monkeypatch.setenv(SERVICE_ACCOUNT_ENV, configured)
        job = tfjob()
        with FakeKubernetes(["Created", "Succeeded"]) as fake:
            in_step_pod(fake, monkeypatch)
            _, error = run(fake, job)
        assert error is None
        assert (
            fake.jobs[job.metadata.name]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["serviceAccountName"]
            == expected
        )


def test_outside_a_pod_the_job_has_no_owner_and_runs_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    for hostname, said in (
        (None, "not in a pod: the TFJob gets no owner"),
        ("laptop", "no pod team-a/laptop: not in a pod here"),
    ):
        if hostname:
            monkeypatch.setenv("HOSTNAME", hostname)
        job = tfjob()
        with FakeKubernetes(["Created", "Succeeded"]) as fake:
            lines, error = run(fake, job)
        assert error is None and any(line.startswith(said) for line in lines)
        metadata, template = (
            fake.jobs[job.metadata.name]["metadata"],
            fake.jobs[job.metadata.name]["spec"]["tfReplicaSpecs"]["Worker"]["template"],
        )
        assert "ownerReferences" not in metadata and "serviceAccountName" not in template["spec"]


# ---------------------------------------------------------------- RBAC: the Role allows exactly the calls made


def calls_of_every_scenario(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every request in a success, a failure, a 409 adopted, a 409 replaced and a timeout."""

    def succeed(fake: FakeKubernetes) -> None:
        run(fake, tfjob())

    def adopt(fake: FakeKubernetes) -> None:
        fake.add_job(body(tfjob()), ["Created", "Running", "Succeeded"])
        run(fake, tfjob())

    def replace(fake: FakeKubernetes) -> None:
        uid = fake.add_job(body(tfjob()), ["Succeeded"])["metadata"]["uid"]
        fake.timelines[uid].gets = 1
        run(fake, tfjob())

    def time_out(fake: FakeKubernetes) -> None:
        run(fake, tfjob(deadline=1))

    scenarios: list[tuple[list[str], Callable[[FakeKubernetes], None]]] = [
        (["Created", "Running", "Succeeded"], succeed),
        (["Created", "Running", "Failed"], succeed),
        (["Created", "Succeeded"], adopt),
        (["Created", "Succeeded"], replace),
        (["Created", "Running"], time_out),
    ]
    calls: set[tuple[str, str, str]] = set()
    for phases, scenario in scenarios:
        with FakeKubernetes(phases, log="a line\n", restarts=[2]) as fake:
            in_step_pod(fake, monkeypatch)
            scenario(fake)
        calls |= {(call.group, call.resource, call.verb) for call in fake.calls}
    return calls


def test_the_role_allows_every_call_the_backend_makes_and_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_manifests import role_gaps

    assert role_gaps("bakeoff-tfjob-runner", calls_of_every_scenario(monkeypatch)) == {
        overlay: ([], []) for overlay in OVERLAYS
    }


@pytest.mark.parametrize("replicas", [1, 2, 4])
@pytest.mark.parametrize("restarts", [0, 1, 2, 3])
def test_the_operators_backoff_limit_allows_exactly_the_job_restarts_asked(restarts: int, replicas: int) -> None:
    """The operator fails a job once its replicas' restarts add up to backoffLimit (PastBackoffLimit, pkg/core/job.go),
    and a lost MWMS replica restarts every replica: ``restarts`` faults pass, one more does not."""
    limit = operator_backoff_limit(restarts, replicas)
    counted = [faults * replicas for faults in range(restarts + 2)]  # what the operator sums after each fault
    assert [count >= limit for count in counted] == [False] * (restarts + 1) + [True]
    assert job_restarts(limit, replicas) == restarts
