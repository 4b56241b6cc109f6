"""Training one variant: its TFJob built, executed by a backend, its results read back from the store."""
import json
import os
from pathlib import Path

from components import dataset
from components.errors import BakeoffError
from components.image import BASE_IMAGE
from components.local_backend import LocalBackend
from components.store import open_store
from components.tfjob import build_tfjob, job_name, worker_args
from components.variants import from_dict

# What a replica needs from the environment it was started in (never credentials:
# on a cluster those come from the store secret, locally from the user's shell).
PASSED_ENV = ("BAKEOFF_S3_ENDPOINT", "BAKEOFF_S3_INSECURE", "TF_CPP_MIN_LOG_LEVEL")


def run_prefix(run_id: str, variant: str) -> str:
    return f"runs/{run_id}/{variant}"


def train_variant(
    variant_spec: dict,
    data_dir: str,
    store_uri: str,
    run_id: str,
    max_train_examples: int,
    concurrent_jobs: int,
    timeout_seconds: int,
) -> dict:
    """Trains one variant as a TFJob and returns its candidate record for selection."""
    variant = from_dict(variant_spec)
    shards = json.loads((Path(data_dir) / dataset.METADATA_FILE).read_text())["shards"]
    if variant.workers > shards:
        raise BakeoffError(
            f"variant {variant.name!r}: workers={variant.workers} exceeds the dataset's {shards} shards:"
            " lower workers or ingest with more shards"
        )
    store = open_store(store_uri)
    prefix = run_prefix(run_id, variant.name)
    job = build_tfjob(
        variant,
        name=job_name(run_id, variant.name),
        image=BASE_IMAGE,
        args=worker_args(variant, data_dir, store.uri, prefix, max_train_examples),
        env={key: os.environ[key] for key in PASSED_ENV if key in os.environ},
        active_deadline_seconds=timeout_seconds,
    )
    LocalBackend(concurrent_jobs=concurrent_jobs).run(job)
    metrics = json.loads(store.get_bytes(f"{prefix}/metrics.json"))
    return {"variant": variant.name, "spec": variant.to_dict(), "uri": store.uri_for(f"{prefix}/model"), "prefix": prefix, "metrics": metrics}
