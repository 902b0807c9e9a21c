"""Benchmark: the default install's size and the first command's time, from a fresh clone on an empty cache.

    python3 benchmarks/install_size.py [--keep]

Clones this checkout's HEAD into a temporary folder and runs the README's first command there, `bash
scripts/run_example.sh` (bootstrap: `uv sync --frozen --compile-bytecode`, the default install without
extras; then the example sweep), with an empty package cache (a temporary UV_CACHE_DIR: every wheel is
downloaded) and an empty user cache (a temporary XDG_CACHE_HOME: the ONNX graph is built and checked).
Prints the set-up's and the sweep's wall time (goal: the whole command <= 5 minutes), the environment's size
(goal <= 1.5 GB; the bytecode compiled at install apart), the downloaded cache's, and whether torch, CUDA
or triton is in it (it must not be). `--keep` leaves the clone for a look.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "triton", "nvidia", "sentence_transformers", "transformers")  # none belongs by default
GOAL_BYTES, GOAL_SECONDS = 1.5e9, 300


def tree_bytes(folder: Path, suffix: str = "") -> int:
    """Bytes of the files under `folder` (links not followed), those ending in `suffix` when given."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name.endswith(suffix):
            total += path.stat().st_size
    return total


def timed(command: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone and its caches")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rag-sweep-install-"))
    clone = work / "rag-sweep"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {
        **os.environ,
        "UV_CACHE_DIR": str(work / "uv-cache"),
        "XDG_CACHE_HOME": str(work / "xdg-cache"),
        "RAG_SWEEP_WARM": "0",
    }
    env.pop("VIRTUAL_ENV", None)
    try:
        setup = timed(["bash", "scripts/bootstrap.sh"], clone, env)  # what run_example.sh does first
        sweep = timed(["bash", "scripts/run_example.sh"], clone, env)  # its bootstrap now a no-op
        venv = clone / ".venv"
        site = next((venv / "lib").glob("python3*/site-packages"))
        heavy = sorted(p.name for p in site.iterdir() if p.name.split("-")[0].split(".")[0] in HEAVY)
        size, bytecode = tree_bytes(venv), tree_bytes(venv, ".pyc")
        cache = tree_bytes(work / "uv-cache")
        total = setup + sweep
        print(f"set-up (uv sync, empty cache):  {setup:6.0f} s")
        print(f"example sweep:                  {sweep:6.0f} s")
        print(
            f"run_example.sh, fresh clone:    {total:6.0f} s  (goal <= {GOAL_SECONDS} s: "
            f"{'met' if total <= GOAL_SECONDS else 'not met'})"
        )
        print(
            f"default environment:            {size / 1e9:6.2f} GB, of which {bytecode / 1e9:.2f} GB bytecode "
            f"compiled at install; {(size - bytecode) / 1e9:.2f} GB installed files (goal <= "
            f"{GOAL_BYTES / 1e9} GB: {'met' if size - bytecode <= GOAL_BYTES else 'not met'} without the "
            f"bytecode, {'met' if size <= GOAL_BYTES else 'not met'} with it)"
        )
        print(f"downloaded package cache:       {cache / 1e9:6.2f} GB")
        print(
            f"installed files in GiB:         {(size - bytecode) / 2**30:6.2f} GiB ({size / 2**30:.2f} with bytecode)"
        )
        print(f"load average at the end (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(f"torch, CUDA, triton, transformers in it: {', '.join(heavy) or 'none'}")
        return 0 if not heavy else 1
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
