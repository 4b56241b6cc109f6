"""ML Metadata as the KFP 2.15/2.16 driver and launcher reach it: the real store, over gRPC."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kfp import mlmd

pytestmark = pytest.mark.kfp

DRIVER_PORT = 8080  # backend/src/v2/metadata/env.go: the port every driver dials
ADDRESS = "127.0.80.80"  # a loopback address no other server of the tests binds

# ml-metadata's own gRPC client (MetadataStoreClientConfig), which speaks the protocol KFP's Go client does: the
# calls the driver makes for a run (backend/src/v2/metadata/client.go), a context, an execution, an artifact.
CLIENT = textwrap.dedent(
    """
    import sys
    from ml_metadata import errors
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as pb

    store = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host=sys.argv[1], port=int(sys.argv[2])))
    context_type = store.put_context_type(pb.ContextType(name="system.PipelineRun"))
    [run] = store.put_contexts([pb.Context(type_id=context_type, name="run-1")])
    execution_type = store.put_execution_type(pb.ExecutionType(name="system.ContainerExecution"))
    artifact_type = store.put_artifact_type(pb.ArtifactType(name="system.Dataset"))
    artifact = pb.Artifact(type_id=artifact_type, uri="minio://mlpipeline/v2/artifacts/run-1/ingest/dataset")
    event = pb.Event(type=pb.Event.OUTPUT)
    execution = pb.Execution(type_id=execution_type, last_known_state=pb.Execution.COMPLETE)
    _, [artifact_id], _ = store.put_execution(execution, [(artifact, event)], [store.get_contexts_by_id([run])[0]])
    print(store.get_artifacts_by_context(run)[0].uri)
    print(store.get_artifacts_by_id([artifact_id])[0].uri)
    try:
        store.get_context_by_type_and_name("system.PipelineRun", "run-1")
        store.get_artifact_type("no.SuchType")
    except errors.NotFoundError:
        print("not found")
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mlmd.Mlmd]:
    try:
        # An address of its own, as the pods' hosts files give it (tests/kfp/mlmd_server.py), on the driver's port.
        running = mlmd.start(tmp_path_factory.mktemp("mlmd"), DRIVER_PORT, host=ADDRESS)
    except mlmd.MlmdError as error:
        pytest.fail(str(error), pytrace=False)
    yield running
    running.stop()


def test_the_store_keeps_what_the_driver_puts_and_answers_its_errors_with_their_status(
    server: mlmd.Mlmd, tmp_path: Path
) -> None:
    python = mlmd.environment()
    command = [str(python), "-c", CLIENT, server.host, str(server.port)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    uri = "minio://mlpipeline/v2/artifacts/run-1/ingest/dataset"
    assert done.stdout.splitlines() == [uri, uri, "not found"]
