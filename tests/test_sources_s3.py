"""Class folders below an S3 prefix, read with a KFP 2.17 profile's store key on SeaweedFS as KFP sets it up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.components.data import artifact
from bakeoff.components.data.sources import digest
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import open_store
from tests.conftest import KfpStore
from tests.images import RGB_CLASSES, write_rgb_folder
from tests.published import predict, run_to_published
from tests.store_policies import PROFILE_SETUPS
from tests.test_store_profiles import use_profile

pytestmark = pytest.mark.s3

PROFILE = next(setup for setup in PROFILE_SETUPS if setup.name == "kfp-2.17-profile")
OTHER = next(setup for setup in PROFILE_SETUPS if setup.bucket == PROFILE.bucket and setup is not PROFILE)


def prefix(name: str, namespace: str = PROFILE.namespace) -> str:
    return f"s3://{PROFILE.bucket}/private/{namespace}/bakeoff/{name}"


def build(source: str, out: Path) -> artifact.DatasetMetadata:
    return artifact.build(source, out, 3, 2, 0, (), lambda line: None)


def upload(folder: Path, uri: str) -> None:
    store = open_store(uri)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            store.put_bytes(path.relative_to(folder).as_posix(), path.read_bytes())


def test_a_tree_below_a_prefix_ingests_as_the_same_folder_does(
    kfp_store: KfpStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_profile(kfp_store, PROFILE, monkeypatch)
    local = write_rgb_folder(tmp_path / "images", per_class=6, size=16)
    (local / "LICENSE.txt").write_text("CC-BY")
    uri = prefix(f"{tmp_path.name}/images")
    upload(local, uri)
    from_s3, from_folder = build(f"{uri}/", tmp_path / "s3"), build(str(local), tmp_path / "folder")
    assert from_s3.fingerprint == from_folder.fingerprint and from_s3.counts == from_folder.counts
    assert from_s3.skipped.names == ["LICENSE.txt"] and from_s3.source == f"{uri}/"
    first = digest(uri)
    assert digest(f"{uri}/") == first
    open_store(uri).put_bytes("circle/00000.png", (local / "square" / "00000.png").read_bytes())
    assert digest(uri) != first, "a replaced object is new data"


@pytest.mark.training
def test_bakeoff_run_on_a_prefix_publishes_a_model_that_names_its_classes(
    kfp_store: KfpStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`bakeoff run --source s3://...` with the profile's keys to a published model, whose served answers carry the
    class folders' names."""
    use_profile(kfp_store, PROFILE, monkeypatch)
    local = write_rgb_folder(tmp_path / "images", per_class=8, size=16)
    uri = prefix(f"{tmp_path.name}/images")
    upload(local, uri)
    version = run_to_published(f"{uri}/", tmp_path / "run", "shapes")
    assert version.class_names == list(RGB_CLASSES)
    answer = predict(version, local / "stripes" / "00000.png")
    assert answer["class_name"] == RGB_CLASSES[answer["class_id"]] and len(answer["probabilities"]) == 3


def test_an_empty_prefix_is_refused_and_nothing_is_written(
    kfp_store: KfpStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_profile(kfp_store, PROFILE, monkeypatch)
    with pytest.raises(BakeoffError, match=r"^'s3://.*/nothing-here' is empty: upload the class folders there"):
        build(prefix(f"{tmp_path.name}/nothing-here"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_prefix_the_keys_may_not_read_is_refused_in_one_line(
    kfp_store: KfpStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_profile(kfp_store, OTHER, monkeypatch)
    upload(write_rgb_folder(tmp_path / "images", per_class=2, size=8), prefix(tmp_path.name, OTHER.namespace))
    use_profile(kfp_store, PROFILE, monkeypatch)  # another profile's keys: its prefix is not theirs
    with pytest.raises(BakeoffError, match=r"refused these keys a listing of 's3://") as raised:
        build(prefix(tmp_path.name, OTHER.namespace), tmp_path / "out")
    assert "\n" not in str(raised.value)
