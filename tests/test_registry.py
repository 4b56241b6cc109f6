"""Publishing: next integer version, TF-Serving layout, all or nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from components.storage import registry
from components.errors import BakeoffError
from components.storage import Store


def model_dir(tmp_path: Path, content: bytes = b"pb") -> Path:
    path = tmp_path / "model"
    (path / "variables").mkdir(parents=True, exist_ok=True)
    (path / "saved_model.pb").write_bytes(content)
    (path / "variables" / "variables.index").write_bytes(b"index")
    return path


def test_versions_count_up_in_serving_layout(store: Store, tmp_path: Path) -> None:
    assert registry.publish(store, "fm", model_dir(tmp_path), {"run_id": "r1"}) == 1
    assert registry.publish(store, "fm", model_dir(tmp_path, b"v2"), {"run_id": "r2"}) == 2
    assert store.get_bytes("models/fm/2/saved_model.pb") == b"v2"
    assert store.exists("models/fm/1/variables/variables.index")
    assert [(m["version"], m["run_id"]) for m in registry.list_versions(store, "fm")] == [(1, "r1"), (2, "r2")]


def test_a_half_written_version_is_never_listed_nor_reused(store: Store, tmp_path: Path) -> None:
    registry.publish(store, "fm", model_dir(tmp_path), {"run_id": "r1"})
    store.put_bytes("models/fm/2/saved_model.pb", b"crashed before its manifest")
    assert [m["version"] for m in registry.list_versions(store, "fm")] == [1]
    assert registry.publish(store, "fm", model_dir(tmp_path), {"run_id": "r3"}) == 3


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
        type(self.store).publish(self, local_dir, prefix, marker)


def test_a_crash_while_publishing_to_s3_leaves_no_complete_version(s3_env: str, tmp_path: Path) -> None:
    from components.storage import open_store

    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    with pytest.raises(KeyboardInterrupt):
        registry.publish(CrashingStore(store, writes=1), "fm", model_dir(tmp_path), {"run_id": "r1"})
    assert store.list("models/fm")  # something was written ...
    assert registry.list_versions(store, "fm") == []  # ... but no version looks complete


def test_bad_model_names_are_refused(store: Store, tmp_path: Path) -> None:
    with pytest.raises(BakeoffError, match=r"model name '../x' is not usable in a path"):
        registry.publish(store, "../x", model_dir(tmp_path), {})
