"""Docs that run: every command of the README's and the docs' ```bash blocks is either run by this file as
written (RUN, in the slow tier: a fresh copy of the tree, the README's first command, then the guides' commands
a reader runs next, in order), covered by the named test that runs it or its like (COVERED: servers on fixed
ports, a deployment's hosts filled in with the tests' own), or not run, with the reason (NOT_RUN: a hosted
model's key, the user's own files). A command in none of them fails the fast tier, and so does a mapping
whose command the docs no longer show or whose test is gone. The UI screenshots the docs show are the
browser tests' (tests/docs_images.py), and each exists."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tests.docs_images import DOCS_IMG, SCREENSHOTS

ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))

FIRST_COMMAND = "bash scripts/run_example.sh"
# run in the fresh copy after the first command, as written, in a reader's order: ship a config, gate a
# change against the champion, clean up (a gate's verdict, exit 1 or 3, is an answer, not a failure)
AFTER_FIRST = (
    '.venv/bin/rag-sweep export examples/sweeps/example.yaml --config "para·bm25·k5" --out model/ | tee export.txt',
    ".venv/bin/rag-sweep verify-model model/ --fingerprint \"$(awk '/fingerprint:/ {print $2}' export.txt)\"",
    ".venv/bin/rag-sweep gate examples/sweeps/gate.yaml --against models:/hotpotqa-example@champion "
    "--junit gate.xml --markdown gate.md",
    ".venv/bin/rag-sweep gc examples/sweeps/example.yaml examples/sweeps/gate.yaml",
    ".venv/bin/rag-sweep gc examples/sweeps/example.yaml examples/sweeps/gate.yaml --older-than 7d --apply",
)
FIRST = "tests/test_docs_commands.py::test_the_first_command_runs_the_example_on_a_fresh_copy"
RUN = {FIRST_COMMAND: FIRST} | dict.fromkeys(AFTER_FIRST, FIRST)
COVERED = {
    # the whole suite: what CI runs (.ci/run), never from inside the suite
    "bash scripts/test.sh": ".ci/run",
    "bash scripts/test.sh --fast": (
        "tests/test_extras.py::test_the_fast_tier_command_adds_the_test_tools_and_runs_the_fast_tier"
    ),
    "DAGSTER_HOME=$PWD/.rag_data/dagster_home DAGSTER_GRPC_TIMEOUT_SECONDS=240 .venv/bin/dg dev": "tests/test_ui.py::"
    "test_opening_the_dagster_ui_on_a_finished_sweep_starts_nothing_and_shows_the_leaderboard",
    "LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/mlflow ui --backend-store-uri sqlite:///$PWD/.rag_data/mlflow.db": (
        "tests/test_ui.py::test_mlflow_ui_lists_config_runs_by_label_and_previews_their_questions"
    ),
    # the serve and curl pair: a server on a fixed port, started, asked and stopped by the test
    'PATH=$PWD/.venv/bin:$PATH MLFLOW_TRACKING_URI=sqlite:///$PWD/.rag_data/mlflow.db rag-sweep serve "models:/hotpotqa-example@champion" -p 5001': (
        "tests/test_shipping.py::test_serve_the_champion_export_any_evaluated_config_and_refuse_a_tampered_one"
    ),
    'curl -s 127.0.0.1:5001/invocations -H \'Content-Type: application/json\' -d \'{"dataframe_records": [{"question": "Which magazine was started first, Arthur\'"\'"\'s Magazine or First for Women?"}]}\'': (
        "tests/test_shipping.py::test_serve_the_champion_export_any_evaluated_config_and_refuse_a_tampered_one"
    ),
    # the fleet's workers and a run on them, with the tests' broker and S3 server for the deployment's hosts
    "CELERY_BROKER_URL=amqp://user:password@broker:5672// celery -A rag_sweep.fleet.celery_app worker -Q dagster,gpu -c 1 -n gpu1@%h": (
        "tests/test_fleet.py::test_a_sweep_on_two_workers_gives_the_local_board"
    ),
    "CELERY_BROKER_URL=amqp://user:password@broker:5672// celery -A rag_sweep.fleet.celery_app worker -Q dagster -c 1 -n cpu1@%h": (
        "tests/test_fleet.py::test_a_sweep_on_two_workers_gives_the_local_board"
    ),
    "RAG_EXECUTOR=celery RAG_GPU_QUEUE=gpu CELERY_BROKER_URL=amqp://user:password@broker:5672// RAG_DATA_DIR=s3://bucket/sweeps DAGSTER_HOME=… rag-sweep run sweep.yaml": (
        "tests/test_fleet.py::test_a_sweep_on_two_workers_gives_the_local_board"
    ),
    "uv pip install --python .venv/bin/python ./examples/plugins": (
        "tests/test_plugins_sweep.py::test_the_example_plugins_installed_run_in_a_sweep_and_an_upgrade_recomputes_only_their_work"
    ),
    ".venv/bin/rag-sweep components": (
        "tests/test_plugins_sweep.py::test_the_example_plugins_installed_run_in_a_sweep_and_an_upgrade_recomputes_only_their_work"
    ),
    ".venv/bin/rag-sweep run examples/plugins/sweep.yaml": (
        "tests/test_plugins_sweep.py::test_the_example_plugins_installed_run_in_a_sweep_and_an_upgrade_recomputes_only_their_work"
    ),
    "uv sync --extra local-llm": ".ci/run",  # the test extra holds it
    # the suite's tiers, as the tests page names them: the suite itself
    '.venv/bin/python -m pytest -n 2 -m "not slow and not stack"': ".ci/run",
    '.venv/bin/python -m pytest -n 2 -m "not stack"': ".ci/run",
    "RAG_TEST_SOAK=1 bash scripts/test.sh": ".ci/run",
}
NOT_RUN = {
    # about 70 s more of CI; its plan and data are checked by tests/test_languages.py, its scoring too
    ".venv/bin/rag-sweep run examples/sweeps/multilingual.yaml --data-dir /tmp/xquad_data": (
        "70 s; the example's plan and data: tests/test_languages.py"
    ),
    # the user's own sweep and data: what the guide is about, with every command's behaviour tested on ours
    ".venv/bin/rag-sweep validate my_sweep.yaml": "the user's own sweep file",
    ".venv/bin/rag-sweep plan my_sweep.yaml": "the user's own sweep file",
    ".venv/bin/rag-sweep run my_sweep.yaml --data-dir /data/rag --output results/leaderboard.parquet": (
        "the user's own sweep file and data dir"
    ),
    ".venv/bin/rag-sweep run my_sweep.yaml": "the user's own sweep file",
    "RAG_SWEEP=$PWD/my_sweep.yaml DAGSTER_GRPC_TIMEOUT_SECONDS=240 .venv/bin/dg dev": "the user's own sweep file",
    "export OPENAI_API_KEY=...": "a hosted provider's key",
    ".venv/bin/rag-sweep generate-qa my_docs/ --model openai/gpt-4o-mini --out my_qa.jsonl --questions 100 --types factoid=0.7,multi_hop=0.2,unanswerable=0.1 --dry-run": (
        "the user's documents; the command on the tests' stub: tests/test_qa_generation.py"
    ),
    ".venv/bin/rag-sweep generate-qa my_docs/ --model openai/gpt-4o-mini --out my_qa.jsonl --questions 100": (
        "a hosted model (paid calls); the command on the tests' stub: tests/test_qa_generation.py"
    ),
    # the local model's example: about 11 minutes on two cores; its wrapper and every LLM stage on the
    # server are tested in tests/test_local_llm.py
    ".venv/bin/python -m resources.local_llm -- .venv/bin/rag-sweep run examples/sweeps/local_llm.yaml": (
        "11 minutes on two cores; the wrapper and each LLM stage: tests/test_local_llm.py"
    ),
    "RAG_LLM_API_BASE=http://127.0.0.1:11434/v1 RAG_LLM_API_KEY=ollama RAG_LLM_MAX_CONCURRENCY=1 .venv/bin/rag-sweep run examples/sweeps/local_llm.yaml": (
        "an Ollama server, not installed here"
    ),
    "RAG_LLM_API_BASE=http://127.0.0.1:8000/v1 RAG_LLM_API_KEY=vllm RAG_LLM_MAX_CONCURRENCY=32 .venv/bin/rag-sweep run examples/sweeps/local_llm.yaml": (
        "a vLLM server on a GPU, not here"
    ),
}


def shell_commands(markdown: str) -> list[str]:
    """The commands of a page's ```bash blocks: continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"^([ \t]*)```bash\n(.*?)^\1```", markdown, flags=re.S | re.M):
        for command in block[1].replace("\\\n", " ").splitlines():
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
    listed = "- a list item:\n\n  ```bash\n  run b \\\n    --flag\n  ```\n"  # a block inside a list
    assert shell_commands(listed) == ["run b --flag"]


def test_every_command_of_the_readme_and_the_docs_is_run_covered_or_said_why_not():
    documented = _documented()
    assert {"README.md", "docs/getting-started.md", "docs/guides/ship.md"} <= set(DOC_PAGES)
    mapped = {**RUN, **COVERED, **NOT_RUN}
    assert len(mapped) == len(RUN) + len(COVERED) + len(NOT_RUN), "a command in two of RUN, COVERED, NOT_RUN"
    unmapped = {c: pages for c, pages in documented.items() if c not in mapped}
    assert not unmapped, f"commands no test runs (add them to RUN, COVERED or NOT_RUN): {unmapped}"
    assert not set(mapped) - set(documented), (
        f"mapped commands the docs no longer show: {set(mapped) - set(documented)}"
    )
    gone = {c: t for c, t in {**RUN, **COVERED}.items() if not _test_exists(t)}
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
    the environment, runs the example, and prints what the README's tour says it prints. Then the guides'
    commands a reader runs next (AFTER_FIRST), as written, in the same copy."""
    clone = _tree_copy(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    # a machine that never ran rag-sweep: its own cache dir (the encoder graph built and checked on the
    # default install, as a newcomer's first run does), with uv's package cache kept (no registry here)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    env.update(UV_CACHE_DIR=os.environ.get("UV_CACHE_DIR") or str(cache / "uv"), XDG_CACHE_HOME=str(tmp_path))
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
    checks = [json.loads(p.read_text()) for p in (tmp_path / "rag-sweep/onnx").glob("*/check.json")]
    assert [c["passed"] for c in checks] == [True], checks  # built here, on the default install, and used

    said = {}
    for command in AFTER_FIRST:  # pipefail: a failed export is not hidden by `tee`'s exit
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        verdicts = (0, 1, 3) if " gate " in command else (0,)  # pass, fail, inconclusive
        assert done.returncode in verdicts, (command, done.stdout[-3000:], done.stderr[-3000:])
        said[command] = done.stdout
    export, verify, gate = (said[c] for c in AFTER_FIRST[:3])
    fingerprint = re.search(r"fingerprint: ([0-9a-f]{64})", export).group(1)
    assert f"fingerprint {fingerprint}" in verify
    assert (clone / "gate.xml").is_file() and (clone / "gate.md").is_file(), gate
