"""Secrets stay secret: store keys and KFP tokens never reach a file, an object, a TFJob, a log or a line we print."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Summary
from bakeoff.pipelines.cli.main import main
from bakeoff.pipelines.kfp_client import endpoint
from tests import conftest
from tests.fake_kfp_api import FakeKfpApi
from tests.kfp_fixtures import clean_environment, compile_once, fake  # noqa: F401  (fixtures)

pytestmark = pytest.mark.unit

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
# Keys no code would print by chance, so that any hit is a leak (the S3 test server takes any keys).
ACCESS_KEY = "AKIALEAKCANARY7QX2ZB"
SECRET_KEY = "leak-canary-SECRET-9f3e1c7a2b5d4e6f8a0b"
CANARY_KEYS = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
BUCKET = "leak-check"
TOKEN = "tok-CANARY-4e1f9a7c-never-print-me"
COOKIE = "authservice_session=CANARY-MTcwOTk-never-print-me"
TINY = """
defaults: {training: {epochs: 1, batch_size: 32}}
variants:
  - {name: mlp, workers: 1, model: {type: mlp, hidden_units: [32]}}
  - {name: small_cnn, workers: 2, model: {type: cnn, filters: [8, 16], dense_units: 32}}
"""


@pytest.fixture(autouse=True)
def users_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """upload, submit and schedule need an image of the user's (pipelines/cli/flags.py IMAGE_ENV)."""
    monkeypatch.setenv("BAKEOFF_IMAGE", "registry.example/you/bakeoff:1")


# Loaded through PYTHONPATH by every Python process of the run: it writes each TFJob that
# bakeoff.components.training.launch builds to $BAKEOFF_TEST_TFJOB_DIR, exactly as a backend receives it.
TFJOB_RECORDER = textwrap.dedent('''
    """Test hook: records every TFJob that bakeoff.components.training.launch builds."""
    import importlib.machinery
    import json
    import os
    import sys


    class _Recorder:
        def find_spec(self, name, path=None, target=None):
            if name != "bakeoff.components.training.launch" or not os.environ.get("BAKEOFF_TEST_TFJOB_DIR"):
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                build = module.build_tfjob

                def recorded(*args, **kwargs):
                    from kubernetes.client import ApiClient

                    job = build(*args, **kwargs)
                    where = os.path.join(os.environ["BAKEOFF_TEST_TFJOB_DIR"],
                                         f"{job.metadata.name}-{os.getpid()}.json")
                    with open(where, "w") as handle:
                        json.dump(ApiClient().sanitize_for_serialization(job), handle)
                    return job

                module.build_tfjob = recorded

            spec.loader.exec_module = exec_module
            return spec


    sys.meta_path.insert(0, _Recorder())
''')


def leaks(where: str, data: bytes | str, secrets: dict[str, str]) -> list[str]:
    """'<where>: <which secret>' for each secret found in ``data``."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [f"{where}: {name}" for name, value in secrets.items() if value in text]


def file_leaks(root: Path, secrets: dict[str, str]) -> tuple[list[str], int]:
    """Leaks in the names and contents of every file under ``root``, and how many files were read."""
    found, count = [], 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        count += 1
        found += leaks(f"{path} (name)", str(path.relative_to(root)), secrets) + leaks(
            str(path), path.read_bytes(), secrets
        )
    return found, count


# ------------------------------------------------------------------------------ store keys: a whole bake-off


@pytest.fixture(scope="module")
def canary_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The pinned S3 test server, with the canary keys instead of the shared fixture's: its endpoint."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conftest, "WEED_KEYS", CANARY_KEYS)
        server = conftest.WeedServer(tmp_path_factory.mktemp("weed-canary"), buckets=(BUCKET,))
    try:
        server.start()
        yield server.endpoint
    finally:
        server.stop()


def bucket_leaks(endpoint_: str) -> tuple[list[str], int]:
    """Leaks in the name, metadata and bytes of every object in the bucket, read back through the S3 API."""
    import minio

    client = minio.Minio(endpoint_, access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False, region="us-east-1")
    found, count = [], 0
    for item in client.list_objects(BUCKET, recursive=True):
        count += 1
        where = f"s3://{BUCKET}/{item.object_name}"
        stat = client.stat_object(BUCKET, item.object_name)
        response = client.get_object(BUCKET, item.object_name)
        try:
            body = response.read()
        finally:
            response.close()
            response.release_conn()
        found += leaks(f"{where} (name)", item.object_name, CANARY_KEYS) + leaks(
            f"{where} (metadata)", repr(dict(stat.metadata or {})), CANARY_KEYS
        )
        found += leaks(where, body, CANARY_KEYS)
    return found, count


@pytest.mark.s3
@pytest.mark.training
def test_a_whole_bake_off_on_s3_never_writes_or_prints_the_store_keys(
    canary_s3: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Run, then models list, compile and upload, with the keys in the environment; then read back everything they made.

    Scanned: the output of each command (the run as a process with --debug and --json, TensorFlow's logs on; the
    others in this process, with every log record), the kfp.local work dir, every object in the bucket, every TFJob
    the run built, the temporary files and home of the run's processes, the compiled pipeline and the package a KFP
    API received.
    """
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    hook, tfjobs, scratch, home = (tmp_path / name for name in ("hook", "tfjobs", "tmp", "home"))
    for folder in (hook, tfjobs, scratch, home):
        folder.mkdir()
    (hook / "sitecustomize.py").write_text(TFJOB_RECORDER)
    settings = {**CANARY_KEYS, "BAKEOFF_S3_ENDPOINT": canary_s3, "BAKEOFF_S3_INSECURE": "1"}
    env = {
        key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"
    }  # every log line TensorFlow has
    env.update(
        settings,
        BAKEOFF_TEST_TFJOB_DIR=str(tfjobs),
        TMPDIR=str(scratch),
        HOME=str(home),
        PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
    )
    store = f"s3://{BUCKET}/bakeoff"
    run = subprocess.run(
        [
            BAKEOFF,
            "--debug",
            "run",
            "--config",
            str(config),
            "--store",
            store,
            "--work-dir",
            str(tmp_path / "work"),
            "--max-train-examples",
            "1024",
            "--epochs",
            "1",
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert Summary.from_json(run.stdout, "run --json").winner.version == 1
    outputs = {"`bakeoff run` stdout": run.stdout, "`bakeoff run` stderr": run.stderr}

    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)

    def bakeoff(*args: str) -> None:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 0, err
        outputs[f"`bakeoff {' '.join(args[:2])}` output"] = out + err

    bakeoff("models", "list", "--store", store, "--json")
    bakeoff(
        "compile",
        "--config",
        str(config),
        "-o",
        str(tmp_path / "compiled" / "bakeoff.yaml"),
        "--store",
        store,
        "--s3-endpoint",
        canary_s3,
    )
    with FakeKfpApi() as kfp_api:
        bakeoff("upload", "--host", kfp_api.url, "--config", str(config), "--store", store)
        outputs["the pipeline package the KFP API received"] = json.dumps([kfp_api.pipelines, kfp_api.versions])
    outputs["log records of models list, compile and upload"] = caplog.text

    found = [hit for where, text in outputs.items() for hit in leaks(where, text, CANARY_KEYS)]
    counts = {}
    for what, folder in (
        ("work dir", tmp_path / "work"),
        ("TFJobs", tfjobs),
        ("compiled", tmp_path / "compiled"),
        ("temporary files", scratch),
        ("home", home),
    ):
        hits, counts[what] = file_leaks(folder, CANARY_KEYS)
        found += hits
    hits, counts["objects"] = bucket_leaks(canary_s3)
    found += hits
    assert found == [], "the store keys leaked into:\n" + "\n".join(found)

    # The scan saw what it had to: one TFJob per variant, the run's objects, kfp.local's outputs.
    jobs = [json.loads(path.read_text()) for path in tfjobs.iterdir()]
    assert sorted(job["metadata"]["labels"]["bakeoff/variant"] for job in jobs) == ["mlp", "small_cnn"]
    for job in jobs:  # the keys reach a replica by reference to the cluster's secret only
        env_vars = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
        assert {e["name"] for e in env_vars if "valueFrom" in e} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        assert all("value" not in e for e in env_vars if e["name"].startswith("AWS_"))
    assert counts["objects"] >= 5 and counts["work dir"] >= 5 and counts["compiled"] == 1, counts


@pytest.mark.s3
@pytest.mark.parametrize(
    "keys",
    [
        {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": "wrong-CANARY-secret-0a9b8c7d6e5f"},
        {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWNCANARY0001", "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
    ],
    ids=["wrong secret", "unknown access key"],
)
def test_refused_store_keys_are_not_repeated_in_the_error(
    canary_s3: str,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    keys: dict[str, str],
) -> None:
    """The server's refusal becomes one line that names the variables, never their values."""
    for name, value in {**keys, "BAKEOFF_S3_ENDPOINT": canary_s3, "BAKEOFF_S3_INSECURE": "1"}.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)
    for command in (["models", "list"], ["serve"]):
        capsys.readouterr()
        assert main([*command, "--store", f"s3://{BUCKET}/x"]) == 1
        out, err = capsys.readouterr()
        assert err.startswith("bakeoff: error: ") and "refused the credentials" in err, err
        assert leaks(f"`bakeoff {' '.join(command)}`", out + err + caplog.text, keys) == []


# ----------------------------------------------------------------------------- KFP tokens and cookies


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str
    log: str  # every log record of the call, at any level

    @property
    def error(self) -> str:
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]

    @property
    def everything(self) -> str:
        return self.out + self.err + self.log


@pytest.fixture
def bakeoff(capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> Callable[..., Result]:
    """main() in this process; whatever anything logs, at any level, counts as output too."""
    caplog.set_level(logging.DEBUG)

    def run(*args: str) -> Result:
        capsys.readouterr()
        caplog.clear()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err, caplog.text)

    return run


def secret_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


TOKEN_SOURCES = {
    # the source that must win, and every source of lower precedence set to a wrong token
    "--token over everything": (
        lambda d: ["--token", TOKEN],
        {"KF_PIPELINES_SA_TOKEN_PATH": "sa-token:wrong-1", "KF_PIPELINES_TOKEN": "wrong-2"},
    ),
    "--token-file over the variables": (
        lambda d: ["--token-file", str(secret_file(d, "token", f"  {TOKEN}\n"))],
        {"KF_PIPELINES_SA_TOKEN_PATH": "sa-token:wrong-1", "KF_PIPELINES_TOKEN": "wrong-2"},
    ),
    "KF_PIPELINES_SA_TOKEN_PATH over KF_PIPELINES_TOKEN": (
        lambda d: [],
        {"KF_PIPELINES_SA_TOKEN_PATH": f"sa-token:{TOKEN}\n", "KF_PIPELINES_TOKEN": "wrong-2"},
    ),
    "KF_PIPELINES_TOKEN alone": (lambda d: [], {"KF_PIPELINES_TOKEN": f" {TOKEN} "}),
}


def set_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variables: dict[str, str]) -> None:
    """Sets each variable; a 'sa-token:TEXT' value becomes a file of TEXT, the variable its path."""
    for name, value in variables.items():
        kind, _, text = value.partition(":")
        if kind == "sa-token":
            value = str(secret_file(tmp_path, f"{kind}-{name}", text))
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("flags, variables", TOKEN_SOURCES.values(), ids=TOKEN_SOURCES.keys())
def test_the_token_comes_from_the_source_of_highest_precedence_and_is_never_printed(
    fake: FakeKfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags, variables: dict[str, str]
) -> None:
    fake.token = TOKEN
    set_sources(monkeypatch, tmp_path, variables)
    result = bakeoff("submit", "--host", fake.url, *flags(tmp_path))
    assert result.code == 0, result.err
    assert len(fake.runs) == 1
    assert set(fake.authorization_headers) == {f"Bearer {TOKEN}"}
    assert TOKEN not in result.everything


COOKIE_SOURCES = {
    "--cookies over the variable": (
        lambda d: ["--cookies", COOKIE],
        {"BAKEOFF_KFP_COOKIES": "authservice_session=wrong"},
    ),
    "--cookies-file over the variable": (
        lambda d: ["--cookies-file", str(secret_file(d, "cookies", COOKIE + "\n"))],
        {"BAKEOFF_KFP_COOKIES": "authservice_session=wrong"},
    ),
    "BAKEOFF_KFP_COOKIES alone": (lambda d: [], {"BAKEOFF_KFP_COOKIES": COOKIE}),
}


@pytest.mark.parametrize("flags, variables", COOKIE_SOURCES.values(), ids=COOKIE_SOURCES.keys())
def test_the_cookies_come_from_the_source_of_highest_precedence_and_are_never_printed(
    fake: FakeKfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags, variables: dict[str, str]
) -> None:
    fake.cookie = COOKIE
    set_sources(monkeypatch, tmp_path, variables)
    result = bakeoff("schedule", "--host", fake.url, "--every", "1d", *flags(tmp_path))
    assert result.code == 0, result.err
    assert len(fake.recurring_runs) == 1
    assert "CANARY" not in result.everything


def test_a_token_and_cookies_from_files_together(fake: FakeKfpApi, bakeoff, tmp_path: Path) -> None:
    """Either one is enough for the fake; both are sent, and neither is printed."""
    fake.token = TOKEN
    result = bakeoff(
        "upload",
        "--host",
        fake.url,
        "--token-file",
        str(secret_file(tmp_path, "t", TOKEN)),
        "--cookies-file",
        str(secret_file(tmp_path, "c", COOKIE)),
    )
    assert result.code == 0, result.err
    assert set(fake.authorization_headers) == {f"Bearer {TOKEN}"}
    assert "CANARY" not in result.everything


def unreadable(kind: str) -> dict[str, tuple[Callable[[Path], str], str]]:
    """Broken files for --token-file or --cookies-file: (make the file, the error line after 'bakeoff: error: ')."""
    flag = f"--{kind}-file"
    fix = (
        "pass a file that holds the token on one line"
        if kind == "token"
        else "pass a file that holds the Cookie header on one line, e.g. authservice_session=..."
    )
    return {
        "missing": (lambda d: str(d / "none"), f"cannot read {flag} '{{path}}' (No such file or directory): {fix}"),
        "a folder": (lambda d: str(d), f"cannot read {flag} '{{path}}' (Is a directory): {fix}"),
        "empty": (lambda d: str(secret_file(d, "empty", " \n\n")), f"{flag} '{{path}}' is empty: {fix}"),
        "not UTF-8": (
            lambda d: (str(d / "bin"), (d / "bin").write_bytes(b"\xff\xfeCANARY"))[0],
            f"{flag} '{{path}}' is not UTF-8 text: {fix}",
        ),
        "two lines": (
            lambda d: str(secret_file(d, "two", "CANARY-1\nCANARY-2\n")),
            f"{flag} '{{path}}' holds a line break, a control or a non-ASCII character, which no HTTP header can "
            f"carry: {fix}",
        ),
        "endless": (
            lambda d: "/dev/zero",
            f"{flag} '{{path}}' is larger than 64 KiB, so it holds more than a token or cookies: {fix}",
        ),
    }


BROKEN_FILES = {
    f"{kind} file {case}": (kind, *spec) for kind in ("token", "cookies") for case, spec in unreadable(kind).items()
}


@pytest.mark.parametrize("kind, make, message", BROKEN_FILES.values(), ids=BROKEN_FILES.keys())
def test_a_missing_empty_or_unreadable_secret_file_is_one_line_and_nothing_is_sent(
    fake: FakeKfpApi, bakeoff, tmp_path: Path, kind: str, make: Callable[[Path], str], message: str
) -> None:
    path = make(tmp_path)
    for command in (["upload"], ["schedules", "list"]):
        result = bakeoff(*command, "--host", fake.url, f"--{kind}-file", path)
        assert (result.code, result.out) == (1, "")
        assert result.error == "bakeoff: error: " + message.format(path=path)
        assert "CANARY" not in result.everything
    assert fake.calls == []


@pytest.mark.parametrize(
    "variable, value, message",
    [
        (
            "KF_PIPELINES_TOKEN",
            "CANARY\nX-Admin: yes",
            "$KF_PIPELINES_TOKEN holds a line break, a control or a non-ASCII character, which no HTTP "
            "header can carry: set KF_PIPELINES_TOKEN to the token alone",
        ),
        (
            "BAKEOFF_KFP_COOKIES",
            "a=CANARY\r\nb=c",
            "$BAKEOFF_KFP_COOKIES holds a line break, a control or a non-ASCII character, which no HTTP "
            "header can carry: set BAKEOFF_KFP_COOKIES to the Cookie header on one line",
        ),
        (
            "KF_PIPELINES_SA_TOKEN_PATH",
            "{tmp}/none",
            "cannot read the token file '{tmp}/none' that KF_PIPELINES_SA_TOKEN_PATH names "
            "(No such file or directory): fix or unset KF_PIPELINES_SA_TOKEN_PATH, or pass --token",
        ),
        (
            "KF_PIPELINES_SA_TOKEN_PATH",
            "/dev/zero",
            "the token file '/dev/zero' that KF_PIPELINES_SA_TOKEN_PATH names is larger than 64 KiB, so it "
            "holds more than a token or cookies: fix or unset KF_PIPELINES_SA_TOKEN_PATH, or pass --token",
        ),
    ],
    ids=["token variable", "cookies variable", "token path missing", "token path endless"],
)
def test_a_bad_secret_variable_is_one_line_without_its_value(
    fake: FakeKfpApi, bakeoff, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    result = bakeoff("submit", "--host", fake.url)
    assert (result.code, result.error) == (1, "bakeoff: error: " + message.format(tmp=tmp_path))
    assert "CANARY" not in result.everything and fake.calls == []


def test_token_and_token_file_together_is_a_usage_error(fake: FakeKfpApi, bakeoff, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit:
        bakeoff("upload", "--host", fake.url, "--token", TOKEN, "--token-file", str(secret_file(tmp_path, "t", TOKEN)))
    assert exit.value.code == 2 and fake.calls == []


CLUSTER_COMMANDS = {
    "upload": ["upload"],
    "submit": ["submit", "--param", "shards=4"],
    "submit --wait, failed": ["submit", "--wait"],
    "schedule": ["schedule", "--every", "6h"],
    "schedules list": ["schedules", "list"],
    "schedules enable, unknown id": ["schedules", "enable", "00000000-0000-0000-0000-000000000000"],
}


@pytest.mark.parametrize("credentials", ["token", "cookies"])
@pytest.mark.parametrize("outcome", ["accepted", "rejected", "forbidden"])
@pytest.mark.parametrize("command", CLUSTER_COMMANDS.values(), ids=CLUSTER_COMMANDS.keys())
def test_no_cluster_command_prints_or_logs_the_token_or_cookies(
    fake: FakeKfpApi, bakeoff, command: list[str], outcome: str, credentials: str
) -> None:
    """Success, a failed run, a 404, a 401 with stale credentials and a 403: neither is in stdout, stderr or any log
    record."""
    fake.run_outcome = "FAILED"
    if outcome == "rejected":
        fake.token = "the-server-wants-another-token"
    elif outcome == "forbidden":
        fake.forbidden = True
    flags = ["--token", TOKEN] if credentials == "token" else ["--cookies", COOKIE]
    result = bakeoff(*command, "--host", fake.url, *flags)
    if outcome == "accepted" and command[:2] in (
        ["upload"],
        ["submit", "--param"],
        ["schedule", "--every"],
        ["schedules", "list"],
    ):
        assert result.code == 0, result.err
    else:
        assert result.code == 1 and result.err.count("bakeoff: error:") == 1, result.err
    assert "CANARY" not in result.everything


def test_with_debug_the_traceback_does_not_show_the_token(fake: FakeKfpApi, bakeoff) -> None:
    """--debug raises instead of printing one line: the exception, its chain and the Target's repr hide the token."""
    import traceback

    fake.token = "the-server-wants-another-token"
    with pytest.raises(BakeoffError) as error:
        bakeoff("--debug", "submit", "--host", fake.url, "--token", TOKEN, "--cookies", COOKIE)
    text = "".join(traceback.format_exception(error.value))
    assert "rejected the credentials" in text and "CANARY" not in text
    target = endpoint.Target(host=fake.url, token=TOKEN, cookies=COOKIE)
    assert "CANARY" not in repr(target) + str(target)
