"""The checkouts the kfp lane builds from: a kubeflow/pipelines release and the Argo Workflows release it pins.

Nothing of either project's source is in this repository. The lane finds them, in this order:

- `KFP_SOURCE`: a kubeflow/pipelines checkout (`git clone --branch 2.16.0 https://github.com/kubeflow/pipelines`)
  or an unpacked snapshot of a tag (`git archive 2.16.0 | tar -x -C DIR`); its release is its `VERSION` file;
- else every `~/.cache/bakeoff/kfp/<tag>/src` that holds one (`BAKEOFF_KFP_CACHE` moves `~/.cache/bakeoff/kfp`).

Each KFP release's `go.mod` pins an Argo Workflows release (`github.com/argoproj/argo-workflows/v3 v3.7.8` at
2.16.0). Its checkout is `ARGO_SOURCE`, else `~/.cache/bakeoff/argo/<version>/src`: Argo comes from a checkout,
not the Go module proxy, because the proxy's v3.7.8 module lacks `workflow/executor/osspecific/signal_linux.go`
and argoexec does not build from it (`undefined: Setpgid`).

`python -m tests.kfp.sources` prints what it found, one line per release; with none it prints the one line
`make test` shows for the skipped lane and exits 3, and a named checkout that is not one exits 1 with what is wrong.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KFP_ENV, ARGO_ENV, CACHE_ENV = "KFP_SOURCE", "ARGO_SOURCE", "BAKEOFF_KFP_CACHE"
ARGO_MODULE = re.compile(r"^\s*(?:require\s+)?(github\.com/argoproj/argo-workflows/v\d+)\s+(v\S+)", re.M)
# What the lane builds from each checkout; a checkout lacking one of these folders is not one.
KFP_MARK, ARGO_MARK = "backend/src/apiserver", "cmd/argoexec"
SKIPPED = 3  # the exit status of `python -m tests.kfp.sources` when there is nothing to run the lane on
SKIP_LINE = (
    "make test: the kfp lane did not run (not a pass): no kubeflow/pipelines checkout; set KFP_SOURCE and"
    " ARGO_SOURCE, or unpack the tags into {cache}/<tag>/src and {argo}/<version>/src (docs/tests.md)"
)


class SourceError(RuntimeError):
    """A checkout named or found is not usable; the message says which and what to do."""


class NoSources(SourceError):
    """Nothing to run the lane on: no `KFP_SOURCE` and no checkout in the cache."""


@dataclass(frozen=True)
class Release:
    """One KFP release's checkout and the Argo Workflows checkout at the version its go.mod pins."""

    tag: str  # the KFP release, its VERSION file: "2.16.0"
    kfp: Path
    argo_module: str  # "github.com/argoproj/argo-workflows/v3"
    argo_version: str  # "v3.7.8"
    argo: Path


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """`~/.cache/bakeoff`, where the checkouts and what the lane builds from them are kept."""
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bakeoff"


def kfp_cache(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env[CACHE_ENV]) if env.get(CACHE_ENV) else cache_root(env) / "kfp"


def argo_cache(env: Mapping[str, str] = os.environ) -> Path:
    return kfp_cache(env).parent / "argo"


def kfp_release(checkout: Path) -> str:
    """The release a kubeflow/pipelines checkout is at, from its VERSION file."""
    if not (checkout / KFP_MARK).is_dir() or not (checkout / "VERSION").is_file():
        raise SourceError(
            f"{checkout} is not a kubeflow/pipelines checkout (no {KFP_MARK} or VERSION): clone it with"
            " `git clone --branch 2.16.0 https://github.com/kubeflow/pipelines`"
        )
    return (checkout / "VERSION").read_text().strip()


def argo_pin(checkout: Path) -> tuple[str, str]:
    """The Argo Workflows module and version a kubeflow/pipelines checkout's go.mod requires."""
    match = ARGO_MODULE.search((checkout / "go.mod").read_text())
    if match is None:
        raise SourceError(f"{checkout / 'go.mod'} requires no github.com/argoproj/argo-workflows module")
    return match[1], match[2]


def _git_tag(checkout: Path) -> str | None:
    """The tag a git checkout is at; None for an unpacked snapshot, which carries none."""
    if not (checkout / ".git").exists():
        return None
    done = subprocess.run(
        ["git", "-C", str(checkout), "describe", "--tags", "--exact-match"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def _argo_checkout(path: Path, version: str, named: bool) -> Path:
    how = f"{ARGO_ENV}={path}" if named else str(path)
    if not (path / ARGO_MARK).is_dir():
        raise SourceError(
            f"{how} is not an argoproj/argo-workflows checkout (no {ARGO_MARK}): clone it with"
            f" `git clone --branch {version} https://github.com/argoproj/argo-workflows`"
        )
    tag = _git_tag(path)
    if tag is not None and tag != version:
        raise SourceError(
            f"{how} is at {tag or 'no tag'}, and the KFP release pins Argo {version}: check out {version}"
        )
    return path


def release(kfp: Path, env: Mapping[str, str] = os.environ) -> Release:
    """The release of one KFP checkout, with its Argo checkout."""
    tag = kfp_release(kfp)
    module, version = argo_pin(kfp)
    named = bool(env.get(ARGO_ENV))
    argo = Path(env[ARGO_ENV]) if named else argo_cache(env) / version / "src"
    if not named and not argo.exists():
        raise SourceError(
            f"KFP {tag} ({kfp}) pins Argo Workflows {version}, and there is no checkout of it: set {ARGO_ENV}"
            f" or unpack its tag into {argo}"
        )
    return Release(tag, kfp, module, version, _argo_checkout(argo, version, named))


def find(env: Mapping[str, str] = os.environ) -> list[Release]:
    """The releases to run the lane on: `KFP_SOURCE`'s, else every one in the cache, oldest first."""
    if env.get(KFP_ENV):
        return [release(Path(env[KFP_ENV]), env)]
    cache = kfp_cache(env)
    checkouts = sorted((path / "src" for path in cache.glob("*") if (path / "src").is_dir()), key=_version_order)
    if not checkouts:
        raise NoSources(SKIP_LINE.format(cache=cache, argo=argo_cache(env)))
    return [release(path, env) for path in checkouts]


def _version_order(src: Path) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in src.parent.name.split("."))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kfp.sources", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    try:
        releases = find()
    except NoSources as missing:
        print(missing, file=sys.stderr)
        return SKIPPED
    except SourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for found in releases:
        print(f"KFP {found.tag} ({found.kfp}) with Argo Workflows {found.argo_version} ({found.argo})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
