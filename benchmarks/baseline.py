"""A baseline commit checked out beside this tree, for benchmarks that measure before and after in one run."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worktree(ref: str, where: Path) -> Path:
    """`ref` checked out at `where` (a detached git worktree sharing this checkout's .venv)."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref],
        check=True,
        capture_output=True,
    )
    (where / ".venv").symlink_to(ROOT / ".venv")
    return where


def remove(where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], capture_output=True)
