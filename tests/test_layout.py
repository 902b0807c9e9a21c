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


def test_a_command_is_one_module_and_one_entry_of_the_tuple():
    """What the layout page counts for a new command: its module in rag_sweep/commands/ with `add_parser`,
    and that module in `COMMANDS`; every module there with a parser is listed, and none twice."""
    import importlib

    from rag_sweep.cli import COMMANDS, build_parser, subcommands

    folder = ROOT / "rag_sweep" / "commands"
    with_parser = {
        f"rag_sweep.commands.{p.stem}"
        for p in folder.glob("*.py")
        if hasattr(importlib.import_module(f"rag_sweep.commands.{p.stem}"), "add_parser")
    }
    listed = [m.__name__ for m in COMMANDS]
    assert sorted(listed) == sorted(with_parser) and len(set(listed)) == len(listed)
    assert len(subcommands(build_parser())) >= len(COMMANDS)  # models: three commands


def test_a_plugin_is_one_module_and_one_entry_point():
    """The example plug-in package: each entry point names a module of its own, and each module is some
    entry point's (the layout page's count for a plug-in of any kind)."""
    pyproject = tomllib.loads((ROOT / "examples" / "plugins" / "pyproject.toml").read_text())
    targets = [
        value.split(":")[0]
        for group in pyproject["project"]["entry-points"].values()
        for value in group.values()
    ]
    package = ROOT / "examples" / "plugins" / "src" / "rag_sweep_example_plugins"
    modules = {f"rag_sweep_example_plugins.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    assert len(targets) == len(set(targets)) and set(targets) == modules
