"""The S3 store with the keys multi-user Kubeflow Pipelines gives a profile, on SeaweedFS set up as KFP sets it up."""

from __future__ import annotations

from pathlib import Path

import minio
import minio.error
import pytest

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import S3Store, open_store
from tests.conftest import KfpStore
from tests.store_policies import PROFILE_SETUPS, ProfileSetup

pytestmark = pytest.mark.s3

SETUPS = {setup.name: setup for setup in PROFILE_SETUPS}


@pytest.fixture(params=list(SETUPS))
def setup(request: pytest.FixtureRequest) -> ProfileSetup:
    return SETUPS[request.param]


def use_profile(kfp_store: KfpStore, setup: ProfileSetup, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment a step of the profile's runs has: the endpoint, plain HTTP and the profile's keys."""
    keys = kfp_store.profile_keys[setup.name]
    for key, value in keys.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BAKEOFF_S3_ENDPOINT", kfp_store.server.endpoint)
    monkeypatch.setenv("BAKEOFF_S3_INSECURE", "1")
    return keys


def profile_store(setup: ProfileSetup, name: str, namespace: str = "") -> S3Store:
    """The store a run of the profile opens: the cluster default's shape, s3://<bucket>/private/<namespace>/bakeoff."""
    store = open_store(f"s3://{setup.bucket}/private/{namespace or setup.namespace}/bakeoff/{name}")
    assert isinstance(store, S3Store)
    return store


def test_every_store_call_works_with_a_profile_key(
    kfp_store: KfpStore, setup: ProfileSetup, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Guards each call bakeoff makes on a store, as each KFP release's profile key, below the profile's prefix."""
    use_profile(kfp_store, setup, monkeypatch)
    store = profile_store(setup, tmp_path.name)  # the open check
    store.put_bytes("runs/r1/v1/metrics.json", b"{}")
    assert store.get_bytes("runs/r1/v1/metrics.json") == b"{}"
    assert store.exists("runs/r1/v1/metrics.json") and not store.exists("runs/r1/v1/missing.json")
    assert store.list("runs/r1") == ["runs/r1/v1/metrics.json"]
    assert store.honours_create_only() is True  # two create-only puts of one key: the second refused
    version = tmp_path / "version"
    version.mkdir()
    (version / "saved_model.pb").write_bytes(b"pb")
    (version / "manifest.json").write_text("{}")
    store.publish(version, "models/m/1", "manifest.json")
    with pytest.raises(FileExistsError):
        store.publish(version, "models/m/1", "manifest.json")
    assert store.list("models/m") == ["models/m/1/manifest.json", "models/m/1/saved_model.pb"]
    store.delete("runs/r1/v1/metrics.json")
    assert store.list("runs") == [] and not store.exists("runs/r1/v1/metrics.json")


def test_the_open_check_asks_nothing_of_the_bucket(
    kfp_store: KfpStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Guards the open check against HeadBucket, which KFP 2.15/2.16's profile keys may not call (nor 2.17's, before
    its bucket policy)."""
    setup = SETUPS["kfp-2.16-profile"]
    keys = use_profile(kfp_store, setup, monkeypatch)
    client = minio.Minio(
        kfp_store.server.endpoint,
        access_key=keys["AWS_ACCESS_KEY_ID"],
        secret_key=keys["AWS_SECRET_ACCESS_KEY"],
        secure=False,
        region="us-east-1",
    )
    with pytest.raises(minio.error.S3Error, match="AccessDenied"):
        client.bucket_exists(setup.bucket)
    store = profile_store(setup, tmp_path.name)
    store.put_bytes("a.txt", b"x")
    assert store.list("") == ["a.txt"]


def test_another_profiles_prefix_is_refused_in_one_line(
    kfp_store: KfpStore, setup: ProfileSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policies are live (a profile's key reaches no other profile's store), and the open check says so in one
    line."""
    use_profile(kfp_store, setup, monkeypatch)
    uri = f"s3://{setup.bucket}/private/someone-else/bakeoff"
    with pytest.raises(
        BakeoffError,
        match=rf"refused these keys a listing of '{uri}' \(AccessDenied\): check the bucket and prefix"
        r" of the store URI \(a Kubeflow profile's keys may use s3://mlpipeline/private/\{namespace\}/bakeoff\)",
    ):
        open_store(uri)


def test_a_profile_key_reads_the_dataset_where_a_real_runs_ingest_step_leaves_it(
    kfp_store: KfpStore, setup: ProfileSetup, monkeypatch: pytest.MonkeyPatch, small_dataset: Path
) -> None:
    """Guards the train step's first read (the dataset's metadata, launch.train_variant) under each release's profile
    policy, at private-artifacts/<namespace>/v2/artifacts/<pipeline>/<run>/<task>/<salt>/<output> (KFP's layout)."""
    from bakeoff.components.data import artifact
    from tests.cluster.profile import ingested_data_uri

    use_profile(kfp_store, setup, monkeypatch)
    data = open_store(ingested_data_uri(setup.bucket, setup.namespace))
    data.put_dir(small_dataset, "")
    assert artifact.read_metadata(open_store(data.uri)).shards >= 1
