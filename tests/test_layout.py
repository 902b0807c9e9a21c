"""The layout (issue 73): the wheel installs the design's packages and the one project package, nothing
generic, and no file still uses the module paths of before the move (scripts/dev/move_layout.py --check: a
merged branch's new `import runner...` fails here until the script is run again)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import ROOT

DESIGN = {
    "rag_core",
    "resources",
    "rag_assets",
    "sensors",
    "rag_sweep",
}  # the design's packages and the project's
NOT_INSTALLED = {"tests", "benchmarks", "examples", "scripts", "docs", "deploy"}


def test_the_wheel_installs_the_designs_packages_only():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert set(build["packages"]) == DESIGN
    assert list(build["force-include"].values()) == ["rag_sweep_legacy_modules.pth"]
    top = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert top - NOT_INSTALLED == DESIGN, "a top-level package outside the wheel's list"


def test_nothing_is_left_to_move():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/dev/move_layout.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, (
        "run scripts/dev/move_layout.py:\n" + done.stdout[-3000:] + done.stderr[-2000:]
    )
