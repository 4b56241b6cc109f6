"""Fixtures of the tests that run cluster commands against the fake KFP API: a clean environment and the fake itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bakeoff.components import defaults
from bakeoff.pipelines import compiling
from bakeoff.pipelines.kfp_client import connection, endpoint, runs
from tests.fake_kfp_api import FakeKfpApi

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
