"""Fixtures of the tests that run cluster commands against a KFP API: a clean environment, the fake, and `server`,
the same test against the fake (unit lane) and against the kfp lane's real API server."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bakeoff.components import defaults
from bakeoff.pipelines import compiling
from bakeoff.pipelines.kfp_client import connection, endpoint, runs
from tests.fake_kfp_api import FakeKfpApi

if TYPE_CHECKING:
    from tests.kfp.backend import Backend

REAL_RELEASE = "2.16.0"  # Kubeflow 26.03's KFP: what `server`'s real parameter runs on where found, else the newest

_COMPILED: dict[tuple, str] = {}  # IR text by the compile's inputs, for this test process
_compile_pipeline = compiling.compile_pipeline


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials, address or kfp context from the machine running the tests; no pod namespace file."""
    for name in (
        endpoint.HOST_ENV,
        endpoint.TOKEN_ENV,
        endpoint.TOKEN_FILE_ENV,
        endpoint.COOKIES_ENV,
        "KF_PIPELINES_UI_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)
    from kfp.client import client

    monkeypatch.setattr(client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    monkeypatch.setattr(connection, "POD_NAMESPACE_FILE", tmp_path / "no-pod-namespace")
    monkeypatch.setattr(runs, "POLL_SECONDS", 0.01)


@pytest.fixture
def fake() -> Iterator[FakeKfpApi]:
    with FakeKfpApi() as api:
        yield api
    assert api.violations == [], "requests that break KFP's API spec"


class RealKfpApi:
    """A real KFP API server (single-user), seen as the tests see the fake: what exists in the default namespace, read
    through its REST API; `empty()` deletes everything but the default experiment, which the server keeps."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.kept: set[str] = set()  # the experiments the server refuses to delete: not the test's

    def _call(self, method: str, path: str, **query: str) -> dict:
        address = f"{self.url}/apis/v2beta1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(urllib.request.Request(address, method=method), timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def _all(self, path: str, key: str, identity: str) -> dict[str, dict]:
        found: dict[str, dict] = {}
        token = ""
        while True:
            page = self._call("GET", path, page_size="100", page_token=token)
            found.update({item[identity]: item for item in page.get(key, [])})
            token = page.get("next_page_token", "")
            if not token:
                return found

    @property
    def pipelines(self) -> dict[str, dict]:
        return self._all("pipelines", "pipelines", "pipeline_id")

    @property
    def versions(self) -> dict[str, dict]:
        return {
            key: version
            for pipeline in self.pipelines
            for key, version in self._all(
                f"pipelines/{pipeline}/versions", "pipeline_versions", "pipeline_version_id"
            ).items()
        }

    @property
    def experiments(self) -> dict[str, dict]:
        found = self._all("experiments", "experiments", "experiment_id")
        return {key: experiment for key, experiment in found.items() if key not in self.kept}

    @property
    def runs(self) -> dict[str, dict]:
        return self._all("runs", "runs", "run_id")

    @property
    def recurring_runs(self) -> dict[str, dict]:
        return self._all("recurringruns", "recurringRuns", "recurring_run_id")

    def created(self) -> dict[str, int]:
        """As FakeKfpApi.created: how many of each thing exist."""
        return {
            kind: len(getattr(self, kind))
            for kind in ("pipelines", "versions", "experiments", "runs", "recurring_runs")
        }

    def empty(self) -> None:
        """Deletes what earlier tests made, the recurring runs first (their controller creates runs)."""
        for recurring in self.recurring_runs:
            self._call("DELETE", f"recurringruns/{recurring}")
        for run in self.runs:
            self._call("DELETE", f"runs/{run}")
        for experiment in self._all("experiments", "experiments", "experiment_id"):
            try:
                self._call("DELETE", f"experiments/{experiment}")
            except urllib.error.HTTPError as error:
                # The default experiment: ResourceManager.DeleteExperiment refuses it with a BadRequestError, whose
                # code is Aborted, HTTP 409 (backend/src/common/util/error.go).
                if error.code != 409:
                    raise
                self.kept.add(experiment)
        for pipeline in self.pipelines:
            self._call("DELETE", f"pipelines/{pipeline}", cascade="true")


KfpApi = FakeKfpApi | RealKfpApi


@pytest.fixture(scope="session")
def real_kfp_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The kfp lane's backend for a test outside tests/kfp, shared with tests/kfp's `kfp_backend`: KFP 2.16.0 where
    its checkout is found, else the newest release found (tests/kfp/sources.py)."""
    from tests.kfp import backend, sources

    try:
        found, missing = sources.find(), ""
    except sources.SourceError as error:  # the lane was asked for: its tests fail with the line that says why
        found, missing = [], str(error)
    if missing:  # outside the handler, so that the line is all the failure says
        pytest.fail(missing, pytrace=False)
    release = next((each for each in found if each.tag == REAL_RELEASE), found[-1])
    yield from backend.shared(request.config, backend.built(release), tmp_path_factory)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.kfp)])
def server(request: pytest.FixtureRequest) -> Iterator[KfpApi]:
    """A KFP API server: the fake (tests/fake_kfp_api.py), or the kfp lane's real one, emptied before the test."""
    if request.param == "fake":
        yield request.getfixturevalue("fake")
        return
    real = RealKfpApi(request.getfixturevalue("real_kfp_backend").host)
    real.empty()
    yield real


@pytest.fixture(autouse=True)
def compile_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct compile runs kfp's compiler once per test process; a repeat writes the same IR text.

    The IR is a function of the config's text and the other settings, and kfp's compiler walks the whole call stack
    for each task it sets an environment variable on (``PipelineTask._ensure_container_spec_exists``), about half a
    second a compile under pytest. A compile with ``--budget`` plans on this machine, so it always compiles.
    """

    def compile_pipeline(output: Path, config: Path = defaults.CONFIG, **settings: Any) -> Path:
        if settings.get("budget") is not None:
            return _compile_pipeline(output, config, **settings)
        key = (Path(config).read_bytes(), tuple(sorted(settings.items())))
        if key not in _COMPILED:
            _COMPILED[key] = _compile_pipeline(output, config, **settings).read_text()
        else:
            output.write_text(_COMPILED[key])
        return output

    monkeypatch.setattr(compiling, "compile_pipeline", compile_pipeline)
