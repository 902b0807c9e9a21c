"""Docs that run: every command of the README's and the getting-started page's ```bash blocks is either run by
this file on the example (RUN, in the slow tier: a fresh copy of the tree, the command as written) or covered by
the named test that runs it (COVERED: the UI commands start servers on fixed ports); a command in neither fails
the fast tier, and so does a mapping whose test is gone. The UI screenshots the docs show are the browser tests'
(tests/docs_images.py), and each exists."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tests.docs_images import DOCS_IMG, SCREENSHOTS

ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = ("README.md", "docs/getting-started.md")

FIRST_COMMAND = "bash scripts/run_example.sh"
RUN = {FIRST_COMMAND: "tests/test_docs_commands.py::test_the_first_command_runs_the_example_on_a_fresh_copy"}
COVERED = {
    # the whole suite: what CI runs (.ci/run), never from inside the suite
    "bash scripts/test.sh": ".ci/run",
    "DAGSTER_HOME=$PWD/.rag_data/dagster_home DAGSTER_GRPC_TIMEOUT_SECONDS=240 .venv/bin/dg dev": "tests/test_ui.py::"
    "test_opening_the_dagster_ui_on_a_finished_sweep_starts_nothing_and_shows_the_leaderboard",
    "LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/mlflow ui --backend-store-uri sqlite:///$PWD/.rag_data/mlflow.db": (
        "tests/test_ui.py::test_mlflow_ui_lists_config_runs_by_label_and_previews_their_questions"
    ),
}


def shell_commands(markdown: str) -> list[str]:
    """The commands of a page's ```bash blocks: continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", markdown, flags=re.S | re.M):
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"(^|\s+)#.*$", "", command).strip()
            if command:
                out.append(" ".join(command.split()))
    return out


def _documented() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for page in DOC_PAGES:
        for command in shell_commands((ROOT / page).read_text()):
            found.setdefault(command, []).append(page)
    return found


def _test_exists(target: str) -> bool:
    path, _, name = target.partition("::")
    source = ROOT / path
    if not source.is_file():
        return False
    if not name:  # a script that runs the command: .ci/run runs the test command
        return "bash scripts/test.sh" in source.read_text()
    tree = ast.parse(source.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def test_the_command_extraction_reads_blocks_continuations_and_comments():
    page = "text\n```bash\n# a comment\nrun a \\\n  --flag   # what it does\n```\n```yaml\nnot: this\n```\n"
    assert shell_commands(page) == ["run a --flag"]


def test_every_command_of_the_readme_and_getting_started_is_run_or_covered_by_a_named_test():
    documented = _documented()
    mapped = {**RUN, **COVERED}
    unmapped = {c: pages for c, pages in documented.items() if c not in mapped}
    assert not unmapped, f"commands no test runs (add them to RUN or COVERED): {unmapped}"
    assert not set(mapped) - set(documented), (
        f"mapped commands the docs no longer show: {set(mapped) - set(documented)}"
    )
    gone = {c: t for c, t in mapped.items() if not _test_exists(t)}
    assert not gone, f"mapped to tests that do not exist: {gone}"


def test_every_image_the_docs_show_is_a_browser_tests_screenshot_and_exists():
    shown = {
        (page, Path(link).name)
        for page in (ROOT / "docs").rglob("*.md")
        for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text())
    }
    assert shown, "the docs show no screenshot"
    for page, name in shown:
        assert name in SCREENSHOTS, f"{page}: {name} is no browser test's screenshot (tests/docs_images.py)"
        assert (DOCS_IMG / name).is_file(), f"{page}: docs/img/{name} is missing"
    for name, target in SCREENSHOTS.items():
        path, _, test = target.partition("::")
        source = (ROOT / path).read_text()
        assert _test_exists(target) and f'"{name}"' in source and "keep_for_docs" in source, (name, target)


def _tree_copy(dest: Path) -> Path:
    """The working tree's files as a clone has them (tracked, and new files git does not ignore)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.mark.slow
def test_the_first_command_runs_the_example_on_a_fresh_copy(tmp_path):
    """The README's first command, as written, in a copy of the tree with no .venv and no data: it sets up
    the environment, runs the example, and prints what the README's tour says it prints."""
    clone = _tree_copy(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    run = subprocess.run(
        ["bash", "-c", FIRST_COMMAND], cwd=clone, env=env, capture_output=True, text=True, timeout=3600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    board = pl.read_csv(clone / ".rag_data/leaderboard.csv")
    assert board.height == 12
    assert "Recommended: " in out and "Recommended: none" not in out
    assert "Holdout (30 of 100 questions)" in out
    assert (
        "Ship report: " in out and (clone / ".rag_data/leaderboards/hotpotqa-example.report.html").is_file()
    )
    assert "Ship the winner (models:/hotpotqa-example@champion" in out
    assert "Dagster UI: " in out and "MLflow UI: " in out
    assert (clone / ".rag_data/dagster_home").is_dir() and (clone / ".rag_data/mlflow.db").is_file()
