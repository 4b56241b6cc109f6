"""The control plane's programs, built from their Go modules into a cache outside the repository.

Three tool modules pin them: `tests/cluster/go.mod` (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl at one Kubernetes release), `tests/cluster/operator/go.mod` (the Training Operator,
which builds on an older Kubernetes library) and `tests/cluster/trainer/go.mod` (Kubeflow Trainer v2's
controller manager and the JobSet controller it pins). The cache key is the hash of every module's go.mod
and go.sum and of the Go toolchain's version, so a pin change rebuilds and nothing else does.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULES = (HERE, HERE / "operator", HERE / "trainer")
CACHE_ENV = "BAKEOFF_CLUSTER_CACHE"  # overrides where the binaries are kept
# What `go build -o DIR tool` names each program (the last path element that is not a major version).
PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "training-operator",
    "trainer-controller-manager",
    "jobset-controller-manager",
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


def cache_key(go: str) -> str:
    digest = hashlib.sha256(subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.encode())
    for module in MODULES:
        for name in ("go.mod", "go.sum"):
            digest.update((module / name).read_bytes())
    return digest.hexdigest()[:16]


def _build(go: str, module: Path, out: Path, ldflags: str) -> None:
    env = {**os.environ, "GOFLAGS": "-buildvcs=false"}  # go.sum pins every module: the default -mod=readonly holds
    command = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/", "tool"]
    result = subprocess.run(command, cwd=module, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"building the Go tools of {module} failed:\n{tail}")


def ensure(log=print) -> Binaries:
    """The built programs, building them first when this version of the pins has none cached."""
    toolchain = go()
    folder = cache_root() / cache_key(toolchain) / "bin"
    if all((folder / program).is_file() for program in PROGRAMS):
        return Binaries(folder)
    staging = folder.with_name("bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = "k8s.io/component-base/version"
    k8s_flags = f"-s -w -X {stamp}.gitVersion={version} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor}"
    log(
        f"building the control plane (Kubernetes {version}, Training Operator "
        f"{_require(MODULES[1], 'github.com/kubeflow/training-operator')}, Kubeflow Trainer "
        f"{_require(MODULES[2], 'github.com/kubeflow/trainer/v2')}, "
        f"JobSet {_require(MODULES[2], 'sigs.k8s.io/jobset')})"
        f" into {folder}: 8-10 min on 2 cores, once"
    )
    _build(toolchain, MODULES[0], staging, k8s_flags)
    for module in MODULES[1:]:
        _build(toolchain, module, staging, "-s -w")
    for built, kept in RENAMES.items():
        if (staging / built).is_file():
            (staging / built).rename(staging / kept)
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
