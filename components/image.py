"""The one runtime image every component and TFJob replica runs, and components built on it."""
from typing import Callable

# Built from images/Dockerfile (`make image`); a compiled pipeline names its own with
# `bakeoff compile --image`. Locally the virtual environment runs the code instead.
BASE_IMAGE = "ghcr.io/bakeoff/bakeoff:0.1.0"


def as_component(func: Callable, image: str):
    """``func`` as a lightweight KFP component on ``image``.

    Decorating at pipeline-build time, not import time, is what makes the
    image a compile-time setting; kfp is already in the image, so the
    component does not pip-install it at start.
    """
    from kfp import dsl

    return dsl.component(func, base_image=image, install_kfp_package=False)
