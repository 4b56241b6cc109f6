"""The kfp lane's fixtures: each KFP release found (tests/kfp/sources.py), its programs built once per tag."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kfp import backend, binaries, sources


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes `release` runs once per KFP release found, named by its tag."""
    if "release" not in metafunc.fixturenames:
        return
    try:
        found: list[sources.Release | sources.SourceError] = list(sources.find())
    except sources.SourceError as error:  # the lane was asked for: its tests fail with the line that says why
        found = [error]
    ids = [item.tag if isinstance(item, sources.Release) else "no-checkout" for item in found]
    metafunc.parametrize("release", found, ids=ids, indirect=True, scope="session")


@pytest.fixture(scope="session")
def release(request: pytest.FixtureRequest) -> sources.Release:
    if isinstance(request.param, sources.SourceError):
        pytest.fail(str(request.param), pytrace=False)
    return request.param


@pytest.fixture(scope="session")
def built(release: sources.Release) -> binaries.Built:
    """The release's KFP and Argo programs (`make kfp-binaries` builds them before the lane: cached here)."""
    return backend.built(release)


@pytest.fixture(scope="session")
def kfp_backend(
    built: binaries.Built, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[backend.Backend]:
    """The release's API server, ScheduledWorkflow controller, persistence agent and Argo's workflow controller, with
    MariaDB and SeaweedFS, on the real control plane: one per release and session, shared with the `real` parameter of
    tests/kfp_fixtures.py's `server` (backend.shared)."""
    yield from backend.shared(request.config, built, tmp_path_factory)


@pytest.fixture(scope="module")
def executing(kfp_backend: backend.Backend) -> Iterator[backend.Backend]:
    """The backend with its node taking pods for the module's tests: earlier tests' Workflows go first, and the node
    is cordoned again after (backend.py says why it is cordoned)."""
    backend.delete_workflows(kfp_backend)
    backend.cordon(kfp_backend.plane, on=False)
    try:
        yield kfp_backend
    finally:
        backend.cordon(kfp_backend.plane)
