"""A run executed end to end by the real backend: KFP's driver and launcher, Argo's argoexec (emissary), pods run by
the process kubelet, artifacts in the lane's SeaweedFS, executions in ML Metadata, the state through the KFP API.

A two-task pipeline, compiled here with the kfp SDK as a user compiles one: `producer` writes a Dataset and
returns its length, `consumer` reads both. Its steps are lightweight components on the image the kubelet runs in
the project's environment, made by bakeoff's own factory (components/steps/factory.py: kfp is there, nothing is
installed at run time). These functions' source is what the components run: no `from __future__ import annotations`
here, as the SDK reads their annotations as types.
"""

import json
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from kfp import client, dsl

from bakeoff.components import defaults
from bakeoff.components.steps.factory import as_component
from bakeoff.components.storage import open_store, registry
from tests.cluster.controlplane import TEST_IMAGE
from tests.kfp import backend
from tests.kfp.test_servers import TWO_MLPS, bakeoff

pytestmark = pytest.mark.kfp

RUN_TIMEOUT = 900  # seconds for a run of 5 pods on the shared 2-core machine; never asserted, only a bound
TEXT = "bytes the producer wrote"
LAUNCHER_INIT = "kfp-launcher"  # the init container of every executor pod (argocompiler/container.go)


def producer(text: str, exit_code: int, dataset: dsl.Output[dsl.Dataset]) -> int:
    if exit_code:
        raise SystemExit(exit_code)
    with open(dataset.path, "w") as file:
        file.write(text)
    return len(text)


def consumer(dataset: dsl.Input[dsl.Dataset], size: int) -> str:
    with open(dataset.path) as file:
        return f"{file.read()}:{size}"


@dsl.pipeline(name="execution-check")
def two_steps(text: str, exit_code: int = 0) -> None:
    made = as_component(producer, TEST_IMAGE)(text=text, exit_code=exit_code)
    as_component(consumer, TEST_IMAGE)(dataset=made.outputs["dataset"], size=made.outputs["Output"])


def run(kfp: backend.Backend, name: str, **arguments: Any) -> dict[str, Any]:
    """Submits the pipeline through the KFP API as a user does and waits for the run to end: the run as the API
    answers it."""
    api = client.Client(host=kfp.host)
    submitted = api.create_run_from_pipeline_func(two_steps, arguments=arguments, run_name=name)
    return api.wait_for_run_completion(submitted.run_id, timeout=RUN_TIMEOUT).to_dict()


def objects(kfp: backend.Backend, kind: str, selector: str) -> list[dict[str, Any]]:
    listed = kfp.plane.kubectl("get", kind, "-n", backend.NAMESPACE, "-l", selector, "-o", "json")
    return json.loads(listed.stdout)["items"]


def workflow(kfp: backend.Backend, run_id: str) -> dict[str, Any]:
    [found] = objects(kfp, "workflows.argoproj.io", f"pipeline/runid={run_id}")
    return found


def pods(kfp: backend.Backend, workflow_name: str) -> list[dict[str, Any]]:
    return objects(kfp, "pods", f"workflows.argoproj.io/workflow={workflow_name}")


def warnings(kfp: backend.Backend) -> str:
    """The namespace's Warning events, one a line: why a pod of a run failed, where an assertion needs it."""
    listed = kfp.plane.kubectl("get", "events", "-n", backend.NAMESPACE, "--field-selector=type=Warning", "-o", "json")
    events = json.loads(listed.stdout)["items"]
    return "\n".join(f"{e['involvedObject'].get('name')}: {e['reason']}: {e.get('message', '')}" for e in events)


def executors(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods that ran a task's command (the others are drivers)."""
    return [pod for pod in found if any(c["name"] == LAUNCHER_INIT for c in pod["spec"].get("initContainers", []))]


def containers(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The run's container executions in ML Metadata by task name."""
    found = [item for item in record["executions"] if item["type"] == "system.ContainerExecution"]
    return {item["properties"]["task_name"]: item for item in found}


def store(kfp: backend.Backend) -> Any:
    keys = kfp.store.keys
    return boto3.client(
        "s3",
        endpoint_url=f"http://{kfp.store.endpoint}",
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


@pytest.fixture(scope="module")
def succeeded(executing: backend.Backend) -> Iterator[dict[str, Any]]:
    yield run(executing, "execution-check", text=TEXT)


def test_a_run_executes_under_the_real_driver_and_launcher(
    executing: backend.Backend, succeeded: dict[str, Any]
) -> None:
    assert succeeded["state"] == "SUCCEEDED", warnings(executing)
    run_id = succeeded["run_id"]
    found = workflow(executing, run_id)
    assert found["status"]["phase"] == "Succeeded"
    name = found["metadata"]["name"]

    # Argo's pod shape around KFP's launcher (workflowpod.go; argocompiler/container.go).
    ran = pods(executing, name)
    tasks = executors(ran)
    assert len(tasks) == 2, [pod["metadata"]["name"] for pod in ran]
    for pod in tasks:
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["init", LAUNCHER_INIT]
        assert [c["name"] for c in pod["spec"]["containers"]] == ["wait", "main"]
        [main] = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
        command = main["command"]
        assert command[:2] == ["/var/run/argo/argoexec", "emissary"], command
        assert command[command.index("--") + 1] == "/kfp-launcher/launch", command
        assert pod["status"]["phase"] == "Succeeded"
    # Each driver's outputs reached the Workflow: its `wait` reported them as a WorkflowTaskResult, which the
    # controller merged into the node (executor/taskresult.go, controller/taskresult.go) and deleted once done.
    nodes = [node for node in found["status"]["nodes"].values() if node["type"] == "Pod"]
    assert {node["phase"] for node in nodes} == {"Succeeded"} and len(nodes) == len(ran)
    drivers = {node["displayName"]: node for node in nodes if node["templateName"].endswith("-driver")}
    assert set(drivers) == {"root-driver", "producer-driver", "consumer-driver"}
    for node in drivers.values():
        outputs = {parameter["name"] for parameter in node["outputs"]["parameters"]}
        assert {"execution-id", "cached-decision"} & outputs, node

    # What the driver and launcher recorded in ML Metadata.
    assert executing.metadata is not None
    record = executing.metadata.run(run_id)
    steps = containers(record)
    assert {task: step["state"] for task, step in steps.items()} == {"producer": "COMPLETE", "consumer": "COMPLETE"}
    assert steps["producer"]["properties"]["outputs"] == {"Output": len(TEXT)}
    assert steps["consumer"]["properties"]["outputs"] == {"Output": f"{TEXT}:{len(TEXT)}"}
    assert sorted(record["root_children"]) == sorted(step["id"] for step in steps.values())

    # The Dataset went through the store at its minio:// URI, the consumer's main log archived beside it.
    [dataset] = [item["uri"] for item in record["artifacts"] if item["type"] == "system.Dataset"]
    assert dataset.startswith(f"{backend.PIPELINE_ROOT}/"), dataset
    bucket, _, key = dataset.removeprefix("minio://").partition("/")
    s3 = store(executing)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == TEXT.encode()
    archived = s3.list_objects_v2(Bucket=backend.BUCKET, Prefix=f"private-artifacts/{backend.NAMESPACE}/{name}/")
    logs = [item["Key"] for item in archived.get("Contents", []) if item["Key"].endswith("/main.log")]
    assert len(logs) == len(ran), logs


def test_a_failing_task_fails_the_run(executing: backend.Backend) -> None:
    failed = run(executing, "execution-check-fails", text=TEXT, exit_code=3)
    assert failed["state"] == "FAILED"
    found = workflow(executing, failed["run_id"])
    assert found["status"]["phase"] == "Failed"
    assert len(executors(pods(executing, found["metadata"]["name"]))) == 1  # the consumer never ran
    assert executing.metadata is not None
    steps = containers(executing.metadata.run(failed["run_id"]))
    assert {task: step["state"] for task, step in steps.items()} == {"producer": "FAILED"}


def test_a_second_run_reuses_the_cache(executing: backend.Backend, succeeded: dict[str, Any]) -> None:
    again = run(executing, "execution-check-again", text=TEXT)
    assert again["state"] == "SUCCEEDED", warnings(executing)
    name = workflow(executing, again["run_id"])["metadata"]["name"]
    assert executors(pods(executing, name)) == []  # the drivers found both tasks done (ListTasksV1 through 8887)
    assert executing.metadata is not None
    steps = containers(executing.metadata.run(again["run_id"]))
    assert {task: step["state"] for task, step in steps.items()} == {"producer": "CACHED", "consumer": "CACHED"}


def test_bakeoff_submit_wait_runs_the_whole_pipeline_and_publishes_a_model(
    executing: backend.Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bakeoff's own pipeline, as a user submits it to an install: check, ingest, each rung's TFJobs on the real
    Training Operator, halve, select; the winner published in the store's registry. A small bake-off: 2 variants,
    2 rungs, 2,048 examples of the offline Fashion-MNIST (`make system`)."""
    variants = TWO_MLPS
    done = bakeoff(
        executing,
        "submit",
        "--wait",
        "--name",
        "bakeoff-end-to-end",
        "--s3-endpoint",  # the lane's SeaweedFS, where an install's steps reach seaweedfs.kubeflow:9000
        executing.store.endpoint,
        *("--param", "max_train_examples=2048", "--param", "min_epochs=1", "--param", "max_epochs=2"),
        *("--param", f"variants={json.dumps(variants)}"),
    )
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{warnings(executing)}"
    run_id = re.match(r"submitted run (\S+) ", done.stdout)[1]  # type: ignore[index]
    assert f"run {run_id} succeeded" in done.stdout
    tfjobs = objects(executing, "tfjobs.kubeflow.org", "app.kubernetes.io/part-of=bakeoff")
    assert {job["metadata"]["labels"]["bakeoff/variant"] for job in tfjobs} == {"tiny", "small"}
    assert {job["status"]["conditions"][-1]["type"] for job in tfjobs} == {"Succeeded"}
    for name, value in executing.store.keys.items():
        monkeypatch.setenv(name, value)
    store = open_store(
        defaults.CLUSTER_STORE.format(namespace=backend.NAMESPACE), executing.store.endpoint, s3_insecure=True
    )
    [published] = registry.list_versions(store, defaults.MODEL_NAME)
    assert published.run_id == run_id
    assert published.variant in {variant["name"] for variant in variants}
