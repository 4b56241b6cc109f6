"""Both stores, one suite: what every layer above relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import FolderStore, S3Store, Store, open_store, s3

pytestmark = pytest.mark.unit


def test_round_trip_of_bytes_and_listing(store: Store) -> None:
    store.put_bytes("a/b/one.txt", b"1")
    store.put_bytes("a/two.bin", bytes(range(256)))
    store.put_bytes("other/three.txt", b"3")
    assert store.get_bytes("a/two.bin") == bytes(range(256))
    assert store.list("a") == ["a/b/one.txt", "a/two.bin"]
    assert store.exists("a/b/one.txt")
    assert not store.exists("a/b/missing.txt")


# Keys chosen so that a directory walk and a string sort could disagree
# ("b.txt" sorts before "b/"), and so that "a" is a string prefix of "ab/".
LISTED_KEYS = ["a/b.txt", "a/b/one.txt", "a/two.bin", "ab/three.txt", "top.txt"]
# Dot names are a store's bookkeeping (staging folders, S3 claims): never listed.
HIDDEN_KEYS = [".claims/a/owner", "a/.staging/b", "a/b/.partial"]


@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b", "a/b/", "missing", "missing/"])
def test_listing_is_the_same_on_every_store(store: Store, prefix: str) -> None:
    """Guards list(prefix) giving the same keys, in the same order, on the folder and the S3 store."""
    for key in LISTED_KEYS + HIDDEN_KEYS:
        store.put_bytes(key, key.encode())
    # One spelled-out answer for both parametrizations: the stores agree
    # with each other, and cannot pass by sharing one mistake.
    expected = {
        "": LISTED_KEYS,
        "a": ["a/b.txt", "a/b/one.txt", "a/two.bin"],
        "a/b": ["a/b/one.txt"],
        "missing": [],
    }[prefix.rstrip("/")]
    assert store.list(prefix) == expected


def test_missing_key_is_a_clear_error(store: Store) -> None:
    with pytest.raises(BakeoffError, match=r"does not exist: check the store URI"):
        store.get_bytes("nope/never.txt")


def test_directories_go_up_and_come_back(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "variables").mkdir(parents=True)
    (source / "saved_model.pb").write_bytes(b"pb")
    (source / "variables" / "variables.index").write_bytes(b"idx")
    store.put_dir(source, "runs/r1/model")
    back = store.get_dir("runs/r1/model", tmp_path / "back")
    assert (back / "saved_model.pb").read_bytes() == b"pb"
    assert (back / "variables" / "variables.index").read_bytes() == b"idx"


def test_publish_refuses_a_taken_prefix(store: Store, tmp_path: Path) -> None:
    assert_publish_refuses_a_taken_prefix(store, tmp_path)


def test_s3_publish_without_create_only_refuses_a_taken_prefix(
    s3_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on a server that ignores If-None-Match (MinIO 2019): claims by listing refuse a taken prefix too."""
    monkeypatch.setattr(s3, "CREATE_ONLY", INERT_CREATE_ONLY)
    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    assert_publish_refuses_a_taken_prefix(store, tmp_path)
    assert isinstance(store, S3Store)
    assert store.honours_create_only() is False


# What a server that ignores If-None-Match makes of a create-only put: a plain put with some user metadata.
INERT_CREATE_ONLY = {"X-Amz-Meta-Bakeoff-Create-Only": "*"}


def test_s3_store_finds_whether_the_server_honours_create_only(
    s3_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the run-time probe: SeaweedFS refuses a second create-only put; a server that overwrites is told apart."""
    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    assert isinstance(store, S3Store)
    assert store.honours_create_only() is True
    monkeypatch.setattr(s3, "CREATE_ONLY", INERT_CREATE_ONLY)
    ignoring = open_store(f"s3://bakeoff/{tmp_path.name}")
    assert isinstance(ignoring, S3Store)
    assert ignoring.honours_create_only() is False
    assert ignoring._list_all("") == []  # the probes cleaned up after themselves


def assert_publish_refuses_a_taken_prefix(store: Store, tmp_path: Path) -> None:
    version = tmp_path / "v"
    version.mkdir()
    (version / "saved_model.pb").write_bytes(b"first")
    (version / "manifest.json").write_text("{}")
    store.publish(version, "models/m/1", "manifest.json")
    (version / "saved_model.pb").write_bytes(b"second")
    with pytest.raises(FileExistsError):
        store.publish(version, "models/m/1", "manifest.json")
    assert store.get_bytes("models/m/1/saved_model.pb") == b"first"


def test_uri_names_the_object(store: Store) -> None:
    assert store.uri_for("models/m/1") == f"{store.uri}/models/m/1"
    assert open_store(store.uri).list("") == store.list("")


def test_unwritable_folder_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(BakeoffError, match=r"is not writable .*: choose another --store$"):
        open_store(f"file://{blocker}/store").check_writable()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("ftp://host/x", r"unknown scheme 'ftp': use file:///path/to/dir or s3://bucket/prefix"),
        ("file://", r"names no folder"),
    ],
)
def test_bad_store_uris(uri: str, message: str) -> None:
    with pytest.raises(BakeoffError, match=message):
        open_store(uri)


def test_s3_needs_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BAKEOFF_S3_ENDPOINT", raising=False)
    with pytest.raises(
        BakeoffError, match=r"needs an S3 endpoint: pass --s3-endpoint HOST:PORT or set BAKEOFF_S3_ENDPOINT"
    ):
        open_store("s3://bucket/x")


def test_s3_needs_credentials(monkeypatch: pytest.MonkeyPatch, s3_endpoint: str) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(BakeoffError, match=r"S3 credentials missing: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        open_store("s3://bakeoff/x", s3_endpoint, True)


def test_s3_endpoint_down_is_reported(s3_env: str) -> None:
    from tests.conftest import free_port

    with pytest.raises(BakeoffError, match=r"S3 endpoint '127.0.0.1:\d+' is unreachable .*check --s3-endpoint"):
        open_store("s3://bakeoff/x", f"127.0.0.1:{free_port()}", True)


@pytest.mark.parametrize(
    ("variable", "code"),
    [("AWS_SECRET_ACCESS_KEY", "SignatureDoesNotMatch"), ("AWS_ACCESS_KEY_ID", "InvalidAccessKeyId")],
)
def test_s3_wrong_keys_are_reported(s3_env: str, monkeypatch: pytest.MonkeyPatch, variable: str, code: str) -> None:
    monkeypatch.setenv(variable, "not-the-key")
    with pytest.raises(
        BakeoffError, match=rf"refused the credentials \({code}\): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY$"
    ):
        open_store("s3://bakeoff/x")


def test_s3_missing_bucket_is_reported(s3_env: str) -> None:
    with pytest.raises(BakeoffError, match=r"bucket 'no-such-bucket' does not exist"):
        open_store("s3://no-such-bucket/x")


def test_s3_store_is_s3(s3_env: str) -> None:
    assert isinstance(open_store("s3://bakeoff/p"), S3Store)


def test_s3_store_never_asks_the_bucket_location(
    s3_env: str, no_location_keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Multi-user Kubeflow's profile keys may not call GetBucketLocation: the store states its region instead."""
    for key, value in no_location_keys.items():
        monkeypatch.setenv(key, value)
    store = open_store("s3://bakeoff/no-location")
    store.put_bytes("a.txt", b"x")
    assert store.get_bytes("a.txt") == b"x" and store.list("") == ["a.txt"]


def test_delete_removes_one_object_and_a_missing_one_is_no_error(store: Store) -> None:
    store.put_bytes("a/one", b"1")
    store.put_bytes("a/two", b"2")
    store.delete("a/one")
    store.delete("a/never-written")
    assert store.list("a") == ["a/two"] and not store.exists("a/one")
    store.delete("a/two")
    assert store.list("") == [] and store.list("a") == []
    if isinstance(store, FolderStore):
        assert not (store.root / "a").exists(), "an emptied folder goes with its last object"


def test_the_pinned_minio_still_has_no_public_create_only_put() -> None:
    """Why S3Store._create calls minio's private _put_object: when an upgrade fails this, use the public path."""
    import inspect

    from minio import Minio
    from minio.helpers import genheaders

    assert "headers" not in inspect.signature(Minio.put_object).parameters
    sent = genheaders(dict(s3.CREATE_ONLY), None, None, None, False)  # what put_object makes of it as metadata
    assert "If-None-Match" not in sent and sent["X-Amz-Meta-If-None-Match"] == ["*"]
    assert "headers" in inspect.signature(Minio._put_object).parameters
