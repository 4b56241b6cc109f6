"""The TrainJob backend (Kubeflow Trainer v2.1) and the TrainJobs it derives from the TFJob, against the fake API
(tests/fake_kubernetes.py: Trainer v2.1.0's CRD, its runtime webhook, JobSet's pod names and labels)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from kubernetes.client import ApiClient, Configuration

from bakeoff.components.backends.trainjob import RUNTIME, TrainJobBackend, trainjob_for, trainjob_name
from bakeoff.components.environment import NODES_ENV, SERVICE_ACCOUNT_ENV
from bakeoff.components.errors import BakeoffError
from tests import test_kubernetes_backend as kubernetes_tests
from tests.fake_kubernetes import (
    FakeKubernetes,
    trainjob_errors,
    trainjob_openapi,
    trainjob_pod_name,
    trainjob_schema,
)
from tests.test_kubernetes_backend import (  # noqa: F401 (a fixture)
    LOG,
    STEP_POD,
    body,
    check_adoption,
    in_step_pod,
    outside_a_pod,
    tfjob,
)

pytestmark = pytest.mark.unit

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def backend(fake: FakeKubernetes, lines: list[str], **options) -> TrainJobBackend:
    configuration = Configuration()
    configuration.host = fake.url
    return TrainJobBackend(
        client=ApiClient(configuration),
        namespace=fake.namespace,
        polling_interval=0.01,
        grace_seconds=0,
        sink=lines.append,
        retry_delay=0.001,
        **options,
    )


def run(fake: FakeKubernetes, job, **options) -> tuple[list[str], BakeoffError | None]:
    return kubernetes_tests.run(fake, job, make=backend, **options)


def submitted(job) -> dict:
    """The TrainJob the backend submits for the TFJob ``job``, as the API receives it."""
    return trainjob_for(job).body()


# ---------------------------------------------------------------- the TrainJob


@pytest.mark.parametrize(
    "variant",
    [
        None,
        {"name": "gpu", "model": {"type": "mlp"}, "workers": 64, "resources": {"cpu": "4", "memory": "8Gi", "gpu": 1}},
    ],
)
def test_the_trainjob_is_the_tfjobs_worker_on_bakeoffs_runtime(variant: dict | None) -> None:
    job = tfjob(variant)
    (container,) = body(job)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    derived = submitted(job)
    assert trainjob_errors(derived) == []
    assert derived["spec"]["runtimeRef"] == {
        "name": RUNTIME,
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    trainer = derived["spec"]["trainer"]
    workers = job.spec.tf_replica_specs["Worker"].replicas
    assert trainer == {
        "image": container["image"],
        "command": container["command"],
        "args": container["args"],
        "numNodes": workers,
        "env": container["env"] + [{"name": NODES_ENV, "value": str(workers)}],
        "resourcesPerNode": container["resources"],
    }
    assert {key: derived["metadata"][key] for key in ("labels", "annotations")} == {
        key: body(job)["metadata"][key] for key in ("labels", "annotations")
    }, "whose job it is, as for the TFJob"


def test_names_leave_room_for_every_pod_name_jobset_makes() -> None:
    """JobSet refuses a JobSet whose pod names <name>-node-0-<index>-<5 random> would pass 63 characters."""
    run_id = "0f3b6a8e-2c1d-4a5b-9c7e-0123456789ab"
    for variant in ("batch_norm", "x" * 100, "9_lives", "a-" * 40 + "b"):
        name = trainjob_for(
            tfjob({"name": variant, "model": {"type": "mlp"}, "workers": 64}, run_id=run_id)
        ).metadata.name
        longest = trainjob_pod_name(name, 63)
        assert len(longest) <= 63 and _DNS1035.fullmatch(longest) and _DNS1035.fullmatch(name), longest
    assert trainjob_name("bakeoff-cnn-1a2b3c4d") == "bakeoff-cnn-1a2b3c4d", "a short name stays as it is"
    firsts = {trainjob_for(tfjob(run_id=run)).metadata.name for run in ("run-a", "run-b")}
    assert len(firsts) == 2, "the digest keeps runs apart"


def test_the_fake_holds_every_rule_the_crd_puts_on_the_whole_trainjob() -> None:
    """The CRD's CEL rules on the object: the fake applies these two, and a new one upstream shows up here."""
    assert {rule["rule"] for rule in trainjob_schema()["x-kubernetes-validations"]} == {
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "size(self.metadata.name) <= 63",
    }
    derived = submitted(tfjob())
    assert trainjob_errors(dict(derived, metadata=dict(derived["metadata"], name="9-lives-" + "x" * 60))) == [
        "metadata.name must match RFC 1035 DNS label format",
        "metadata.name must be no more than 63 characters",
    ]
    assert trainjob_errors(dict(derived, spec=dict(derived["spec"], trainers={}))) == ["unknown field 'spec.trainers'"]


# ---------------------------------------------------------------- running it


def test_created_running_completed_with_the_chiefs_log() -> None:
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    with FakeKubernetes(["Created", "Running", "Running", "Succeeded"], log="Epoch 1/1\nsaved\n") as fake:
        lines, error = run(fake, job)
    assert error is None and fake.violations == []
    assert lines[-1] == f"TrainJob team-a/{name} succeeded"
    chief = trainjob_pod_name(name, 0)
    assert [line for line in lines if line.startswith(f"[{chief}]")] == [f"[{chief}] Epoch 1/1", f"[{chief}] saved"]
    assert (
        fake.jobs[name]["kind"] == "TrainJob" and fake.log_reads and all(read.pod == chief for read in fake.log_reads)
    )


def test_the_chiefs_new_pod_is_followed_after_the_jobset_restarts() -> None:
    """bakeoff's runtime restarts the whole JobSet on a fault: the chief comes back in a new pod, not container."""
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    chief, again = trainjob_pod_name(name, 0), trainjob_pod_name(name, 0, attempt=1)
    with FakeKubernetes(
        ["Created", "Running", "Running", "Running", "Succeeded"],
        restarts=[3],
        log=["epoch 1\n", "resumed after epoch 1\nsaved\n"],
    ) as fake:
        lines, error = run(fake, job)
    assert error is None and chief != again
    shown = [line for line in lines if line.startswith((f"[{chief}]", f"[{again}]")) or "new pod" in line]
    assert shown == [
        f"[{chief}] epoch 1",
        f"{again}: the chief's new pod (its job was started again); following it",
        f"[{again}] resumed after epoch 1",
        f"[{again}] saved",
    ]


def test_a_new_chief_pod_that_ends_between_two_polls_is_still_named_and_shown() -> None:
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    chief, again = trainjob_pod_name(name, 0), trainjob_pod_name(name, 0, attempt=1)
    with FakeKubernetes(["Created", "Running", "Succeeded"], restarts=[2], log=["epoch 1\n", "saved\n"]) as fake:
        lines, error = run(fake, job)
    assert error is None
    shown = [line for line in lines if line.startswith((f"[{chief}]", f"[{again}]")) or "new pod" in line]
    assert shown == [
        f"[{chief}] epoch 1",
        f"{again}: the chief's new pod (its job was started again); following it",
        f"[{again}] saved",
    ]


def test_failed_job_raises_with_its_condition_and_every_workers_last_lines() -> None:
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    with FakeKubernetes(["Created", "Running", "Failed"], log=LOG, worker_logs={1: "worker 1 waits\n"}) as fake:
        _, error = run(fake, job)
    assert str(error) == (
        f"TrainJob team-a/{name} failed: Failed: FailedJobs jobset failed due to one or more job failures"
        f" | last lines of {trainjob_pod_name(name, 0)}: Epoch 1/1 / 429/429 - 19s - loss: 0.51 - accuracy: 0.82"
        f" / bakeoff: error: the last words of the chief | last lines of {trainjob_pod_name(name, 1)}: worker 1 waits"
    )


def test_a_job_past_its_deadline_is_deleted_since_no_trainjob_field_bounds_it() -> None:
    job = tfjob(deadline=1)
    name = trainjob_name(job.metadata.name)
    with FakeKubernetes(["Created", "Running"], log="still going\n") as fake:
        _, error = run(fake, job)
    assert str(error) == (
        f"TrainJob team-a/{name} did not finish in time and was deleted: | last lines of {trainjob_pod_name(name, 0)}:"
        " still going raise --timeout or check Kubeflow Trainer"
    )
    assert fake.deleted == [name] and fake.propagations == ["Foreground"]


# ---------------------------------------------------------------- a cluster that cannot run it


def test_a_cluster_without_trainer_fails_at_once_naming_the_crd_and_the_other_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    with FakeKubernetes(["Created"], crds=frozenset({"tfjobs.kubeflow.org"})) as fake:
        in_step_pod(fake, monkeypatch)
        _, error = run(fake, job)
    assert str(error) == (
        f"cannot create TrainJob team-a/{name}: this cluster has no TrainJob resource (HTTP 404: Not Found for"
        " trainjobs.trainer.kubeflow.org), so Kubeflow Trainer v2 is not installed (Kubeflow 1.10 and earlier install"
        " the Training Operator v1, which runs TFJobs): run with `--param trainer=tfjob`, or install Kubeflow Trainer"
        " and `kubectl apply -k manifests/trainer-v2`, then retry the run"
    )
    assert [(call.verb, call.resource) for call in fake.calls] == [("get", "pods")] and fake.openapi_reads == 1, (
        "the served schema's 404 says it before any create: no retry, no wait"
    )


def test_a_cluster_without_bakeoffs_runtime_says_to_apply_it() -> None:
    job = tfjob()
    with FakeKubernetes(["Created"], runtimes=frozenset()) as fake:
        _, error = run(fake, job)
    message = str(error)
    assert message.startswith(
        f"could not create TrainJob team-a/{trainjob_name(job.metadata.name)} (HTTP 403: admission webhook"
    )
    assert f'clustertrainingruntimes.trainer.kubeflow.org "{RUNTIME}" not found' in message
    assert message.endswith(
        "): check that Kubeflow Trainer and bakeoff's runtime (`kubectl apply -k manifests/trainer-v2`) are installed"
        " and that this service account may create trainjobs (manifests/)"
    )
    assert fake.jobs == {}


# ---------------------------------------------------------------- a job already under our name, owner, service account


def test_an_unfinished_job_of_the_same_run_is_adopted_and_outlives_the_earlier_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = tfjob()
    with FakeKubernetes(["Running", "Succeeded"], log="resumed\nsaved\n") as fake:
        lines = check_adoption(fake, monkeypatch, submitted(tfjob()), lambda: run(fake, job))
    assert f"[{trainjob_pod_name(trainjob_name(job.metadata.name), 0)}] saved" in lines


def test_a_completed_job_of_an_earlier_attempt_is_replaced() -> None:
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    with FakeKubernetes(["Created", "Running", "Succeeded"], log="saved\n") as fake:
        old_uid = fake.add_job(submitted(tfjob()), ["Succeeded"])["metadata"]["uid"]
        fake.timelines[old_uid].gets = 1
        lines, error = run(fake, job)
    assert (
        error is None and f"replacing TrainJob team-a/{name}: an earlier attempt's job has already completed" in lines
    )
    assert [call.verb for call in fake.calls if call.resource == "trainjobs" and call.verb in ("create", "delete")] == [
        "create",
        "delete",
        "create",
    ]
    assert fake.job_uid(name) != old_uid


def test_the_workers_run_as_the_step_or_the_configured_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    for configured, expected in ((None, "pipeline-runner"), ("trainer", "trainer")):
        if configured:
            monkeypatch.setenv(SERVICE_ACCOUNT_ENV, configured)
        job = tfjob()
        name = trainjob_name(job.metadata.name)
        with FakeKubernetes(["Created", "Succeeded"]) as fake:
            uid = in_step_pod(fake, monkeypatch)
            _, error = run(fake, job)
            worker = fake._worker(trainjob_pod_name(name, 0))
            assert worker is not None, "no chief pod"
            chief = fake._worker_pod(*worker)
        assert error is None and chief["spec"]["serviceAccountName"] == expected
        assert fake.jobs[name]["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": STEP_POD, "uid": uid}
        ]


def test_transient_api_errors_are_retried_listing_pods_too() -> None:
    job = tfjob()
    with FakeKubernetes(["Created", "Running", "Succeeded"], log="saved\n") as fake:
        fake.fail("create", "trainjobs", times=2, answer=503)
        fake.fail("list", "pods", times=2, answer=500)
        lines, error = run(fake, job)
    assert error is None and not any(failure.times for failure in fake.failures)
    assert any(
        line.startswith(
            f"Kubernetes API could not list TrainJob team-a/{trainjob_name(job.metadata.name)}'s pods (HTTP 500"
        )
        for line in lines
    )


# ---------------------------------------------------------------- RBAC: the Role allows exactly the calls made


def test_the_trainjob_role_allows_every_call_the_backend_makes_and_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.test_manifests import role_gaps

    def adopt(fake: FakeKubernetes) -> None:
        fake.add_job(submitted(tfjob()), ["Created", "Running", "Succeeded"])
        run(fake, tfjob())

    def replace(fake: FakeKubernetes) -> None:
        fake.timelines[fake.add_job(submitted(tfjob()), ["Succeeded"])["metadata"]["uid"]].gets = 1
        run(fake, tfjob())

    scenarios: list[tuple[list[str], Callable[[FakeKubernetes], object]]] = [
        (["Created", "Running", "Succeeded"], lambda fake: run(fake, tfjob())),
        (["Created", "Running", "Failed"], lambda fake: run(fake, tfjob())),
        (["Created", "Succeeded"], adopt),
        (["Created", "Succeeded"], replace),
        (["Created", "Running"], lambda fake: run(fake, tfjob(deadline=1))),
    ]
    calls: set[tuple[str, str, str]] = set()
    for phases, scenario in scenarios:
        with FakeKubernetes(phases, log="a line\n", restarts=[2]) as fake:
            in_step_pod(fake, monkeypatch)
            scenario(fake)
            assert fake.violations == [], json.dumps(fake.violations)
        calls |= {(call.group, call.resource, call.verb) for call in fake.calls}
    assert role_gaps("bakeoff-trainjob-runner", calls) == {
        overlay: ([], []) for overlay in ("overlays/standalone", "overlays/multi-user")
    }


# ---------------------------------------------------------------- choosing it: `--param trainer=trainjob`


def test_the_trainer_choice_picks_the_backend_on_a_cluster_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.components.backends.kubernetes import KubernetesBackend
    from bakeoff.components.backends.local import LocalBackend
    from bakeoff.components.training.launch import make_backend

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert isinstance(make_backend("auto", 1, "trainjob"), LocalBackend), (
        "locally the TFJob runs as processes either way"
    )
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert isinstance(make_backend("auto", 1, "trainjob"), TrainJobBackend)
    assert isinstance(make_backend("auto", 1, "tfjob"), KubernetesBackend) and isinstance(
        make_backend("auto", 1), KubernetesBackend
    )
    with pytest.raises(BakeoffError) as raised:
        make_backend("auto", 1, "trainjobs")
    assert str(raised.value) == "unknown trainer 'trainjobs': use one of tfjob, trainjob (--param trainer=...)"


def test_trainer_is_a_pipeline_parameter_that_reaches_every_train_step() -> None:
    """The compiled pipeline: `trainer` defaults to tfjob, every train task gets it, and `--param` checks its value
    first."""
    from pathlib import Path

    import yaml

    from bakeoff.pipelines.kfp_client.parameters import parse_params, pipeline_parameters

    ir = next(yaml.safe_load_all((Path(__file__).resolve().parent.parent / "pipelines" / "bakeoff.yaml").read_text()))
    assert ir["root"]["inputDefinitions"]["parameters"]["trainer"] == {
        "defaultValue": "tfjob",
        "isOptional": True,
        "parameterType": "STRING",
    }
    tasks = [
        task
        for component in ir["components"].values()
        for task in (component.get("dag") or {}).get("tasks", {}).values()
        if re.fullmatch(r"comp-train(-\d+)?", task["componentRef"]["name"])
    ]
    assert tasks and all("trainer" in task["inputs"]["parameters"] for task in tasks)
    parameters = pipeline_parameters(ir)
    assert parse_params(["trainer=trainjob"], parameters) == {"trainer": "trainjob"}
    with pytest.raises(BakeoffError) as raised:
        parse_params(["trainer=TrainJob"], parameters)
    assert str(raised.value) == "unknown trainer 'TrainJob': use one of tfjob, trainjob (--param trainer=...)"


# ---------------------------------------------------------------- each Trainer release: who the workers run as


@pytest.mark.parametrize(
    ("trainer", "field"),
    [("v2.1.0", "podTemplateOverrides"), ("v2.2.0", "runtimePatches"), ("v2.3.0", "runtimePatches")],
)
def test_the_workers_run_as_the_steps_account_on_each_trainer_release(
    monkeypatch: pytest.MonkeyPatch, trainer: str, field: str
) -> None:
    """v2.2.0 removed podTemplateOverrides for runtimePatches (pkg/apis/trainer/v1alpha1/trainjob_types.go): the
    backend reads which one the served schema has, and the workers keep the step's account on each."""
    job = tfjob()
    name = trainjob_name(job.metadata.name)
    with FakeKubernetes(["Created", "Running", "Succeeded"], log="saved\n", trainer=trainer) as fake:
        in_step_pod(fake, monkeypatch)
        _, error = run(fake, job)
        worker = fake._worker(trainjob_pod_name(name, 0))
        assert worker is not None, "no chief pod"
        chief = fake._worker_pod(*worker)
    assert error is None and fake.violations == [], fake.violations
    assert chief["spec"]["serviceAccountName"] == "pipeline-runner"
    assert {"podTemplateOverrides", "runtimePatches"} & set(fake.jobs[name]["spec"]) == {field}
    assert fake.openapi_reads == 1


def test_a_field_the_served_trainer_does_not_know_is_an_error_not_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The create asks fieldValidation=Strict: a TrainJob built for v2.1 on a v2.3 cluster (a schema read gone stale)
    fails with the API server's reason, instead of its workers silently running as the namespace's default account."""
    from bakeoff.components.backends import trainjob

    monkeypatch.setattr(trainjob, "identity_field", lambda openapi: trainjob.OVERRIDES)
    job = tfjob()
    with FakeKubernetes(["Created", "Succeeded"], trainer="v2.3.0") as fake:
        in_step_pod(fake, monkeypatch)
        _, error = run(fake, job)
    assert error is not None and 'strict decoding error: unknown field "spec.podTemplateOverrides"' in str(error)
    assert fake.jobs == {}, "nothing created"


def test_a_trainjob_schema_with_neither_field_says_which_releases_work() -> None:
    from bakeoff.components.backends.trainjob import identity_field

    kind = [{"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"}]
    served = {"x-kubernetes-group-version-kind": kind, "properties": {"spec": {"properties": {"trainer": {}}}}}
    with pytest.raises(BakeoffError) as raised:
        identity_field({"components": {"schemas": {"org.kubeflow.trainer.v1alpha1.TrainJob": served}}})
    assert "install Kubeflow Trainer v2.1 to v2.3, or run with `--param trainer=tfjob`" in str(raised.value)
    for release, field in (("v2.1.0", "podTemplateOverrides"), ("v2.3.0", "runtimePatches")):
        assert identity_field(trainjob_openapi(release)) == field
