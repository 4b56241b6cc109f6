"""The KFP backend's and Argo's programs, built from the checkouts of tests/kfp/sources.py into a cache beside them.

From a kubeflow/pipelines checkout's `backend/`: the API server, the ScheduledWorkflow controller, the persistence
agent, the v2 driver and launcher; from the Argo Workflows checkout at the version its go.mod pins: the workflow
controller and argoexec. Each as upstream builds it (KFP's backend/Dockerfile*, Argo's Makefile): the servers
with cgo (the API server's storage layer needs go-sqlite3's cgo types), the driver and launcher static with the
netgo tag, Argo's two static. The driver, the launcher and argoexec run inside the pods' root filesystems: static,
they start in any image.

They are kept in `~/.cache/bakeoff/kfp/<tag>/bin-<key>` and `~/.cache/bakeoff/argo/<version>/bin-<key>`, the key
hashing the Go toolchain's version and the checkout's go.mod and go.sum: another release or toolchain builds anew,
nothing else does. The build is tests/cluster/binaries.py's (`go_build`), into a staging folder renamed into place
only once every program is there.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.binaries import Binaries, BuildError, cache_key, go, go_build
from tests.kfp import sources

STATIC = {"CGO_ENABLED": "0"}


@dataclass(frozen=True)
class Group:
    """Programs one `go build` makes: each name (the last element of its package path) and its package."""

    programs: Mapping[str, str]
    env: Mapping[str, str]


KFP_GROUPS = (
    Group(  # backend/Dockerfile, .persistenceagent, .scheduledworkflow: cgo on
        {
            "apiserver": "./backend/src/apiserver",
            "scheduledworkflow": "./backend/src/crd/controller/scheduledworkflow",
            "persistence": "./backend/src/agent/persistence",
        },
        {},
    ),
    Group(  # backend/Dockerfile.driver and .launcher
        {"driver": "./backend/src/v2/cmd/driver", "launcher-v2": "./backend/src/v2/cmd/launcher-v2"},
        {**STATIC, "GOFLAGS": "-buildvcs=false -tags=netgo"},
    ),
)
ARGO_GROUPS = (Group({"workflow-controller": "./cmd/workflow-controller", "argoexec": "./cmd/argoexec"}, STATIC),)
KFP_PROGRAMS = tuple(name for group in KFP_GROUPS for name in group.programs)
ARGO_PROGRAMS = tuple(name for group in ARGO_GROUPS for name in group.programs)


@dataclass(frozen=True)
class Built:
    """One KFP release's programs and its Argo's."""

    release: sources.Release
    kfp: Binaries
    argo: Binaries

    def path(self, program: str) -> Path:
        return (self.kfp if program in KFP_PROGRAMS else self.argo).path(program)


@contextlib.contextmanager
def staged(folder: Path) -> Iterator[Path]:
    """An empty folder beside ``folder`` to fill, renamed to ``folder`` when the block ends without an error: a cache
    entry is whole or absent, never half made (a failed fill is left as ``<folder>.partial`` until the next one)."""
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    yield staging
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def _ensure(
    toolchain: str,
    checkout: Path,
    folder: Path,
    groups: tuple[Group, ...],
    ldflags: str,
    what: str,
    log: Callable[[str], None],
) -> Binaries:
    """The `groups`' programs of `checkout` in `folder`, built there first when one is missing."""
    names = [name for group in groups for name in group.programs]
    if all((folder / name).is_file() for name in names):
        return Binaries(folder)
    log(f"building {what} ({', '.join(names)}) from {checkout} into {folder}: minutes on 2 cores, once")
    started = time.monotonic()
    with staged(folder) as staging:
        for group in groups:
            go_build(toolchain, checkout, staging, ldflags, tuple(group.programs.values()), group.env)
        missing = [name for name in names if not (staging / name).is_file()]
        if missing:
            raise BuildError(f"the Go build of {checkout} made no {', '.join(missing)} in {staging}")
    log(f"built {what} in {time.monotonic() - started:.0f} s")
    return Binaries(folder)


def ensure(release: sources.Release, log: Callable[[str], None] = print) -> Built:
    """The release's programs, building those not cached for this toolchain and these pins."""
    toolchain = go()
    kfp_folder = sources.kfp_cache() / release.tag / f"bin-{cache_key(toolchain, (release.kfp,))}"
    kfp = _ensure(toolchain, release.kfp, kfp_folder, KFP_GROUPS, "-s -w", f"KFP {release.tag}", log)
    argo_folder = sources.argo_cache() / release.argo_version / f"bin-{cache_key(toolchain, (release.argo,))}"
    stamp = f"-s -w -X {release.argo_module}.version={release.argo_version}"  # `argoexec version`, as Argo's Makefile
    argo = _ensure(toolchain, release.argo, argo_folder, ARGO_GROUPS, stamp, f"Argo {release.argo_version}", log)
    return Built(release, kfp, argo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kfp.binaries", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    try:
        for release in sources.find():
            built = ensure(release, log=lambda line: print(line, file=sys.stderr))
            print(f"KFP {release.tag}: {built.kfp.folder}; Argo {release.argo_version}: {built.argo.folder}")
    except sources.NoSources as missing:
        print(missing, file=sys.stderr)
        return sources.SKIPPED
    except (sources.SourceError, BuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
