"""The docs site builds strictly (as scripts/test.sh builds it), and a broken link, a broken anchor or a page
left out of the nav fails that build, naming each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _site_copy(tmp_path: Path) -> Path:
    """The files the build reads: mkdocs.yml, docs/ and what its pages include (benchmarks/HISTORY.md)."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks/HISTORY.md", tmp_path / "benchmarks/HISTORY.md")
    return tmp_path


def _build(root: Path) -> subprocess.CompletedProcess:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


@pytest.mark.extra("docs")
def test_the_site_builds_strictly_and_a_broken_link_anchor_or_page_fails_it(tmp_path):
    good = _site_copy(tmp_path / "good")
    built = _build(good)
    assert built.returncode == 0, built.stderr
    assert (good / "site/reference/settings/index.html").is_file()

    bad = _site_copy(tmp_path / "bad")
    page = bad / "docs/guides/gate.md"
    page.write_text(
        page.read_text() + "\n[gone](no-such-page.md) and [no anchor](search.md#no-such-heading)\n"
    )
    (bad / "docs/orphan.md").write_text("# Not in the nav\n")
    broken = _build(bad)
    assert broken.returncode != 0
    assert "no-such-page.md" in broken.stderr
    assert "no-such-heading" in broken.stderr
    assert "orphan.md" in broken.stderr


# exceptions that never reach a user as themselves, and why
INTERNAL = {
    "Pending": "a search loop's signal: a step is still running",
    "PartitionsFailed": "reaches the user as StepFailed, naming the partition",
    "ReflectionFailed": "GEPA skips that proposal and goes on",
    "Unsupported": "the ONNX graph builder's: the embedder falls back to torch or says which extra it needs",
}


def test_the_troubleshooting_page_names_every_error_a_user_can_meet():
    """Each exception class the product defines is on the page (what it means, what to do) or listed above
    as one that never reaches a user: a new error class without either fails here."""
    import ast

    page = (ROOT / "docs/troubleshooting.md").read_text()
    skip = {"tests", "benchmarks", "examples", "scripts", "docs", "site"}
    classes = set()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in skip or rel.parts[0].startswith("."):
            continue
        for node in ast.parse(path.read_text()).body:
            bases = [ast.unparse(b) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and any(b.endswith(("Error", "Exception")) for b in bases):
                classes.add(node.name)
    assert {"SpecError", "DatasetError", "TamperedModel", "Unreachable"} <= classes
    missing = sorted(c for c in classes if f"`{c}`" not in page and c not in INTERNAL)
    assert not missing, f"error classes docs/troubleshooting.md does not explain: {missing}"
