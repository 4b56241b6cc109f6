"""ML Metadata's gRPC service over the real `ml-metadata` store from PyPI, for the KFP 2.15/2.16 driver and launcher.

KFP's manifests run `ml_metadata_store_server` (a Bazel target no wheel ships); the wheel has the same store as a
library. Every RPC of `ml_metadata.MetadataStoreService` is one call of the library's serialized API, bytes in,
bytes out (`metadata_store_serialized.<Rpc>(store, request) -> (response, message, code)`, which the library's own
`MetadataStore._pywrap_cc_call` uses), its status code passed through as the gRPC status: nothing is decoded here.
One lock around the store, as the server's single connection. SQLite in a file, migrated on start.

Run by tests/kfp/mlmd.py in a virtual environment of its own (ml-metadata pins protobuf < 5, kfp ≥ 6):
`python mlmd_server.py HOST PORT DATABASE`; it prints `serving` once it listens. The driver dials port 8080 of
`metadata-grpc-service.<namespace>.svc.<domain>` (`backend/src/v2/metadata/env.go`): a loopback address of its
own (127.x.y.z) and port 8080, which the pods' hosts files name so, leaves 127.0.0.1:8080 alone.
"""

import sys
import threading
from concurrent import futures

import grpc  # type: ignore[import-not-found,unused-ignore]
from ml_metadata.metadata_store.pywrap.metadata_store_extension import (  # type: ignore[import-not-found,unused-ignore]
    metadata_store as serialized,
)
from ml_metadata.proto import metadata_store_pb2  # type: ignore[import-not-found,unused-ignore]

SERVICE = "ml_metadata.MetadataStoreService"
STATUS = {code.value[0]: code for code in grpc.StatusCode}  # absl's status codes are gRPC's


class Store(grpc.GenericRpcHandler):  # type: ignore[misc,unused-ignore]
    """Answers `/ml_metadata.MetadataStoreService/<Rpc>` with the library's function of that name."""

    def __init__(self, database: str) -> None:
        config = metadata_store_pb2.ConnectionConfig()
        config.sqlite.filename_uri = database
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        options = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=True)
        self.store = serialized.CreateMetadataStore(config.SerializeToString(), options.SerializeToString())
        self.lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        service, _, method = details.method.lstrip("/").partition("/")
        call = getattr(serialized, method, None) if service == SERVICE else None
        if call is None:
            return None  # gRPC answers UNIMPLEMENTED

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self.lock:
                response, message, code = call(self.store, request)
            if code != 0:
                context.abort(STATUS.get(code, grpc.StatusCode.UNKNOWN), message.decode("utf-8", "replace"))
            return response

        return grpc.unary_unary_rpc_method_handler(unary)  # no (de)serializers: the bytes as they came


def main() -> None:
    host, port, database = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((Store(database),))
    server.add_insecure_port(f"{host}:{port}")
    server.start()
    print("serving", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
