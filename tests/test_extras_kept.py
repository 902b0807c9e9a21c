"""Extras are added, not replaced: installing one as the refusal says (`uv sync --inexact --extra X`) adds
it, and neither README command (scripts/run_example.sh, scripts/test.sh) uninstalls it on a rerun. Checked
with what the scripts really run (a stand-in uv records it) and uv's own --dry-run on this environment,
which changes nothing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rag_core.common.extras import install_hint

ROOT = Path(__file__).resolve().parents[1]
README_COMMANDS = ("scripts/run_example.sh", "scripts/test.sh")


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed here")
    return uv


def _bootstrap_syncs(tmp_path: Path) -> dict[str, list[str]]:
    """README command -> the arguments of the `uv sync` its bootstrap runs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "uv").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$UV_ARGS"\n')
    (bindir / "uv").chmod(0o755)
    syncs = {}
    for script in README_COMMANDS:
        (call,) = re.findall(r"^bash scripts/bootstrap\.sh.*$", (ROOT / script).read_text(), re.M)
        record = tmp_path / f"{Path(script).stem}.args"
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "UV_ARGS": str(record)}
        subprocess.run(["bash", "-c", call], cwd=ROOT, env=env, check=True, capture_output=True)
        syncs[script] = record.read_text().splitlines()
    return syncs


def _removed(args: list[str]) -> set[str]:
    """The packages `uv <args> --dry-run` would uninstall from this environment without installing again
    (another version or build of a package replaces it: not a removal)."""
    out = subprocess.run(
        [_uv(), *(a for a in args if a != "--quiet"), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # another uv command on this environment holds its lock meanwhile
        check=True,
    )
    lines = (out.stdout + out.stderr).splitlines()
    gone = {m[1] for line in lines if (m := re.match(r"^ - ([A-Za-z0-9_.-]+)==", line))}
    # "+ name==version", or "+ name @ file:///…" for the project rebuilt after its pyproject.toml changed
    back = {m[1] for line in lines if (m := re.match(r"^ \+ ([A-Za-z0-9_.-]+)(?:==| @ )", line))}
    return gone - back


def test_both_readme_commands_keep_every_installed_extra(tmp_path):
    syncs = _bootstrap_syncs(tmp_path)
    assert syncs["scripts/test.sh"][-2:] == ["--extra", "test"]
    for script, args in syncs.items():
        assert args[0] == "sync" and "--frozen" in args and "--inexact" in args, (script, args)
        assert not _removed(args), f"{script} would uninstall {sorted(_removed(args))}"


def test_the_refusals_install_command_adds_the_extra():
    hint = install_hint("qdrant")
    (command,) = re.findall(r"in a checkout: (uv sync [^)]*)\)", hint)
    args = command.split()[1:]
    assert args == ["sync", "--inexact", "--extra", "qdrant"]
    # --frozen: uv.lock as it is, offline, whatever is being edited beside this test
    assert not _removed([*args, "--frozen"])


def test_every_uv_sync_the_docs_give_with_an_extra_adds_it():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    told = [(p.name, c) for p in pages for c in re.findall(r"`(uv sync[^`]*)`", p.read_text(), re.S)]
    with_extra = [(page, c) for page, c in told if "--extra" in c]
    assert with_extra and all("--inexact" in c for _, c in with_extra), with_extra
