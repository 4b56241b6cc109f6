"""This machine's costs on disk: the machine key they hold for, and the cached record, read strictly and written
whole."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.environment import CACHE_ENV
from bakeoff.components.search.costs import VERSION, Calibration
from bakeoff.components.storage.records import RecordError

logger = logging.getLogger(__name__)

FILE = "calibration.json"
CPUINFO = Path("/proc/cpuinfo")


def machine_key(cpuinfo: Path = CPUINFO) -> str:
    """What the costs depend on, in one line: the CPU model, whether it has AVX512, cores, TensorFlow, this model."""
    fields: dict[str, str] = {}
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    avx = "avx512f" if "avx512f" in fields.get("flags", "").split() else "no avx512f"
    tensorflow = importlib.metadata.version("tensorflow")
    return (
        f"{fields.get('model name', 'unknown CPU')}, {avx}, {os.cpu_count()} cores, tensorflow {tensorflow},"
        f" cost model {VERSION}"
    )


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or defaults.CACHE_DIR).expanduser()


def read(path: Path) -> Calibration | None:
    """The record at ``path``; None when there is none, or it is unreadable or of another version (measured again)."""
    try:
        text = path.read_text()
        with contextlib.suppress(ValueError, AttributeError):  # not JSON, or not an object: the strict read says so
            if json.loads(text).get("version") != VERSION:
                return None  # another cost model's record, of its own fields: measured again without a word
        calibration = Calibration.from_json(text, str(path))
    except FileNotFoundError:
        return None
    except RecordError as error:
        logger.warning("bakeoff: measuring this machine's costs again: %s", error)
        return None
    return calibration if calibration.version == VERSION else None


def write(path: Path, calibration: Calibration) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(calibration.to_json())
    os.replace(partial, path)  # a plan running beside this one reads the old record or the new, never half
