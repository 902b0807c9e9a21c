"""The record of which sweep files ran on a data dir (rag_assets/orchestration/sweep_records.py), without running one:
gc is refused while a recorded file is not given, naming it (and, when it is gone, the record to delete);
given, its plan gets back the configs its run added; a record gc cannot read is one error naming it."""

from __future__ import annotations

import re

import pytest

from tests.conftest import write_sweep

COMMON = {"name": "shared", "generation": {"model": "extractive"}}
PARA = {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}


def test_every_recorded_sweep_file_must_be_given_and_gets_back_the_configs_its_run_added(
    small_slice, tmp_path
):
    from rag_assets.orchestration.plans import load_plan
    from rag_assets.orchestration.sweep_records import record_sweep, with_recorded_configs
    from rag_core.planning.spec import SpecError

    data = tmp_path / "data"
    sweep = write_sweep(
        tmp_path / "sweep.yaml",
        small_slice,
        chunking=PARA,
        retrieval={"mode": "vector", "top_k": 2},
        **COMMON,
    )
    gate = write_sweep(
        tmp_path / "gate.yaml", small_slice, chunking=PARA, retrieval={"mode": "bm25", "top_k": 2}, **COMMON
    )
    own, baseline = load_plan(sweep), load_plan(sweep).sweep.configs[0]
    gate_plan = load_plan(gate)
    record_sweep(data, own, own.sweep.configs)
    record_sweep(data, load_plan(gate, extra=(baseline,)), gate_plan.sweep.configs)  # as a gate's run
    (written,) = [p for p in (data / "sweep_files").iterdir() if "gate.yaml" in p.read_text()]
    stamp = written.stat().st_mtime_ns
    record_sweep(data, load_plan(gate, extra=(baseline,)), gate_plan.sweep.configs)
    assert written.stat().st_mtime_ns == stamp  # an unchanged rerun writes nothing

    with pytest.raises(
        SpecError, match=rf"also holds the sweep file\(s\) {re.escape(str(gate))} \(sweep shared\): give them"
    ):
        with_recorded_configs(data, [own])
    kept = with_recorded_configs(data, [own, gate_plan])
    assert kept[0] is own and kept[1].sweep.configs == (*gate_plan.sweep.configs, baseline)

    gate.unlink()
    with pytest.raises(
        SpecError,
        match=rf"{re.escape(str(gate))} \(sweep shared; the file is gone: .* or delete {re.escape(str(written))}",
    ):
        with_recorded_configs(data, [own])
    written.write_text("{not json")
    with pytest.raises(SpecError, match=rf"^{re.escape(str(written))}: not a record of a sweep file"):
        with_recorded_configs(data, [own])
