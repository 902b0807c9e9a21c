"""A team's deployment gets only what it asks for: the code location loads the default sweep (the README's
example; the demos stay in examples/), its nightly schedules stay off until a setting or a person turns them
on, and no sensor targets nothing."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError, load_sweep
from rag_sweep.definitions import build_definitions

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY = {"hotpotqa_example__evaluate_nightly", "hotpotqa_example__evaluate_holdout_nightly"}


@pytest.fixture
def repository(monkeypatch):
    """The code location as `dagster dev` from the repository root loads it (workspace.yaml)."""
    from rag_sweep.definitions import defs

    for name in ("RAG_SWEEP", "RAG_NIGHTLY_STATUS", "RAG_NIGHTLY_CRON"):
        monkeypatch.delenv(name, raising=False)
    return defs().get_repository_def()


def test_the_code_location_loads_the_default_sweep_only(repository):
    assert {key.path[0] for key in repository.asset_graph.get_all_asset_keys()} == {"hotpotqa_example"}


def test_every_schedule_is_off_until_turned_on(repository):
    assert {s.name: s.default_status.value for s in repository.schedule_defs} == {
        **dict.fromkeys(NIGHTLY, "STOPPED"),
        "storage_cleanup_weekly": "STOPPED",
    }


def test_no_sensor_targets_nothing(repository):
    names = {s.name for s in repository.sensor_defs}
    assert "default_automation_condition_sensor" not in names, names
    graph = repository.asset_graph
    for sensor in repository.sensor_defs:
        if isinstance(sensor, dg.AutomationConditionSensorDefinition):
            assert sensor.asset_selection.resolve(graph), sensor.name
    # the input files' cron observation is the project's sensor's to evaluate
    automation = repository.get_sensor_def("rag_automation_sensor")
    assert dg.AssetKey(["hotpotqa_example", "corpus_file"]) in automation.asset_selection.resolve(graph)


def test_one_setting_turns_the_nightly_on(monkeypatch, tmp_path):
    plan = Plan.resolve(load_sweep(ROOT / "examples" / "sweeps" / "example.yaml"))
    monkeypatch.setenv("RAG_NIGHTLY_STATUS", "running")
    defs = build_definitions([plan], str(tmp_path))
    assert {s.name: s.default_status.value for s in defs.schedules} == {
        **dict.fromkeys(NIGHTLY, "RUNNING"),
        "storage_cleanup_weekly": "STOPPED",  # it deletes: never on by a setting
    }
    monkeypatch.setenv("RAG_NIGHTLY_STATUS", "on")
    with pytest.raises(SpecError, match=r"^\$RAG_NIGHTLY_STATUS='on': expected one of stopped, running$"):
        build_definitions([plan], str(tmp_path))
