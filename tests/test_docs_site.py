"""The docs site builds strictly (as scripts/test.sh builds it), and a broken link, a broken anchor or a page
left out of the nav fails that build, naming each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
