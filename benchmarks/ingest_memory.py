"""Ingest's peak memory and speed on an RGB class-folder tree: ``python -m benchmarks.ingest_memory 20000 40000``.

Each size's tree (tests/images.py's drawn classes, 64x64 PNG files) is written once below ``--dir``; ingest then
runs in a fresh process per size, whose peak RSS (its VmHWM) and images/s are printed as JSON lines.
Streaming ingest holds one shard per split, so the peak should not grow with the dataset beyond the shard's size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CLASSES = 10  # folders of drawn images: the three kinds of tests/images.py in ten colours' worth of folders
# The child's own peak in KiB: VmHWM, its address space's high-water mark. Not ru_maxrss: execve carries the forking
# parent's peak into it, so under `make bench` (a parent holding TensorFlow) it read 1,450 MB for an 89 MB ingest.
INGEST = """
import re, sys
from pathlib import Path
from bakeoff.components.data import artifact
artifact.build(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), 0, (), lambda line: None)
print(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
"""


def write_tree(root: Path, images: int, size: int) -> Path:
    from PIL import Image

    from tests.images import rgb_image

    done = root / ".complete"
    if done.exists():
        return root
    rng = np.random.default_rng(0)
    for index in range(images):
        label = index % CLASSES
        folder = root / f"class-{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rgb_image(label, size, rng)).save(folder / f"{index:06d}.png", compress_level=1)
    done.touch()
    return root


def measure(root: Path, out: Path, validation: int, shards: int) -> dict:
    began = time.monotonic()
    command = [sys.executable, "-c", INGEST, str(root), str(out), str(validation), str(shards)]
    peak_kib = int(subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()[-1])
    seconds = time.monotonic() - began
    peak_mb = peak_kib / 1024
    metadata = json.loads((out / "metadata.json").read_text())
    images = sum(metadata["counts"].values())
    train_shard_mb = metadata["counts"]["train"] / shards * np.prod(metadata["image_shape"]) / 2**20
    return {
        "images": images,
        "image_shape": metadata["image_shape"],
        "shards": shards,
        "train_shard_mb": round(float(train_shard_mb), 1),
        "peak_rss_mb": round(peak_mb, 1),
        "seconds": round(seconds, 1),
        "images_per_second": round(images / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", nargs="+", type=int, help="images per tree, any order")
    parser.add_argument("--side", type=int, default=64)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bakeoff-ingest-bench"))
    parser.add_argument("--validation", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    for images in args.sizes:
        root = write_tree(args.dir / f"rgb-{images}-{args.side}", images, args.side)
        out = args.dir / f"out-{images}"
        print(json.dumps(measure(root, out, args.validation, args.shards)), flush=True)


if __name__ == "__main__":
    main()
