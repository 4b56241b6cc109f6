"""Where the KFP API is and how to authenticate to it, from the flags and the environment."""
from __future__ import annotations

import dataclasses
import os
import urllib.parse
from pathlib import Path
from typing import Mapping, Optional

from components.errors import BakeoffError

HOST_ENV = "KF_PIPELINES_ENDPOINT"  # kfp.Client's own name for the API address
TOKEN_FILE_ENV = "KF_PIPELINES_SA_TOKEN_PATH"  # kfp's name; Kubeflow's PodDefault sets it in notebooks
TOKEN_ENV = "KF_PIPELINES_TOKEN"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
REACH_HINT = "e.g. `kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and --host http://localhost:8080"
CREDENTIALS_HINT = f"pass --token, set {TOKEN_ENV} or {TOKEN_FILE_ENV}, or pass --cookies from a browser login"


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the KFP API is and how to authenticate; secrets stay out of ``repr`` so no log or traceback shows them."""

    host: str
    namespace: Optional[str] = None
    token: Optional[str] = dataclasses.field(default=None, repr=False)
    cookies: Optional[str] = dataclasses.field(default=None, repr=False)
    verify_tls: bool = True
    ca_cert: Optional[Path] = None

    @property
    def has_credentials(self) -> bool:
        return bool(self.token or self.cookies)


def normalize_host(host: Optional[str], environ: Mapping[str, str] = os.environ) -> str:
    """The API base URL without a trailing slash or a UI fragment; a scheme is required, not guessed.

    kfp.Client would prepend https:// to a bare ``localhost:8080`` and fail later
    on TLS; asking for the scheme is clearer.
    """
    host = (host or environ.get(HOST_ENV) or "").strip()
    if not host:
        raise BakeoffError(f"no KFP API address: pass --host URL or set {HOST_ENV} ({REACH_HINT})")
    parts = urllib.parse.urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BakeoffError(f"--host {host!r} is not an http(s) URL: write e.g. http://localhost:8080 or https://kubeflow.example.com/pipeline")
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


def resolve_token(flag: Optional[str], environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The bearer token: --token, else the file KF_PIPELINES_SA_TOKEN_PATH names, else $KF_PIPELINES_TOKEN.

    The file comes before the variable because in a pod it is the projected
    service-account token that the kubelet keeps fresh.
    """
    if flag is not None:
        if not flag.strip():
            raise BakeoffError(f"--token is empty: pass the token itself, or leave --token out and set {TOKEN_ENV}")
        return flag.strip()
    path = environ.get(TOKEN_FILE_ENV)
    if path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise BakeoffError(f"cannot read the token file {path!r} that {TOKEN_FILE_ENV} names ({error.strerror}): "
                               f"fix or unset {TOKEN_FILE_ENV}, or pass --token") from None
        if not token:
            raise BakeoffError(f"the token file {path!r} that {TOKEN_FILE_ENV} names is empty: fix or unset {TOKEN_FILE_ENV}, or pass --token")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None
