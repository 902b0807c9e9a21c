"""gc tells sweeps apart by their files, not their names: a gate file shares its sweep's name (and Dagster
prefix) yet evaluates configs of its own, and its baseline (the champion's config) joins its plan. gc given
only the sweep's file refuses, naming the gate's; given both, it keeps what the gate's rerun needs, the
baseline included after the sweep dropped that config, so the rerun computes nothing."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from tests.conftest import write_sweep
from tests.test_plugins import embedder_site, plugin_path  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

COMMON = {
    "name": "gated",
    "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    "embedding": {"model": "hashed_words"},  # no model to load: the test is about files, not scores
    "generation": {"model": "extractive"},
}


def _files(data) -> set:
    return {p.relative_to(data) for p in data.glob("*/*.parquet") if re.match(r"[0-9a-f]{64}", p.name)}


def test_a_gate_file_named_as_its_sweep_is_a_sweep_of_its_own_to_gc(
    plugin_path,  # noqa: F811
    small_slice,
    tmp_path,
    capsys,
    monkeypatch,
):
    from rag_sweep.cli import main
    from rag_sweep.runner import local_instance, run_sweep
    from rag_sweep.runner.gate import run_gate
    from resources.shipping.registry import load_champion

    plugin_path(embedder_site(tmp_path / "plugin"))
    data = tmp_path / "data"
    sweep = write_sweep(
        tmp_path / "sweep.yaml", small_slice, retrieval={"mode": "vector", "top_k": 2}, **COMMON
    )
    gate = write_sweep(tmp_path / "gate.yaml", small_slice, retrieval={"mode": "bm25", "top_k": 2}, **COMMON)
    first = run_sweep(str(sweep), str(data), progress=False)
    gated = run_gate(str(gate), "models:/gated/1", str(data), progress=False)
    assert len(gated.plan.config_keys) == 2  # its candidate and the champion's config (version 1)
    # the sweep moves on: the champion's config is no longer in its file, only in the gate's plan
    write_sweep(sweep, small_slice, retrieval={"mode": "vector", "top_k": 3}, **COMMON)
    after = run_sweep(str(sweep), str(data), progress=False)
    assert not set(gated.plan.config_keys) & set(after.plan.config_keys)
    files = _files(data)

    code = main(["gc", str(sweep), "--data-dir", str(data), "--older-than", "0", "--apply"])
    err = capsys.readouterr().err
    assert code == 2 and f"also holds the sweep file(s) {gate} (sweep gated): give them too" in err, err
    assert _files(data) == files  # refused before anything was deleted

    code = main(["gc", str(sweep), str(gate), "--data-dir", str(data), "--older-than", "0", "--apply"])
    out = capsys.readouterr().out
    assert code == 0 and "removed" in out, out
    assert {p.parts[0] for p in files - _files(data)} <= {"leaderboard"}  # the superseded board at most

    runs = local_instance(data).get_runs_count()
    again = run_gate(str(gate), "models:/gated/1", str(data), progress=False)
    assert again.result == gated.result  # the same verdicts, from the same evaluations
    run_sweep(str(sweep), str(data), progress=False)
    assert local_instance(data).get_runs_count() == runs  # neither rerun computed a step
    monkeypatch.setenv("MLFLOW_TRACKING_URI", first.defs.resources["tracking"].resolved_uri())
    model = load_champion("models:/gated@champion", tmp_path / "champion")
    answers = model.predict(pd.DataFrame({"question": ["Who directed Ed Wood?"]}))
    assert len(answers) == 1 and answers["doc_ids"][0] is not None
