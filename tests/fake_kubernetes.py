"""A fake of the Kubernetes API for TFJobs: it checks every TFJob against the Training Operator's CRD schema."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import jsonschema
import yaml

CRD = Path(__file__).resolve().parent / "contracts" / "kubeflow.org_tfjobs.yaml"
TFJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"


def tfjob_schema() -> dict:
    """The v1 TFJob openAPIV3Schema from the Training Operator's own CRD."""
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


class FakeKubernetes:
    """Holds TFJobs; each GET of a job moves it one step along ``phases`` (condition types)."""

    def __init__(self, phases: list[str], log: str = "", namespace: str = "team-a") -> None:
        self.phases, self.log, self.namespace = phases, log, namespace
        self.validator = jsonschema.Draft7Validator(tfjob_schema())
        self.jobs: dict[str, dict] = {}
        self.gets: dict[str, int] = {}
        self.deleted: list[str] = []
        self.violations: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeKubernetes":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _conditions(self, name: str) -> list[dict]:
        step = min(self.gets.get(name, 0), len(self.phases) - 1)
        types = self.phases[: step + 1]
        return [
            {"type": kind, "status": "True" if index == len(types) - 1 or kind == "Created" else "False",
             "reason": f"TFJob{kind}", "message": f"TFJob {name} is {kind.lower()}.", "lastTransitionTime": "2026-11-29T00:00:00Z"}
            for index, kind in enumerate(types)
        ]

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: object, content_type: str = "application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                path = urlparse(self.path).path
                if path != TFJOBS.format(ns=fake.namespace):
                    return self._send(404, {"kind": "Status", "code": 404, "message": f"no route {path}"})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in fake.validator.iter_errors(body)]
                if errors:
                    fake.violations.extend(errors)
                    return self._send(422, {"kind": "Status", "code": 422, "message": "; ".join(errors)})
                fake.jobs[body["metadata"]["name"]] = body
                self._send(201, body)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if url.path.startswith(TFJOBS.format(ns=fake.namespace) + "/"):
                    name = parts[-1]
                    if name not in fake.jobs:
                        return self._send(404, {"kind": "Status", "code": 404, "message": "not found"})
                    job = dict(fake.jobs[name], status={"conditions": fake._conditions(name)})
                    fake.gets[name] = fake.gets.get(name, 0) + 1
                    return self._send(200, job)
                if url.path == f"/api/v1/namespaces/{fake.namespace}/pods":
                    selector = dict(item.split("=") for item in parse_qs(url.query)["labelSelector"][0].split(","))
                    name = selector["training.kubeflow.org/job-name"]
                    index = selector.get("training.kubeflow.org/replica-index", "0")
                    pod = {"metadata": {"name": f"{name}-worker-{index}", "namespace": fake.namespace}, "status": {"phase": "Running"}}
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [pod] if name in fake.jobs else []})
                if url.path.endswith("/log"):
                    return self._send(200, fake.log, "text/plain")
                self._send(404, {"kind": "Status", "code": 404, "message": f"no route {url.path}"})

            def do_DELETE(self) -> None:
                name = urlparse(self.path).path.rstrip("/").split("/")[-1]
                fake.deleted.append(name)
                fake.jobs.pop(name, None)
                self._send(200, {"kind": "Status", "status": "Success"})

        return Handler
