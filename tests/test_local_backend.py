"""The local backend runs a TFJob's replicas as real processes, as the Training Operator would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import V1EnvVar

from bakeoff.components import progress
from bakeoff.components.backends import prefork
from bakeoff.components.backends.backend import JobFailed
from bakeoff.components.backends.local import LocalBackend, signal_group
from bakeoff.components.backends.threads import thread_cap
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import from_dict
from bakeoff.components.training.tfjob import build_tfjob
from tests.conftest import still_running

pytestmark = pytest.mark.unit


def job_running(
    script: str,
    tmp_path: Path,
    workers: int = 2,
    backoff_limit: int = 0,
    deadline: int = 60,
    restart: str = "OnFailure",
):
    """A TFJob whose replicas run ``script`` (with the replica's out-dir as argv[1])."""
    variant = from_dict({"name": "probe", "model": {"type": "mlp"}, "workers": workers})
    job = build_tfjob(
        variant,
        name="probe-job",
        image="unused",
        args=[str(tmp_path)],
        env={"PROBE": "yes"},
        backoff_limit=backoff_limit,
        active_deadline_seconds=deadline,
    )
    spec = job.spec.tf_replica_specs["Worker"]
    spec.restart_policy = restart
    spec.template.spec.containers[0].command = ["python", "-c", script]
    return job


@pytest.fixture(params=["fresh", "forked"])
def starts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """How replicas start: as fresh processes, or forked by a warm process (prefork.py; here it imports
    tests/warmed.py); yields what the replicas' command lines show: the test's folder, or the warm process's socket."""
    if request.param == "fresh":
        yield str(tmp_path)
        return
    with prefork.warm("tests.warmed"):
        yield os.environ[prefork.PREFORK_ENV]


def left_running(marker: str, *pid_files: Path) -> list[int]:
    """The replicas (pids read from ``pid_files``) whose command lines show ``marker`` (``starts``) still running."""
    return still_running([int(pid_file.read_text()) for pid_file in pid_files], marker)


RECORD = """
import json, os, sys
config = json.loads(os.environ["TF_CONFIG"])
out = os.path.join(sys.argv[1], f"worker-{config['task']['index']}.json")
json.dump({"tf_config": config, "probe": os.environ["PROBE"], "threads": os.environ["TF_NUM_INTRAOP_THREADS"]},
          open(out, "w"))
print("hello from", config["task"]["index"])
"""


def test_each_replica_gets_the_operators_tf_config(tmp_path: Path, starts: str) -> None:
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job_running(RECORD, tmp_path))
    records = [json.loads((tmp_path / f"worker-{i}.json").read_text()) for i in range(2)]
    cluster = records[0]["tf_config"]["cluster"]
    assert list(cluster) == ["worker"] and len(set(cluster["worker"])) == 2
    assert all(address.startswith("localhost:") for address in cluster["worker"])
    assert [r["tf_config"]["task"] for r in records] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert all(r["tf_config"]["cluster"] == cluster and r["probe"] == "yes" for r in records)
    assert "[probe-job-worker-1] hello from 1" in lines


MALLOC = """
from bakeoff.components.backends.allocator import in_use
print("malloc", in_use())
"""


# What TensorFlow 2.21 prints on import on a CPU machine before absl is initialised, then a real error.
START_UP = r"""
import sys
print("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR", file=sys.stderr)
print("I0000 00:00:1796172167.659930   23632 port.cc:153] oneDNN custom operations are on.", file=sys.stderr)
print("I0000 00:00:1796172167.660584   23632 cudart_stub.cc:31] Could not find cuda drivers on your machine.",
      file=sys.stderr)
print("W0000 00:00:1796172167.660600   23632 some.cc:7] a warning", file=sys.stderr)
print("E0000 00:00:1796172167.660700   23632 other.cc:9] a real error", file=sys.stderr)
print("training")
"""


@pytest.mark.parametrize(
    ("level", "kept"),
    [
        ("2", ["other.cc:9] a real error", "training"]),
        ("1", ["some.cc:7] a warning", "other.cc:9] a real error", "training"]),
        ("0", ["absl::InitializeLog", "port.cc", "cudart_stub.cc", "some.cc", "other.cc", "training"]),
    ],
)
def test_tensorflows_start_up_lines_show_as_its_log_level_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str, kept: list[str]
) -> None:
    """absl writes lines logged before its initialisation below TensorFlow's level filter; the reader applies it."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job_running(START_UP, tmp_path, workers=1))
    shown = [line for line in lines if line.startswith("[probe-job-worker-0]")]
    assert len(shown) == len(kept) and all(part in line for part, line in zip(kept, shown, strict=True)), shown


def test_replicas_run_on_tcmalloc_when_the_machine_has_it(tmp_path: Path, starts: str) -> None:
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job_running(MALLOC, tmp_path))
    assert "[probe-job-worker-0] malloc tcmalloc" in lines and "[probe-job-worker-1] malloc tcmalloc" in lines


def test_without_tcmalloc_the_job_still_runs_and_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes.util

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # a machine without libtcmalloc-minimal4
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job_running(MALLOC, tmp_path))
    assert "[probe-job-worker-0] malloc default" in lines
    assert any("tcmalloc not found" in line and "apt-get install libtcmalloc-minimal4" in line for line in lines)


def test_threads_divide_the_cores_among_all_running_replicas() -> None:
    assert thread_cap(replicas=2, concurrent_jobs=1, cores=2) == 1
    assert thread_cap(replicas=2, concurrent_jobs=1, cores=8) == 4
    assert thread_cap(replicas=2, concurrent_jobs=2, cores=8) == 2
    assert thread_cap(replicas=4, concurrent_jobs=3, cores=2) == 1


CRASH_ONE = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
started = os.path.join(sys.argv[1], "survivor.pid")
if index == 1:
    while not os.path.exists(started):  # fail only once the other replica runs
        time.sleep(0.05)
    print("bakeoff: error: replica one cannot go on", flush=True)
    sys.exit(3)
with open(started + ".partial", "w") as file:
    file.write(str(os.getpid()))
os.rename(started + ".partial", started)
time.sleep(120)
"""


def test_a_failed_replica_stops_the_others_and_says_why(tmp_path: Path, starts: str) -> None:
    """When one replica fails for good, the backend ends the others' processes and names the failure."""
    with pytest.raises(BakeoffError) as error:
        LocalBackend(sink=lambda line: None).run(job_running(CRASH_ONE, tmp_path))
    assert str(error.value) == (
        "TFJob 'probe-job' failed: replica probe-job-worker-1 exited with code 3 after 0 restart(s): replica one "
        "cannot go on"
    )
    assert left_running(starts, tmp_path / "survivor.pid") == []


FLAKY = """
import os, sys
marker = os.path.join(sys.argv[1], "attempts")
attempts = len(open(marker).read()) if os.path.exists(marker) else 0
open(marker, "a").write("x")
sys.exit(1 if attempts == 0 else 0)
"""


def test_on_failure_restarts_within_the_backoff_limit(tmp_path: Path, starts: str) -> None:
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job_running(FLAKY, tmp_path, workers=1, backoff_limit=1))
    assert (tmp_path / "attempts").read_text() == "xx"
    assert any("restarting the job (1/1)" in line for line in lines)


def test_never_means_no_restart(tmp_path: Path, starts: str) -> None:
    with pytest.raises(JobFailed, match=r"exited with code 1 after 0 restart\(s\)"):
        LocalBackend(sink=lambda line: None).run(
            job_running(FLAKY, tmp_path, workers=1, backoff_limit=3, restart="Never")
        )
    assert (tmp_path / "attempts").read_text() == "x"


SLEEPER = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
pid_file = os.path.join(sys.argv[1], f"replica-{index}.pid")
with open(pid_file + ".partial", "w") as file:
    file.write(str(os.getpid()))
os.rename(pid_file + ".partial", pid_file)
time.sleep(60)
"""


def test_stopping_a_replica_that_ended_since_it_was_polled_is_no_error() -> None:
    """A replica can end between the poll that found it running and the signals that stop it (a forked one's end
    reaches its launcher a moment later): the job is then stopped, not failed with ProcessLookupError."""
    ended = subprocess.Popen(["true"], start_new_session=True)
    ended.wait()
    signal_group(ended.pid, signal.SIGTERM)


@pytest.mark.long_running
def test_active_deadline_stops_the_job(tmp_path: Path, starts: str) -> None:
    """A job past its activeDeadlineSeconds has every replica's process ended, and says so."""
    with pytest.raises(BakeoffError, match=r"ran past activeDeadlineSeconds=3 and was stopped") as stopped:
        LocalBackend(sink=lambda line: None).run(job_running(SLEEPER, tmp_path, workers=2, deadline=3))
    assert not isinstance(stopped.value, JobFailed), "a retry with its backup may finish it"
    assert left_running(starts, tmp_path / "replica-0.pid", tmp_path / "replica-1.pid") == []


WATCHED = """
import json, os, sys
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print("progress folder", os.environ.get("BAKEOFF_PROGRESS_DIR"), flush=True)
if index == 1:
    print("bakeoff: error: replica one cannot go on", flush=True)
    sys.exit(3)
"""


def test_when_watched_the_lines_go_to_the_variants_log_and_a_failure_is_its_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starts: str
) -> None:
    """`bakeoff run` on a terminal: the table shows the variant's state; its replicas' lines are in its log file."""
    folder = tmp_path / "progress"
    folder.mkdir()
    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(folder))
    lines: list[str] = []
    with pytest.raises(BakeoffError) as error:
        LocalBackend(sink=lines.append).run(job_running(WATCHED, tmp_path))
    assert lines == []  # nothing on the task's stdout, which would scroll over the table
    log = (folder / "probe.log").read_text().splitlines()  # named by the variant, not the job
    assert f"[probe-job-worker-0] progress folder {folder}" in log  # the chief can emit its own events
    assert "[probe-job-worker-1] bakeoff: error: replica one cannot go on" in log
    state = progress.read_events(folder)["probe"].latest
    assert (state.state, state.error) == ("failed", str(error.value))


IMPORTED = """
import os, sys
print("colorsys imported:", "colorsys" in sys.modules, "- TF_CONFIG:", "TF_CONFIG" in os.environ,
      "- argv:", sys.argv[1:])
"""


def test_a_warm_process_starts_replicas_with_its_imports_done(tmp_path: Path, starts: str) -> None:
    """What makes forking pay: the warm process's imports are there, and the replica still gets its own
    environment and arguments."""
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job_running(IMPORTED, tmp_path, workers=1))
    forked = starts != str(tmp_path)
    assert f"[probe-job-worker-0] colorsys imported: {forked} - TF_CONFIG: True - argv: [{str(tmp_path)!r}]" in lines


def test_a_replica_that_would_start_differently_starts_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow reads its kernels' switch at import: a replica asking for others than the warm process imported
    with cannot fork from it."""
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    with prefork.warm("colorsys"):
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
        lines: list[str] = []
        LocalBackend(sink=lines.append).run(job_running(IMPORTED, tmp_path, workers=1))
    assert any("[probe-job-worker-0] colorsys imported: False" in line for line in lines), lines
    assert any("(fresh: TF_ENABLE_ONEDNN_OPTS differs from the warm process's)" in line for line in lines), lines


LEFT_BEHIND = """
import os, sys, tempfile
handle, path = tempfile.mkstemp(prefix="__autograph_generated_file")  # as AutoGraph writes its modules
open(os.path.join(sys.argv[1], "left"), "w").write(path)
os._exit(0)  # as the worker program ends: no exit handlers, which would have removed it
"""


def test_what_a_replica_leaves_in_its_temporary_folder_goes_with_its_job(tmp_path: Path, starts: str) -> None:
    LocalBackend(sink=lambda line: None).run(job_running(LEFT_BEHIND, tmp_path, workers=1))
    left = Path((tmp_path / "left").read_text())
    assert left.name.startswith("__autograph_generated_file") and not left.exists()


def test_a_job_that_names_its_own_temporary_folder_keeps_it(tmp_path: Path, starts: str) -> None:
    """As in a pod: the replica's environment as the TFJob writes it comes first."""
    job = job_running(
        "import sys, tempfile; open(sys.argv[1] + '/used', 'w').write(tempfile.gettempdir())", tmp_path, workers=1
    )
    (own := tmp_path / "own").mkdir()
    job.spec.tf_replica_specs["Worker"].template.spec.containers[0].env.append(V1EnvVar(name="TMPDIR", value=str(own)))
    LocalBackend(sink=lambda line: None).run(job)
    assert (tmp_path / "used").read_text() == str(own)


KILLED = """
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_replica_killed_by_a_signal_is_named_as_such(tmp_path: Path, starts: str) -> None:
    with pytest.raises(JobFailed, match=r"replica probe-job-worker-0 was killed by SIGKILL after 0 restart\(s\)"):
        LocalBackend(sink=lambda line: None).run(job_running(KILLED, tmp_path, workers=1))


ORPHANED = """
import os, signal, sys, time
marker = os.path.join(sys.argv[1], "attempts")
attempts = len(open(marker).read()) if os.path.exists(marker) else 0
open(marker, "a").write("x")
if attempts == 0:
    with open(os.path.join(sys.argv[1], "first.pid"), "w") as file:
        file.write(str(os.getpid()))
    os.kill(os.getppid(), signal.SIGKILL)  # the warm process that forked this replica
    time.sleep(60)
"""


def test_when_the_warm_process_goes_its_replicas_stop_and_the_job_starts_fresh(tmp_path: Path) -> None:
    """Nothing would tell the launcher how a replica of a gone warm process ends: it is stopped, and the restart
    starts fresh processes."""
    with prefork.warm("colorsys"):
        marker = os.environ[prefork.PREFORK_ENV]
        lines: list[str] = []
        LocalBackend(sink=lines.append).run(job_running(ORPHANED, tmp_path, workers=1, backoff_limit=1))
    assert (tmp_path / "attempts").read_text() == "xx"
    assert any("was killed by SIGKILL; restarting the job (1/1)" in line for line in lines), lines
    assert any("(fresh: the warm process did not answer" in line for line in lines), lines
    assert left_running(marker, tmp_path / "first.pid") == []
