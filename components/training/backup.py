"""A variant's training state, backed up to the store at every epoch's end so that a restarted TFJob resumes there."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

from bakeoff.components.storage import Store
from bakeoff.components.storage.records import BackupManifest

# Below a variant's prefix: <fingerprint>/epoch-NNNN/ (one folder per backed-up
# epoch, each key written once) and <fingerprint>/attempts/stop-NNNN/NNNN (one per
# start of the job that trains to epoch NNNN: each rung counts its own restarts).
BACKUP = "backup"
MANIFEST = "backup.json"  # written last into an epoch's folder: the folder is complete
ATTEMPTS = "attempts"
READ_DIR = "chief"  # below its backup_dir, tf-keras' BackupAndRestore restores from here
_EPOCH = re.compile(r"epoch-(\d+)/" + re.escape(MANIFEST) + "$")


@dataclasses.dataclass(frozen=True)
class Resume:
    """What a restarted attempt takes over from the backup."""

    epochs_done: int  # 0: training starts from scratch
    history: dict[str, list[float]]  # the completed epochs' History, to be continued


def backup_prefix(prefix: str) -> str:
    return f"{prefix}/{BACKUP}"


def fingerprint(job: dict) -> str:
    """A digest of what the training state depends on: a backup of another job is never restored."""
    return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]


def _epoch_folder(prefix: str, digest: str, epochs_done: int) -> str:
    return f"{backup_prefix(prefix)}/{digest}/epoch-{epochs_done:04d}"


def _latest(store: Store, prefix: str, digest: str) -> tuple[int, str] | None:
    """(epochs done, folder) of the newest complete backup, or None."""
    base = f"{backup_prefix(prefix)}/{digest}"
    done = [
        (int(match.group(1)), f"{base}/epoch-{match.group(1)}")
        for key in store.list(base)
        if (match := _EPOCH.search(key))
    ]
    return max(done) if done else None


def restore(store: Store, prefix: str, digest: str, backup_dir: Path) -> Resume:
    """Downloads the newest complete backup to where BackupAndRestore reads it; every replica calls this before
    ``fit``."""
    latest = _latest(store, prefix, digest)
    if latest is None:
        return Resume(0, {})
    epochs_done, folder = latest
    manifest = BackupManifest.from_json(store.get_bytes(f"{folder}/{MANIFEST}"), store.uri_for(f"{folder}/{MANIFEST}"))
    target = backup_dir / READ_DIR
    target.mkdir(parents=True, exist_ok=True)
    for name in manifest.files:
        (target / name).write_bytes(store.get_bytes(f"{folder}/{name}"))
    return Resume(epochs_done, manifest.history)


def begin_attempt(store: Store, prefix: str, digest: str, stop_epoch: int) -> int:
    """Counts this start of the job that trains to ``stop_epoch`` (the chief calls it once per start); returns its
    number, from 1."""
    base = f"{backup_prefix(prefix)}/{digest}/{ATTEMPTS}/stop-{stop_epoch:04d}"
    attempt = len(store.list(base)) + 1
    store.put_bytes(f"{base}/{attempt:04d}", b"")
    return attempt


def upload(
    store: Store, prefix: str, digest: str, checkpoint_dir: Path, epochs_done: int, history: dict[str, list[float]]
) -> None:
    """Uploads the chief's checkpoint of ``epochs_done`` epochs, manifest last, then drops older backups."""
    folder = _epoch_folder(prefix, digest, epochs_done)
    # The checkpoint's data and index before its state file: a reader trusts only the manifest's list.
    names = sorted(
        (path.name for path in checkpoint_dir.iterdir() if path.is_file()),
        key=lambda name: (name == "checkpoint", name),
    )
    for name in names:
        store.put_bytes(f"{folder}/{name}", (checkpoint_dir / name).read_bytes())
    store.put_bytes(f"{folder}/{MANIFEST}", BackupManifest(epochs_done, names, history).to_json(indent=None).encode())
    base = f"{backup_prefix(prefix)}/{digest}/"
    older = [key for key in store.list(base) if key.startswith(f"{base}epoch-") and not key.startswith(f"{folder}/")]
    _delete(
        store, sorted(older, key=lambda key: not key.endswith(MANIFEST))
    )  # manifests first: never a listed folder with files gone


def remove(store: Store, prefix: str) -> None:
    """Deletes every backup of the variant: it has published its model."""
    _delete(store, store.list(backup_prefix(prefix)))


def _delete(store: Store, keys: list[str]) -> None:
    for key in keys:
        store.delete(key)
