"""Publishing: next integer version, TF-Serving layout, all or nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import FolderStore, S3Store, Store, registry, s3
from tests.samples import manifest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]

# A separate process, so that it can really die: publishes once, after "go" on stdin, and
# prints the version it got and whether its store took claims by create-only puts.
PUBLISHER = """
import json, os, sys
from pathlib import Path
from bakeoff.components.storage import open_store, registry, s3
from bakeoff.components.storage.records import Manifest

store_uri, name, model, manifest, priority, create_only = sys.argv[1:7]
if priority == "low":
    os.nice(19)  # leaves the CPU to the test that watches (and kills) this publisher
if create_only == "ignored":
    # As MinIO RELEASE.2019-08-14 (KFP 2.14/2.15) answers: the header reaches the server as
    # plain user metadata, and a second create-only put overwrites.
    s3.CREATE_ONLY = {"X-Amz-Meta-Bakeoff-Create-Only": "*"}
store = open_store(store_uri)
print("ready", flush=True)
sys.stdin.readline()
version = registry.publish(store, name, Path(model), Manifest.from_json(manifest, "argv"))
print(json.dumps({"version": version, "create_only": getattr(store, "_create_only", None)}), flush=True)
"""
# The ways a store keeps concurrent publishers apart: a folder's rename, S3's create-only put, and
# claim-and-list on an S3 server that ignores If-None-Match.
SCHEMES = [
    "folder",
    pytest.param("s3", marks=pytest.mark.s3),
    pytest.param("s3-without-create-only", marks=pytest.mark.s3),
]
PUBLISHERS = 20  # at once, behind one barrier


def model_dir(tmp_path: Path, content: bytes = b"pb") -> Path:
    path = tmp_path / "model"
    (path / "variables").mkdir(parents=True, exist_ok=True)
    (path / "saved_model.pb").write_bytes(content)
    (path / "variables" / "variables.index").write_bytes(b"index")
    return path


def test_versions_count_up_in_serving_layout(store: Store, tmp_path: Path) -> None:
    assert registry.publish(store, "fm", model_dir(tmp_path), manifest(run_id="r1")) == 1
    assert registry.publish(store, "fm", model_dir(tmp_path, b"v2"), manifest(run_id="r2")) == 2
    assert store.get_bytes("models/fm/2/saved_model.pb") == b"v2"
    assert store.exists("models/fm/1/variables/variables.index")
    assert [(m.version, m.run_id) for m in registry.list_versions(store, "fm")] == [(1, "r1"), (2, "r2")]


def test_the_published_manifest_is_the_record_given_numbered_and_read_back_strictly(
    store: Store, tmp_path: Path
) -> None:
    """What publish writes is the manifest record with its version; one the registry cannot read is one line naming
    it."""
    given = manifest(run_id="r1")
    registry.publish(store, "fm", model_dir(tmp_path), given)
    assert store.get_bytes("models/fm/1/manifest.json").decode() == dataclasses.replace(given, version=1).to_json()
    (listed,) = registry.list_versions(store, "fm")
    assert listed == dataclasses.replace(given, version=1)
    written = json.loads(store.get_bytes("models/fm/1/manifest.json"))
    store.put_bytes("models/fm/1/manifest.json", json.dumps({**written, "stage": "prod"}).encode())
    with pytest.raises(BakeoffError) as refused:
        registry.list_versions(store, "fm")
    assert str(refused.value).startswith(
        f"{store.uri_for('models/fm/1/manifest.json')}: is a Manifest record that has unknown 'stage': "
    )


def test_a_half_written_version_is_never_listed_nor_reused(store: Store, tmp_path: Path) -> None:
    registry.publish(store, "fm", model_dir(tmp_path), manifest(run_id="r1"))
    store.put_bytes("models/fm/2/saved_model.pb", b"crashed before its manifest")
    assert [m.version for m in registry.list_versions(store, "fm")] == [1]
    assert registry.publish(store, "fm", model_dir(tmp_path), manifest(run_id="r3")) == 3


def start_publisher(
    store: Store, model: Path, run_id: str, tmp: Path, priority: str = "normal", create_only: str = "honoured"
) -> subprocess.Popen:
    """A publisher process of model "fm", waiting for "go" once it has said "ready"."""
    tmp.mkdir(parents=True, exist_ok=True)
    # Its own TMPDIR: the scratch copy a killed publisher leaves goes away with tmp_path.
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            PUBLISHER,
            store.uri,
            "fm",
            str(model),
            manifest(run_id=run_id).to_json(),
            priority,
            create_only,
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(params=SCHEMES)
def scheme_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Store, str]:
    """An empty store of each kind, and whether its publishers are to find If-None-Match honoured."""
    if request.param == "folder":
        return FolderStore(tmp_path / "store"), "honoured"
    request.getfixturevalue("s3_env")
    from bakeoff.components.storage import open_store

    return open_store(
        f"s3://bakeoff/{tmp_path.name}"
    ), "ignored" if request.param == "s3-without-create-only" else "honoured"


def go(publisher: subprocess.Popen) -> None:
    assert publisher.stdout and publisher.stdin  # started with pipes
    assert publisher.stdout.readline() == "ready\n", "the publisher died on start"
    publisher.stdin.write("go\n")
    publisher.stdin.flush()


def copy_has_begun(versions: Path) -> bool:
    """Whether some folder below models/fm/ (staging or version) has its first entry."""
    if not versions.is_dir():
        return False
    with os.scandir(versions) as entries:
        for entry in entries:
            if entry.is_dir():
                with os.scandir(entry.path) as inside:
                    if next(inside, None) is not None:
                        return True
    return False


def test_a_publisher_killed_midway_leaves_nothing_in_a_folder_store(tmp_path: Path) -> None:
    """Guards the folder store's publish being all or nothing when the process is SIGKILLed mid-copy."""
    store = FolderStore(tmp_path / "store")
    model = model_dir(tmp_path)
    # A thousand files, so that the copy into the store lasts long enough to be interrupted.
    for index in range(1000):
        (model / "variables" / f"variables.data-{index:05d}").write_bytes(bytes(4096))
    versions = store.root / "models" / "fm"
    publisher = start_publisher(store, model, "killed", tmp_path / "tmp", priority="low")
    try:
        go(publisher)
        while not copy_has_begun(versions):
            assert publisher.poll() is None, "the publisher finished before it could be killed"
            time.sleep(0.001)
        publisher.send_signal(signal.SIGKILL)
    finally:
        publisher.kill()
        publisher.communicate()
    assert publisher.returncode == -signal.SIGKILL
    assert registry.list_versions(store, "fm") == []
    assert store.list("models/fm") == []
    assert store.list("") == []  # the hidden staging folder is never listed
    assert not list(versions.glob("[!.]*/manifest.json"))
    # The kill landed mid-copy: its staging folder is what was left.
    assert [path.name for path in versions.iterdir() if path.name.startswith(".staging-")]

    assert registry.publish(store, "fm", model_dir(tmp_path / "next", b"after"), manifest(run_id="next")) == 1
    assert [(m.version, m.run_id) for m in registry.list_versions(store, "fm")] == [(1, "next")]
    assert store.get_bytes("models/fm/1/saved_model.pb") == b"after"
    assert store.list("models/fm/1") == [
        "models/fm/1/manifest.json",
        "models/fm/1/saved_model.pb",
        "models/fm/1/variables/variables.index",
    ]


def test_concurrent_publishers_each_get_their_own_version(scheme_store: tuple[Store, str], tmp_path: Path) -> None:
    """Guards 20 processes publishing one model at once: 20 distinct complete versions, none overwritten, on every
    store."""
    store, create_only = scheme_store
    run_ids = [f"run-{index:02d}" for index in range(PUBLISHERS)]
    publishers = []
    try:
        for run_id in run_ids:
            model = model_dir(tmp_path / run_id, run_id.encode())
            # Some bulk, so that each upload overlaps the others' choice of a version number.
            for index in range(20):
                (model / "variables" / f"variables.data-{index:05d}").write_bytes(run_id.encode() * 512)
            publishers.append(start_publisher(store, model, run_id, tmp_path / "tmp", create_only=create_only))
        # All are ready (started, store opened) before any goes, so that they race for the same numbers.
        for publisher in publishers:
            assert publisher.stdout and publisher.stdout.readline() == "ready\n", "a publisher died on start"
        for publisher in publishers:
            assert publisher.stdin  # started with a pipe
            publisher.stdin.write("go\n")
            publisher.stdin.flush()
        outcomes = [publisher.communicate(timeout=300) for publisher in publishers]
    finally:
        for publisher in publishers:
            publisher.kill()
            publisher.communicate()
    assert [publisher.returncode for publisher in publishers] == [0] * PUBLISHERS
    reports = {run_id: json.loads(stdout) for run_id, (stdout, _) in zip(run_ids, outcomes, strict=True)}
    got = {run_id: report["version"] for run_id, report in reports.items()}
    assert len(set(got.values())) == PUBLISHERS
    if isinstance(store, S3Store):
        # Each publisher used the scheme its server calls for: the probe told them apart.
        assert {report["create_only"] for report in reports.values()} == {create_only == "honoured"}
        # The claims lie outside the model's prefix, all of which KServe downloads.
        assert store._list_all("models/fm") == store.list("models/fm")
        # Each claim went once its number held files: a winner's after its marker, a loser's as it yielded.
        assert store._list_all(s3.CLAIMS) == []
    if create_only == "honoured":
        # One holder per number, and it always completes: no number is skipped.
        assert sorted(got.values()) == list(range(1, PUBLISHERS + 1))
    manifests = registry.list_versions(store, "fm")
    assert {m.run_id: m.version for m in manifests} == got
    for run_id, version in got.items():
        assert store.get_bytes(f"models/fm/{version}/saved_model.pb") == run_id.encode()
        assert store.get_bytes(f"models/fm/{version}/variables/variables.data-00019") == run_id.encode() * 512
        assert len(store.list(f"models/fm/{version}")) == 23


def test_a_publisher_killed_midway_leaves_no_version_in_an_s3_store(s3_env: str, tmp_path: Path) -> None:
    """Guards S3 publishes under SIGKILL between files: no version looks complete, and the next publish takes the
    next number."""
    from bakeoff.components.storage import open_store

    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    model = model_dir(tmp_path)
    # Hundreds of objects, so that the upload lasts long enough to be interrupted.
    for index in range(300):
        (model / "variables" / f"variables.data-{index:05d}").write_bytes(bytes(1024))
    publisher = start_publisher(store, model, "killed", tmp_path / "tmp", priority="low")
    try:
        go(publisher)
        while not store.list("models/fm"):
            assert publisher.poll() is None, "the publisher finished before it could be killed"
            time.sleep(0.01)
        publisher.send_signal(signal.SIGKILL)
    finally:
        publisher.kill()
        publisher.communicate()
    assert publisher.returncode == -signal.SIGKILL
    left = store.list("models/fm")
    # The kill landed between files: some of version 1 is there, never its manifest.
    assert left and all(key.startswith("models/fm/1/") for key in left) and len(left) < 302
    assert "models/fm/1/manifest.json" not in left
    assert registry.list_versions(store, "fm") == []

    assert registry.publish(store, "fm", model_dir(tmp_path / "next", b"after"), manifest(run_id="next")) == 2
    assert [(m.version, m.run_id) for m in registry.list_versions(store, "fm")] == [(2, "next")]
    assert store.get_bytes("models/fm/2/saved_model.pb") == b"after"
    assert store.list("models/fm/2") == [
        "models/fm/2/manifest.json",
        "models/fm/2/saved_model.pb",
        "models/fm/2/variables/variables.index",
    ]


class CrashingStore:
    """The real store, with the process dying after a few writes (as a killed pod would)."""

    def __init__(self, store: Store, writes: int) -> None:
        self.store, self.writes = store, writes

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def put_bytes(self, key: str, data: bytes) -> None:
        if self.writes == 0:
            raise KeyboardInterrupt("killed")
        self.writes -= 1
        self.store.put_bytes(key, data)

    def publish(self, local_dir: Path, prefix: str, marker: str) -> None:
        type(self.store).publish(cast(Store, self), local_dir, prefix, marker)


def test_a_crash_while_publishing_to_s3_leaves_no_complete_version(s3_env: str, tmp_path: Path) -> None:
    from bakeoff.components.storage import open_store

    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    with pytest.raises(KeyboardInterrupt):
        registry.publish(cast(Store, CrashingStore(store, writes=1)), "fm", model_dir(tmp_path), manifest(run_id="r1"))
    assert store.list("models/fm")  # something was written ...
    assert registry.list_versions(store, "fm") == []  # ... but no version looks complete


def test_a_number_held_by_a_publisher_that_died_after_claiming_it_is_skipped(s3_env: str, tmp_path: Path) -> None:
    """Guards publishers moving past a held number: one that died right after claiming version 1 left nothing listed,
    yet 1 stays its."""
    from bakeoff.components.storage import open_store

    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    with pytest.raises(KeyboardInterrupt):
        registry.publish(cast(Store, CrashingStore(store, writes=0)), "fm", model_dir(tmp_path), manifest(run_id="r1"))
    assert store.list("models/fm") == []
    assert registry.publish(store, "fm", model_dir(tmp_path), manifest(run_id="r2")) == 2
    assert [(m.version, m.run_id) for m in registry.list_versions(store, "fm")] == [(2, "r2")]
    assert isinstance(store, S3Store)
    assert store._list_all(s3.CLAIMS) == [f"{s3.CLAIMS}/models/fm/1/{s3.OWNER}"]  # the dead one's, and only that


def test_bad_model_names_are_refused(store: Store, tmp_path: Path) -> None:
    with pytest.raises(BakeoffError, match=r"model name '../x' is not usable in a path"):
        registry.publish(store, "../x", model_dir(tmp_path), manifest())
