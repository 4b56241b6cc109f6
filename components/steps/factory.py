"""KFP components made from the step functions, on the one runtime image every step and replica runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp.dsl.python_component import PythonComponent


def as_component(func: Callable, image: str) -> PythonComponent:
    """``func`` as a lightweight KFP component on ``image``.

    Decorating at pipeline-build time, not import time, is what makes the
    image a compile-time setting; kfp is already in the image, so the
    component does not pip-install it at start.
    """
    from kfp import dsl

    return dsl.component(func, base_image=image, install_kfp_package=False)
