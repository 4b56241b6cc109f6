"""The control plane's programs, built from their Go modules into a cache outside the repository.

Four tool modules pin them: `tests/cluster/go.mod` (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl at one Kubernetes release), `tests/cluster/operator/go.mod` (the Training Operator,
which builds on an older Kubernetes library), and one per Kubeflow Trainer release the lane runs,
`tests/cluster/trainer/go.mod` (v2.1.0) and `tests/cluster/trainer-v2.3/go.mod` (v2.3.0): Trainer v2's
controller manager and the JobSet controller that release pins, under names of their own. The cache key is the
hash of every module's go.mod and go.sum and of the Go toolchain's version, so a pin change rebuilds and
nothing else does.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAINER_MODULE, JOBSET_MODULE = "github.com/kubeflow/trainer/v2", "sigs.k8s.io/jobset"
CACHE_ENV = "BAKEOFF_CLUSTER_CACHE"  # overrides where the binaries are kept


@dataclass(frozen=True)
class TrainerPin:
    """A tool module pinning one Kubeflow Trainer release and the JobSet release its go.mod requires."""

    module: Path
    suffix: str  # what its programs' names end with, so that every pin's programs share one folder

    @property
    def trainer(self) -> str:
        return _require(self.module, TRAINER_MODULE)

    @property
    def jobset(self) -> str:
        return _require(self.module, JOBSET_MODULE)

    @property
    def programs(self) -> tuple[str, str]:
        """Its Trainer's and its JobSet's controller managers."""
        return f"trainer-controller-manager{self.suffix}", f"jobset-controller-manager{self.suffix}"


# The first is what Kubeflow 1.11.0 and 26.03 install, and what a control plane starts with; the newest release
# is the other (tests/cluster/test_trainjob.py runs against each).
TRAINERS = (TrainerPin(HERE / "trainer", ""), TrainerPin(HERE / "trainer-v2.3", "-v2.3"))
MODULES = (HERE, HERE / "operator", *(pin.module for pin in TRAINERS))
SUFFIXES = {pin.module: pin.suffix for pin in TRAINERS}  # a module not named here keeps its programs' names
# What `go build -o DIR tool` names each program (the last path element that is not a major version).
PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "training-operator",
    *(program for pin in TRAINERS for program in pin.programs),
)
# What the build names a program (left) and the name it is kept under (right), where the two differ.
RENAMES = {
    "server": "etcd",  # go.etcd.io/etcd/server/v3
    "training-operator.v1": "training-operator",
    "jobset": "jobset-controller-manager",  # sigs.k8s.io/jobset's main package is its controller manager
}


class BuildError(RuntimeError):
    """A program could not be built; the message names it and ends with the build's output."""


@dataclass(frozen=True)
class Binaries:
    """Where each built program lives."""

    folder: Path

    def path(self, program: str) -> Path:
        return self.folder / program


def go() -> str:
    """The Go toolchain's command."""
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if found is None:
        raise BuildError("the control plane is built from Go modules and `go` is not on PATH: install Go >= 1.24")
    return found


def _require(module: Path, path: str) -> str:
    """The version `module`'s go.mod requires of `path`."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(path)}\s+(v\S+)", (module / "go.mod").read_text(), re.M)
    if match is None:
        raise BuildError(f"{module / 'go.mod'} does not require {path}")
    return match[1]


def kubernetes_version() -> str:
    return _require(HERE, "k8s.io/kubernetes")


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bakeoff" / "cluster"


def cache_key(go: str, modules: Sequence[Path] = MODULES) -> str:
    """What the programs built from `modules` depend on: the toolchain's version and every go.mod and go.sum."""
    digest = hashlib.sha256(subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.encode())
    for module in modules:
        for name in ("go.mod", "go.sum"):
            digest.update((module / name).read_bytes())
    return digest.hexdigest()[:16]


def go_build(
    go: str,
    module: Path,
    out: Path,
    ldflags: str,
    packages: Sequence[str] = ("tool",),
    env: Mapping[str, str] | None = None,
) -> None:
    """Builds `packages` of `module` (its go.mod's tools by default) into the folder `out`, `env` added to ours."""
    # go.sum pins every module: the default -mod=readonly holds
    env = {**os.environ, "GOFLAGS": "-buildvcs=false", **(env or {})}
    command = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/", *packages]
    result = subprocess.run(command, cwd=module, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"building the Go tools of {module} failed:\n{tail}")


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Holds ``folder``'s build lock: a second build of the same cache entry (another `make test`, `make cluster`, a
    test lane) waits for the first and then finds its programs, instead of building into the same staging folder."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(log=print) -> Binaries:
    """The built programs, building them first when this version of the pins has none cached."""
    toolchain = go()
    folder = cache_root() / cache_key(toolchain) / "bin"
    with locked(folder.parent):
        return _ensure(toolchain, folder, log)


def _ensure(toolchain: str, folder: Path, log) -> Binaries:
    if all((folder / program).is_file() for program in PROGRAMS):
        return Binaries(folder)
    staging = folder.with_name("bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = "k8s.io/component-base/version"
    k8s_flags = f"-s -w -X {stamp}.gitVersion={version} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor}"
    trainers = ", ".join(f"Kubeflow Trainer {pin.trainer} with JobSet {pin.jobset}" for pin in TRAINERS)
    log(
        f"building the control plane (Kubernetes {version}, Training Operator "
        f"{_require(MODULES[1], 'github.com/kubeflow/training-operator')}, {trainers})"
        f" into {folder}: 10-13 min on 2 cores, once"
    )
    for module in MODULES:
        # Each into a folder of its own: two Trainer pins build programs of the same names.
        built = staging / f"{module.name}.build"
        built.mkdir()
        go_build(toolchain, module, built, k8s_flags if module == HERE else "-s -w")
        for program in built.iterdir():
            program.rename(staging / f"{RENAMES.get(program.name, program.name)}{SUFFIXES.get(module, '')}")
        built.rmdir()
    missing = [program for program in PROGRAMS if not (staging / program).is_file()]
    if missing:
        raise BuildError(f"the Go build made no {', '.join(missing)} in {staging}")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return Binaries(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.binaries", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    try:
        print(ensure(log=lambda line: print(line, file=sys.stderr)).folder)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
