"""KFP components made from the step functions, on the one runtime image every step and replica runs."""
from collections.abc import Callable


def as_component(func: Callable, image: str):
    """``func`` as a lightweight KFP component on ``image``.

    Decorating at pipeline-build time, not import time, is what makes the
    image a compile-time setting; kfp is already in the image, so the
    component does not pip-install it at start.
    """
    from kfp import dsl

    return dsl.component(func, base_image=image, install_kfp_package=False)
