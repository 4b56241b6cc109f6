"""KServe V2's binary tensor data extension: the JSON request or response, then each binary tensor's raw bytes.

The extension (Triton's, which KServe's Open Inference Protocol adopts):
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md
"""

from __future__ import annotations

import json
from typing import Any

from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest, InferResponse, RequestedOutput

HEADER = "inference-header-content-length"  # the JSON part's length in bytes; the binary tensors follow it
CONTENT_TYPE = "application/octet-stream"


def read_request(body: bytes, header: str | None, model_name: str) -> InferRequest:
    """The request in ``body``, its binary tensors left as views of the body (as_numpy reads them with frombuffer).

    Raises InvalidInput for a missing or wrong ``header``, JSON that is not an inference request, or binary data
    that does not add up to what the inputs' ``binary_data_size`` say.
    """
    if header is None:
        raise InvalidInput(
            "a binary inference request needs the Inference-Header-Content-Length header: "
            "the length in bytes of the JSON at the start of its body"
        )
    if not (header.isascii() and header.isdigit()) or int(header) > len(body):
        raise InvalidInput(
            f"Inference-Header-Content-Length is {header!r}, not a length within the body's {len(body)} bytes: "
            "send the length in bytes of the JSON at its start"
        )
    length = int(header)
    try:
        request = json.loads(body[:length])
    except ValueError as error:  # UnicodeDecodeError included
        raise InvalidInput(
            f"the first {length} bytes of the body (Inference-Header-Content-Length) are not JSON ({error})"
        ) from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise InvalidInput('the JSON part of a binary inference request must be an object with "inputs": [...]')
    view, offset = memoryview(body), length
    inputs: list[InferInput] = []
    raw: list[memoryview | None] = []  # None: the input's data is in the JSON
    for tensor in request["inputs"]:
        name, size = _input_fields(tensor)
        inputs.append(
            InferInput(name, tensor["shape"], tensor["datatype"], tensor.get("data"), tensor.get("parameters"))
        )
        if size is None:
            raw.append(None)
            continue
        if offset + size > len(body):
            raise InvalidInput(
                f"input {name!r} has binary_data_size {size}, but only {len(body) - offset} bytes of the body are left"
            )
        raw.append(view[offset : offset + size])
        offset += size
    if offset != len(body):
        raise InvalidInput(
            f"the body has {len(body) - offset} bytes beyond the JSON and the inputs' binary_data_size: "
            "send each input's size, and nothing after the last"
        )
    return InferRequest(
        model_name,
        inputs,
        request_id=request.get("id"),
        raw_inputs=raw,
        parameters=request.get("parameters"),
        request_outputs=_requested_outputs(request),
    )


def _input_fields(tensor: Any) -> tuple[str, int | None]:
    """An input's name and binary_data_size (None: its data is in the JSON), once its fields are checked."""
    if not (
        isinstance(tensor, dict)
        and isinstance(tensor.get("name"), str)
        and isinstance(tensor.get("datatype"), str)
        and isinstance(tensor.get("shape"), list)
        and all(isinstance(n, int) for n in tensor["shape"])
    ):
        raise InvalidInput('each input must be {"name": str, "shape": [int, ...], "datatype": str, "parameters"?: {}}')
    name, size = tensor["name"], (tensor.get("parameters") or {}).get("binary_data_size")
    if size is None and "data" not in tensor:
        raise InvalidInput(f"input {name!r} has neither data nor a binary_data_size parameter")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise InvalidInput(f"input {name!r} has binary_data_size {size!r}: send its length in bytes")
    return name, size


def _requested_outputs(request: dict) -> list[RequestedOutput] | None:
    """The outputs asked for, each binary or not: its own binary_data, else the request's binary_data_output."""
    outputs = request.get("outputs")
    if outputs is None:
        return None
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs
    ):
        raise InvalidInput('"outputs" must be a list of {"name": str, "parameters"?: {"binary_data": bool}}')
    everything = bool((request.get("parameters") or {}).get("binary_data_output", False))
    # KServe reads only each output's own flag once outputs are named; the extension lets the request's stand in.
    return [
        RequestedOutput(o["name"], {**(o.get("parameters") or {}), "binary_data": _binary(o, everything)})
        for o in outputs
    ]


def _binary(output: dict, default: bool) -> bool:
    return bool((output.get("parameters") or {}).get("binary_data", default))


def write_response(response: InferResponse) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The response body and its headers: binary outputs as their bytes (tobytes) after the JSON, JSON alone if
    none is."""
    body, length = response.to_rest()
    if length is None:
        return json.dumps(body).encode(), [(b"content-type", b"application/json")]
    assert isinstance(body, bytes)  # to_rest gives bytes exactly when it gives the JSON part's length
    return body, [(b"content-type", CONTENT_TYPE.encode()), (HEADER.encode(), str(length).encode())]
