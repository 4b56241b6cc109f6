"""Fixtures of the tests that run cluster commands against the fake KFP API: a clean environment and the fake itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bakeoff.pipelines.kfp_client import connection, endpoint, runs
from tests.fake_kfp_api import FakeKfpApi


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
