"""Where the KFP API is and how to authenticate to it, from the flags and the environment."""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from bakeoff.components.environment import COOKIES_ENV, HOST_ENV, TOKEN_ENV, TOKEN_FILE_ENV
from bakeoff.components.errors import BakeoffError

SECRET_FILE_MAX_BYTES = (
    64 * 1024
)  # a service-account token is ~1 KiB, a Cookie header a few; this stops --token-file /dev/zero
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
REACH_HINT = "e.g. `kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and --host http://localhost:8080"
CREDENTIALS_HINT = f"pass --token, set {TOKEN_ENV} or {TOKEN_FILE_ENV}, or pass --cookies from a browser login"


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the KFP API is and how to authenticate; secrets stay out of ``repr`` so no log or traceback shows them."""

    host: str
    namespace: str | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    cookies: str | None = dataclasses.field(default=None, repr=False)
    verify_tls: bool = True
    ca_cert: Path | None = None

    @property
    def has_credentials(self) -> bool:
        return bool(self.token or self.cookies)


def normalize_host(host: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The API base URL without a trailing slash or a UI fragment; a scheme is required, not guessed.

    kfp.Client would prepend https:// to a bare ``localhost:8080`` and fail later
    on TLS; asking for the scheme is clearer.
    """
    host = (host or environ.get(HOST_ENV) or "").strip()
    if not host:
        raise BakeoffError(f"no KFP API address: pass --host URL or set {HOST_ENV} ({REACH_HINT})")
    parts = urllib.parse.urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BakeoffError(
            f"--host {host!r} is not an http(s) URL: write e.g. http://localhost:8080 or https://kubeflow.example.com/pipeline"
        )
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


def _one_line(value: str, what: str, fix: str) -> str:
    """``value`` as one HTTP header value; the error names where it came from, never the secret itself."""
    if not all(" " <= char <= "~" for char in value):
        raise BakeoffError(
            f"{what} holds a line break, a control or a non-ASCII character, which no HTTP header can carry: {fix}"
        )
    return value


def _read_secret(path: Path, what: str, fix: str) -> str:
    """The stripped text of a token or cookies file; a missing, unreadable, empty or binary file is one line."""
    try:
        with path.open("rb") as handle:
            data = handle.read(SECRET_FILE_MAX_BYTES + 1)
    except OSError as error:
        raise BakeoffError(f"cannot read {what} ({error.strerror}): {fix}") from None
    if len(data) > SECRET_FILE_MAX_BYTES:
        raise BakeoffError(
            f"{what} is larger than {SECRET_FILE_MAX_BYTES // 1024} KiB, so it holds more than a token or cookies: "
            f"{fix}"
        )
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BakeoffError(f"{what} is not UTF-8 text: {fix}") from None
    if not text:
        raise BakeoffError(f"{what} is empty: {fix}")
    return _one_line(text, what, fix)


def resolve_token(flag: str | None, environ: Mapping[str, str] = os.environ, file: Path | None = None) -> str | None:
    """The bearer token: --token or --token-file, else the file KF_PIPELINES_SA_TOKEN_PATH names, else
    $KF_PIPELINES_TOKEN.

    The file comes before the variable because in a pod it is the projected
    service-account token that the kubelet keeps fresh.
    """
    if flag is not None:
        if not flag.strip():
            raise BakeoffError(f"--token is empty: pass the token itself, or leave --token out and set {TOKEN_ENV}")
        return _one_line(flag.strip(), "--token", "pass the token on one line, or use --token-file FILE")
    if file is not None:
        return _read_secret(file, f"--token-file {str(file)!r}", "pass a file that holds the token on one line")
    path = environ.get(TOKEN_FILE_ENV)
    if path:
        return _read_secret(
            Path(path),
            f"the token file {path!r} that {TOKEN_FILE_ENV} names",
            f"fix or unset {TOKEN_FILE_ENV}, or pass --token",
        )
    token = environ.get(TOKEN_ENV, "").strip()
    return _one_line(token, f"${TOKEN_ENV}", f"set {TOKEN_ENV} to the token alone") if token else None


def resolve_cookies(flag: str | None, file: Path | None = None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The Cookie header of a browser session: --cookies or --cookies-file, else $BAKEOFF_KFP_COOKIES."""
    if flag is not None:
        if not flag.strip():
            raise BakeoffError(
                f"--cookies is empty: pass the Cookie header, or leave --cookies out and set {COOKIES_ENV}"
            )
        return _one_line(flag.strip(), "--cookies", "pass the Cookie header on one line, or use --cookies-file FILE")
    if file is not None:
        return _read_secret(
            file,
            f"--cookies-file {str(file)!r}",
            "pass a file that holds the Cookie header on one line, e.g. authservice_session=...",
        )
    cookies = environ.get(COOKIES_ENV, "").strip()
    return (
        _one_line(cookies, f"${COOKIES_ENV}", f"set {COOKIES_ENV} to the Cookie header on one line")
        if cookies
        else None
    )
