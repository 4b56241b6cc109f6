"""What ML Metadata holds of one KFP run, as JSON, read with ml-metadata's own gRPC client.

Run in tests/kfp/mlmd.py's virtual environment (ml-metadata pins protobuf < 5, kfp ≥ 6):
`python mlmd_runs.py HOST PORT RUN_ID` prints `{"executions": [...], "artifacts": [...]}` for the run's
`system.PipelineRun` context (named the run's ID by the root driver: backend/src/v2/metadata/client.go), each
execution with its type, state and custom properties, each artifact with its type and URI. The executions whose
parent is the run's root DAG are listed apart, found with the filter query the driver and launcher use
(`GetExecutionsInDAG`: `custom_properties.parent_dag_id.int_value = N`), so a store that cannot answer it fails here.
"""

import json
import sys

from google.protobuf.json_format import MessageToDict  # type: ignore[import-not-found,unused-ignore]
from ml_metadata.metadata_store import metadata_store  # type: ignore[import-not-found,unused-ignore]
from ml_metadata.proto import metadata_store_pb2 as pb  # type: ignore[import-not-found,unused-ignore]

ROOT_DAG = "system.DAGExecution"


def plain(value: pb.Value) -> object:
    """A custom property's value as JSON has it."""
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        return MessageToDict(value.struct_value)
    return getattr(value, kind) if kind else None


def main() -> None:
    host, port, run_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host=host, port=port))
    run = store.get_context_by_type_and_name("system.PipelineRun", run_id)
    if run is None:
        print(json.dumps({"executions": [], "artifacts": [], "root_children": []}))
        return
    types = {kind.id: kind.name for kind in store.get_execution_types()}
    artifact_types = {kind.id: kind.name for kind in store.get_artifact_types()}
    executions = store.get_executions_by_context(run.id)
    children: list[pb.Execution] = []
    roots = [execution.id for execution in executions if types[execution.type_id] == ROOT_DAG]
    if roots:  # the first DAG execution of a run is its root's
        query = f"custom_properties.parent_dag_id.int_value = {min(roots)}"
        children = store.get_executions_by_context(run.id, list_options=metadata_store.ListOptions(filter_query=query))
    report = {
        "executions": [
            {
                "id": execution.id,
                "type": types[execution.type_id],
                "state": pb.Execution.State.Name(execution.last_known_state),
                "properties": {key: plain(value) for key, value in execution.custom_properties.items()},
            }
            for execution in executions
        ],
        "artifacts": [
            {"type": artifact_types[artifact.type_id], "uri": artifact.uri}
            for artifact in store.get_artifacts_by_context(run.id)
        ],
        "root_children": sorted(execution.id for execution in children),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
