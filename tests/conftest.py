"""Shared fixtures: the real Fashion-MNIST, a real S3 server on loopback, both stores."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from components.data import artifact as dataset
from components.storage import Store, open_store

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
BUCKET = "bakeoff"
# moto answers this many requests without checking credentials: exactly the
# six that create the two test users and their keys; every later one is checked.
MOTO_SETUP_REQUESTS = 6
# Keys of a second user that may do everything but GetBucketLocation, as multi-user
# Kubeflow's per-profile store keys (pipelines-profile-controller/sync.py grants object
# actions below the profile's prefixes, never the bucket's location).
NO_LOCATION_USER = "no-location"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def fashion_dir() -> Path:
    if not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file():
        pytest.fail("Debian's dataset-fashion-mnist is not installed: run `make data`")
    return FASHION_MNIST


@pytest.fixture(scope="session")
def small_dataset(fashion_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real data, split and sharded as the ingest component does (4 shards)."""
    out = tmp_path_factory.mktemp("dataset")
    dataset.build(str(fashion_dir), out, validation_size=5000, shards=4, seed=0)
    return out


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"S3 server exited with code {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError("S3 server did not start listening")


def _moto_user(iam, name: str, statements: list[dict]) -> dict[str, str]:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def _moto_keys(endpoint: str) -> dict[str, str]:
    """Creates the users with S3 rights on moto's IAM; their keys are the only ones moto then accepts."""
    import boto3

    iam = boto3.client("iam", endpoint_url=f"http://{endpoint}", region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    everything = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
    no_location = _moto_user(iam, NO_LOCATION_USER, [everything, {"Effect": "Deny", "Action": "s3:GetBucketLocation", "Resource": "*"}])
    _NO_LOCATION_KEYS.update(no_location)
    return _moto_user(iam, "bakeoff", [everything])


_NO_LOCATION_KEYS: dict[str, str] = {}


@pytest.fixture
def no_location_keys(s3_server: tuple[str, dict[str, str]]) -> dict[str, str]:
    """Keys that may not ask a bucket's location (moto only: a `minio` binary has no such user)."""
    if not _NO_LOCATION_KEYS:
        pytest.fail("the S3 test server has no user without GetBucketLocation (moto creates one)")
    return dict(_NO_LOCATION_KEYS)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """An S3-compatible server on loopback that checks credentials: (endpoint, keys).

    A `minio` binary on PATH is used when present, else moto's server mode
    with its IAM access control switched on.
    """
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    if shutil.which("minio"):
        keys = {"AWS_ACCESS_KEY_ID": "bakeoff-test", "AWS_SECRET_ACCESS_KEY": "bakeoff-test-secret"}
        env = {**os.environ, "MINIO_ROOT_USER": keys["AWS_ACCESS_KEY_ID"], "MINIO_ROOT_PASSWORD": keys["AWS_SECRET_ACCESS_KEY"]}
        command = ["minio", "server", str(tmp_path_factory.mktemp("minio")), "--address", endpoint]
    else:
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(MOTO_SETUP_REQUESTS)}
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, process)
        if not shutil.which("minio"):
            keys = _moto_keys(endpoint)
        import minio

        minio.Minio(endpoint, secure=False, access_key=keys["AWS_ACCESS_KEY_ID"], secret_key=keys["AWS_SECRET_ACCESS_KEY"]).make_bucket(BUCKET)
        yield endpoint, keys
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def s3_endpoint(s3_server: tuple[str, dict[str, str]]) -> str:
    return s3_server[0]


@pytest.fixture
def s3_env(s3_server: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment a user sets for an S3 store: endpoint, plain HTTP, keys."""
    s3_endpoint, keys = s3_server
    for key, value in keys.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BAKEOFF_S3_ENDPOINT", s3_endpoint)
    monkeypatch.setenv("BAKEOFF_S3_INSECURE", "1")
    return s3_endpoint


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Each store implementation, empty, so both pass the same tests."""
    if request.param == "folder":
        return open_store(f"file://{tmp_path / 'store'}")
    request.getfixturevalue("s3_env")
    return open_store(f"s3://{BUCKET}/{tmp_path.name}")
