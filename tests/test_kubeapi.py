"""Reading a failed Kubernetes API call: the one place the backends and deploy take an error apart."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from bakeoff.components.kubeapi import STRICT_DECODING, api_reason, api_status, names_an_object, unanswered

pytestmark = pytest.mark.unit


def api_error(status: int, body: object, reason: str = "Conflict") -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = body if isinstance(body, str) else json.dumps(body)
    return error


def wrapped(error: BaseException) -> RuntimeError:
    """What TrainingClient raises: a RuntimeError from the API's exception."""
    try:
        raise RuntimeError("Failed to create TFJob: team-a/job") from error
    except RuntimeError as outer:
        return outer


def test_the_api_answer_is_found_behind_a_clients_wrapper() -> None:
    error = wrapped(api_error(409, {"kind": "Status", "message": 'tfjobs "job" already exists'}))
    assert api_status(error) == 409
    assert api_reason(error) == 'HTTP 409: tfjobs "job" already exists'


def test_a_strict_decoding_message_keeps_its_reason_on_one_line() -> None:
    message = (
        f'InferenceService "m" is invalid: {{"spec": {{\n  "predictor": {{}}}}}}: {STRICT_DECODING} unknown field "x"'
    )
    assert api_reason(api_error(422, {"message": message})) == f'HTTP 422: {STRICT_DECODING} unknown field "x"'


def test_a_plain_text_answer_says_the_http_reason() -> None:
    assert api_reason(api_error(404, "404 page not found", reason="Not Found")) == "HTTP 404: Not Found"


def test_an_unanswered_call_says_its_root_cause() -> None:
    refused = ConnectionRefusedError(111, "Connection refused")
    try:
        raise urllib3.exceptions.ProtocolError("Connection aborted.") from refused
    except urllib3.exceptions.ProtocolError as error:
        assert unanswered(error)
        assert api_reason(error) == "ConnectionRefusedError: [Errno 111] Connection refused"
    assert not unanswered(ValueError("a bad manifest"))


def test_only_a_404_with_a_named_object_names_an_object() -> None:
    assert names_an_object(api_error(404, {"kind": "Status", "details": {"name": "job", "kind": "tfjobs"}}))
    assert not names_an_object(api_error(404, "404 page not found"))
    assert not names_an_object(ValueError("no answer at all"))
