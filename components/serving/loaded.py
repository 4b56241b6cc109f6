"""A loaded version and a checked request on it: what the served model and its batcher both speak of."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kserve.protocol.infer_type import InferRequest

    from bakeoff.components.storage.records import Preprocessing


@dataclasses.dataclass(frozen=True)
class Version:
    """One loaded version: its signatures and the SavedModel object that keeps their variables alive."""

    number: int
    path: Path
    saved_model: Any
    arrays: Any
    image_shape: tuple[int, ...]  # the arrays signature's: [height, width, channels] ([height, width]: older exports)
    class_names: list[str] | None
    preprocessing: Preprocessing  # what an image file becomes: the dataset's own conversion (data/preprocess.py)

    @property
    def pixels(self) -> tuple[int, int, int]:
        """Height, width and channels of one image."""
        height, width, *channels = self.image_shape
        return height, width, channels[0] if channels else 1


@dataclasses.dataclass(frozen=True)
class Batch:
    """A checked request: which signature gets which tensor, on which version; ``request`` is set for V2."""

    signature: str
    tensor: Any  # float32 [n, *image_shape]: a tf.Tensor, or numpy
    version: Version
    request: InferRequest | None = None
