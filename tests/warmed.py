"""What the tests' warm process imports (prefork.warm): a module, and, as TensorFlow's import does, the choice of
the temporary folder, which a forked replica must not keep."""

import colorsys  # noqa: F401 (the probes look for it in a replica's modules)
import tempfile

tempfile.gettempdir()
