"""The served model: bakeoff's SavedModel behind KServe's V1 (TF Serving's REST) and V2 (Open Inference) protocols."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np

# kserve.model_server parses sys.argv when it is imported: it must not read the flags of whoever imports us.
_argv, sys.argv = sys.argv, sys.argv[:1]
try:
    import kserve
    from kserve.errors import InvalidInput
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
finally:
    sys.argv = _argv

from bakeoff.components import defaults  # noqa: E402 (after kserve's import, above)
from bakeoff.components.data.preprocess import NO_RESIZE, decode, prepare  # noqa: E402
from bakeoff.components.errors import BakeoffError  # noqa: E402
from bakeoff.components.modeling.savedmodel import ARRAYS_SIGNATURE, BYTES_SIGNATURE  # noqa: E402
from bakeoff.components.serving.batching import Batcher  # noqa: E402
from bakeoff.components.serving.loaded import Batch, Version  # noqa: E402
from bakeoff.components.storage.records import Preprocessing  # noqa: E402

ARRAYS_INPUT = "images"  # the input of ARRAYS_SIGNATURE
BYTES_INPUT = "image_bytes"  # the input of BYTES_SIGNATURE
IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")  # how PNG and JPEG files start
OUTPUTS = ("probabilities", "class_id", "class_name")  # what both signatures return
NUMERIC_V2_TYPES = ("FP32", "FP64", "FP16", "UINT8", "INT8", "INT16", "INT32", "INT64", "UINT16", "UINT32", "UINT64")


def load_version(path: Path, number: int) -> Version:
    """Loads one version and runs both signatures once, so its first request is not the one that pays for that."""
    import tensorflow as tf

    try:
        saved_model = tf.saved_model.load(str(path))
    except Exception as error:  # TF raises OSError, ValueError or its own errors for a bad folder
        raise BakeoffError(
            f"{str(path)!r} holds no loadable SavedModel ({str(error).splitlines()[0]}): publish it with `bakeoff run`"
        ) from None
    missing = [name for name in (ARRAYS_SIGNATURE, BYTES_SIGNATURE) if name not in saved_model.signatures]
    if missing:
        raise BakeoffError(
            f"the SavedModel in {str(path)!r} lacks the signature {missing[0]!r}:"
            " export it with bakeoff.components.modeling.savedmodel"
        )
    # The bytes signature is for TF Serving; this server decodes image files itself, as ingest did (``decoded``).
    arrays = saved_model.signatures[ARRAYS_SIGNATURE]
    shape = tuple(arrays.structured_input_signature[1][ARRAYS_INPUT].shape[1:])
    classes = arrays.structured_outputs["probabilities"].shape[1]
    # The label table is a string constant the signature captured (savedmodel.export); clients read it from metadata.
    names = [t.numpy() for t in arrays.captured_inputs if t.dtype == tf.string and t.shape == [classes]]
    version = Version(
        number,
        path,
        saved_model,
        arrays,
        shape,
        [name.decode() for name in names[0]] if len(names) == 1 else None,
        _preprocessing(path, shape),
    )
    arrays(**{ARRAYS_INPUT: tf.zeros([1, *shape])})
    return version


def _preprocessing(path: Path, shape: tuple[int, ...]) -> Preprocessing:
    """The manifest's preprocessing (a bare SavedModel: its signature's size and channels). An image file of another
    size is resized: by the dataset's own filter, or the default one where every training image had the size."""
    from bakeoff.components.serving.versions import read_manifest

    manifest = read_manifest(path)
    height, width, *channels = shape
    recorded = (
        manifest.dataset.preprocessing
        if manifest
        else Preprocessing(height, width, channels[0] if channels else 1, NO_RESIZE)
    )
    if recorded.resize == NO_RESIZE:
        recorded = dataclasses.replace(recorded, resize=defaults.RESIZE)
    return recorded


class ServedModel(kserve.Model):
    """A kserve.Model over one loaded version at a time; ``swap`` replaces it while requests keep flowing.

    Concurrent requests run as one model call of up to ``max_batch`` images (batching.Batcher; 1: each alone).
    """

    def __init__(
        self,
        name: str,
        version: Version,
        max_batch: int = defaults.SERVING_MAX_BATCH,
        batch_window_ms: float = defaults.SERVING_BATCH_WINDOW_MS,
    ) -> None:
        super().__init__(name)
        self.current = version
        self.ready = True
        self.batcher = Batcher(run, max_batch, batch_window_ms)

    def swap(self, version: Version) -> None:
        # One reference assignment: each request took the version it started with, so none sees half a switch.
        self.current = version

    def load(self) -> bool:
        return self.ready  # loaded before it is registered; newer versions come through swap

    def validate(self, payload: Any) -> Any:
        return payload  # preprocess has checked it against the model itself

    def get_input_types(self) -> list[dict]:
        return [
            {"name": ARRAYS_INPUT, "datatype": "FP32", "shape": [-1, *self.current.image_shape]},
            {"name": BYTES_INPUT, "datatype": "BYTES", "shape": [-1]},
        ]

    def get_output_types(self) -> list[dict]:
        classes = len(self.current.class_names or []) or -1
        return [
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, classes]},
            {"name": "class_id", "datatype": "INT64", "shape": [-1]},
            {"name": "class_name", "datatype": "BYTES", "shape": [-1]},
        ]

    async def preprocess(self, payload: dict | InferRequest, headers: dict | None = None) -> Batch:
        version = self.current
        if isinstance(payload, InferRequest):
            return v2_batch(payload, version)
        if isinstance(payload, dict):
            return v1_batch(payload, version)
        raise InvalidInput('send a JSON object such as {"instances": [...]} with Content-Type: application/json')

    async def predict(self, batch: Batch, headers: dict | None = None) -> tuple[Batch, dict]:
        return batch, await self.batcher(batch)

    async def postprocess(
        self, result: tuple[Batch, dict], headers: dict | None = None, response_headers: dict | None = None
    ) -> dict | InferResponse:
        batch, outputs = result
        if batch.request is None:
            return v1_response(outputs, batch.version.number)
        return v2_response(self.name, batch, outputs)


def run(batch: Batch) -> dict[str, np.ndarray]:
    """The arrays signature's outputs for one batch, as numpy arrays (image files were decoded by ``decoded``)."""
    outputs = batch.version.arrays(**{ARRAYS_INPUT: batch.tensor})
    return {name: tensor.numpy() for name, tensor in outputs.items()}


def v1_batch(body: dict, version: Version) -> Batch:
    """TF Serving's row format: {"signature_name"?: ..., "instances": [H×W(×C) arrays | {"b64": ...}, ...]}."""
    instances = body.get("instances")
    if not isinstance(instances, list) or not instances:
        hint = ' (the columnar "inputs" format is not served)' if "inputs" in body else ""
        raise InvalidInput(
            f'send {{"instances": [...]}} with at least one image: {_shape_text(version)} arrays of 0-255 pixels,'
            f' or {{"b64": "<base64 PNG/JPEG>"}}{hint}'
        )
    signature = body.get("signature_name")
    if signature not in (None, ARRAYS_SIGNATURE, BYTES_SIGNATURE):
        raise InvalidInput(
            f"unknown signature_name {signature!r}: use {ARRAYS_SIGNATURE!r} (arrays) or {BYTES_SIGNATURE!r} (images)"
        )
    first = instances[0]
    if signature is None:
        signature = BYTES_SIGNATURE if isinstance(first, dict) and ARRAYS_INPUT not in first else ARRAYS_SIGNATURE
    if signature == BYTES_SIGNATURE:
        return Batch(
            ARRAYS_SIGNATURE, decoded([_b64_field(i, one) for i, one in enumerate(instances)], version), version
        )
    if isinstance(first, dict):  # TF Serving's named-input rows: {"images": [[...]]}
        instances = [instance.get(ARRAYS_INPUT) if isinstance(instance, dict) else instance for instance in instances]
    return Batch(signature, pixel_arrays(instances, version, len(instances)), version)


def _b64_field(index: int, instance: Any) -> str:
    """The base64 text of ``{"b64": ...}`` or ``{"image_bytes": {"b64": ...}}``."""
    if isinstance(instance, dict) and isinstance(instance.get(BYTES_INPUT), dict):
        instance = instance[BYTES_INPUT]
    if not isinstance(instance, dict) or not isinstance(instance.get("b64"), str):
        raise InvalidInput(
            f'instance {index} is not {{"b64": "<base64 PNG/JPEG>"}}: {BYTES_SIGNATURE!r} takes encoded images only'
        )
    return instance["b64"]


def _shape_text(version: Version, count: int | None = None) -> str:
    """The arrays a client may send, e.g. 32×32×3, or 2×28×28×1 (or 2×28×28) for ``count`` 2."""
    lead = "" if count is None else f"{count}×"
    height, width, channels = version.pixels
    return f"{lead}{height}×{width}×{channels}" + (f" (or {lead}{height}×{width})" if channels == 1 else "")


def pixel_arrays(data: Any, version: Version, count: int) -> Any:
    """``data`` as float32 [count, *version.image_shape] (a tensor, or numpy from numpy), or InvalidInput saying what
    shape was expected. One channel may come with or without its axis: [n, H, W] is what clients sent before
    images had channels."""
    import tensorflow as tf

    height, width, channels = version.pixels
    accepted = [[count, height, width, channels]] + ([[count, height, width]] if channels == 1 else [])
    if isinstance(data, np.ndarray):  # V2's tensors: a numpy array already; the signature converts it off the loop
        tensor = data.astype(np.float32, copy=False) if data.dtype.kind in "fiu" else None
    else:
        try:
            # TF converts nested JSON lists about twice as fast as numpy does, and the signature takes it as is.
            tensor = tf.constant(data, tf.float32)
        except (ValueError, TypeError):
            tensor = None
    if tensor is None or list(tensor.shape) not in accepted:
        got = "ragged or non-numeric data" if tensor is None else f"shape {list(tensor.shape)}"
        raise InvalidInput(f"images must be {_shape_text(version, count)} numbers (0-255 pixels), got {got}")
    wanted = [count, *version.image_shape]
    if list(tensor.shape) == wanted:
        return tensor
    return tf.reshape(tensor, wanted) if tf.is_tensor(tensor) else tensor.reshape(wanted)


def decoded(texts: list[str | bytes], version: Version) -> np.ndarray:
    """Base64 texts (or raw bytes, as gRPC sends them) of image files as float32 [n, *version.image_shape]: each
    decoded and converted by ingest's own functions, with the dataset's preprocessing."""
    images = []
    for index, text in enumerate(texts):
        if isinstance(text, bytes) and text.startswith(IMAGE_MAGIC):
            data = text
        else:
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise InvalidInput(f"image {index} is not valid base64") from None
        if not data.startswith(IMAGE_MAGIC):
            raise InvalidInput(f"image {index} is not a PNG or JPEG file")
        try:
            image = decode(data, f"image {index}")
        except BakeoffError:  # Pillow's reason names its own buffer, not the client's file
            raise InvalidInput(f"image {index} could not be decoded: send whole PNG or JPEG files") from None
        images.append(prepare(image, version.preprocessing))
    return np.stack(images).astype(np.float32).reshape([len(images), *version.image_shape])


def v2_batch(request: InferRequest, version: Version) -> Batch:
    """The Open Inference Protocol: one input, FP32 [n, H, W(, C)] pixels or BYTES [n] (base64 PNG/JPEG in JSON)."""
    if len(request.inputs) != 1:
        raise InvalidInput(
            "send exactly one input tensor"
            f" ({ARRAYS_INPUT!r} FP32 [n, {', '.join(map(str, version.pixels))}] or {BYTES_INPUT!r} BYTES [n]),"
            f" got {len(request.inputs)}"
        )
    unknown = [output.name for output in request.request_outputs or [] if output.name not in OUTPUTS]
    if unknown:
        raise InvalidInput(f"unknown output {unknown[0]!r}: the outputs are {', '.join(OUTPUTS)}")
    tensor = request.inputs[0]
    shape = list(tensor.shape or [])
    if not shape or shape[0] < 1:
        raise InvalidInput(f"input {tensor.name!r} has shape {shape}: send at least one image")
    if tensor.datatype == "BYTES":
        if len(shape) != 1:
            raise InvalidInput(f"BYTES input {tensor.name!r} must have shape [n], got {shape}")
        return Batch(ARRAYS_SIGNATURE, decoded(_v2_data(tensor).tolist(), version), version, request)
    if tensor.datatype not in NUMERIC_V2_TYPES:
        raise InvalidInput(f"input {tensor.name!r} has datatype {tensor.datatype}: send FP32 pixels or BYTES images")
    return Batch(ARRAYS_SIGNATURE, pixel_arrays(_v2_data(tensor), version, shape[0]), version, request)


def _v2_data(tensor: Any) -> np.ndarray:
    try:
        return tensor.as_numpy()  # JSON data, gRPC contents or raw bytes alike, reshaped to the declared shape
    except (ValueError, TypeError, struct.error):  # struct.error: a binary BYTES element's length runs past the data
        raise InvalidInput(f"input {tensor.name!r}: its data does not fill its shape {list(tensor.shape)}") from None


def v1_response(outputs: dict[str, np.ndarray], version: int) -> dict:
    """TF Serving's row format: one {class_id, class_name, probabilities} per instance; and, as V2's
    ``model_version``, the version that answered them all (a merged call never mixes versions)."""
    names = [name.decode() for name in outputs["class_name"]]
    return {
        "model_version": str(version),
        "predictions": [
            {"class_id": class_id, "class_name": name, "probabilities": probabilities}
            for class_id, name, probabilities in zip(
                outputs["class_id"].tolist(), names, outputs["probabilities"].tolist(), strict=True
            )
        ],
    }


def v2_response(model_name: str, batch: Batch, outputs: dict[str, np.ndarray]) -> InferResponse:
    request = batch.request
    tensors = [
        InferOutput("probabilities", list(outputs["probabilities"].shape), "FP32", outputs["probabilities"]),
        InferOutput("class_id", list(outputs["class_id"].shape), "INT64", outputs["class_id"]),
        InferOutput("class_name", list(outputs["class_name"].shape), "BYTES", outputs["class_name"]),
    ]
    assert request is not None  # a V2 answer is to a V2 request, which the batch keeps
    return InferResponse(
        response_id=request.id or str(uuid.uuid4()),
        model_name=model_name,
        model_version=str(batch.version.number),
        infer_outputs=tensors,
        use_binary_outputs=request.use_binary_outputs,
        requested_outputs=request.request_outputs,
    )
