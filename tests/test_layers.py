"""Which parts import which: a deployment (its definitions, sensors and fleet workers) never
imports the CLI's driver (rag_sweep/runner/) or its printing, and what both need stays under rag_sweep/orchestration/."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

DEPLOYMENT = (
    "rag_sweep.definitions",
    "sensors.search",
    "sensors.holdout",
    "sensors.prompt_optimization",
    "sensors.schedules",
    "rag_sweep.fleet.step_jobs",
    "rag_sweep.fleet.celery_app",
)

LOADED = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(*modules: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *modules], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_deployment_never_imports_the_clis_driver():
    loaded = _loaded(*DEPLOYMENT)
    cli = sorted(
        m for m in loaded if m == "runner" or m.startswith(("runner.", "rag_sweep.cli", "rag_sweep.printing"))
    )
    assert cli == [], cli


def test_the_plan_and_the_leaderboards_files_load_without_dagster():
    """What an unchanged rerun reads (rag_sweep/runner/up_to_date.py) before it knows it has nothing to do."""
    loaded = _loaded(
        "rag_sweep.orchestration.plans",
        "rag_assets.board_files",
        "rag_sweep.runner.up_to_date",
        "rag_sweep.cli",
    )
    assert not {m for m in loaded if m.split(".")[0] in ("dagster", "mlflow", "lancedb")}
