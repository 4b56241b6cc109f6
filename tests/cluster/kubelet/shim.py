"""The bind shim (bindshim.c) compiled once per source into the cache, for LD_PRELOAD in every pod."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.cluster.kubelet.config import POD_IP_ENV

SOURCE = Path(__file__).with_name("bindshim.c")


def build(cache_dir: Path) -> Path:
    """The shared library's path, compiled with `cc` unless this source was compiled before."""
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Werror", f'-DPOD_IP_ENV="{POD_IP_ENV}"']
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    target = cache_dir / f"bindshim-{digest}.so"
    if target.is_file():
        return target
    compiler = shutil.which("cc")
    if compiler is None:
        raise SystemExit("kubelet: no C compiler (cc) to build the bind shim: apt-get install gcc")
    cache_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=cache_dir, suffix=".so")
    os.close(handle)
    built = subprocess.run([compiler, *flags, "-o", temporary, str(SOURCE), "-ldl"], capture_output=True, text=True)
    if built.returncode != 0:
        os.unlink(temporary)
        raise SystemExit(f"kubelet: the bind shim did not compile:\n{built.stderr.strip()}")
    os.chmod(temporary, 0o755)
    os.replace(temporary, target)  # atomic: two kubelets starting at once both end with a whole library
    return target
