"""`rag-sweep gc` on a local data dir: after a sweep and a changed one, it lists and removes exactly what the
changed sweep does not need (the dropped chunking's artifacts, its LanceDB collection and the superseded
leaderboard), nothing a rerun needs (the rerun computes nothing), and the champion still loads and answers."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from tests.conftest import cli, write_sweep

pytestmark = pytest.mark.slow

MODES = {"mode": ["vector", "hybrid"], "top_k": 4, "hybrid_alpha": 0.5, "fusion": "weighted"}
KEPT = {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}
DROPPED = {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40}
ADDED = {"method": "recursive", "chunk_size": 500, "chunk_overlap": 0}


def _files(data) -> set:
    return {p.relative_to(data) for p in data.glob("*/*.parquet") if re.match(r"[0-9a-f]{64}", p.name)}


def test_gc_removes_what_the_changed_sweep_no_longer_needs_and_nothing_else(
    slice_data, tmp_path, monkeypatch
):
    import mlflow

    from rag_sweep.runner import bill, run_sweep
    from resources.shipping.registry import load_champion
    from resources.vector_stores import VectorStores

    data = tmp_path / "data"
    first = write_sweep(
        tmp_path / "a.yaml", slice_data, name="cleaned", chunking=[KEPT, DROPPED], retrieval=MODES
    )
    before = run_sweep(str(first), str(data), progress=False)
    (dropped_index,) = [k for k in before.plan.keys("vector_index") if k.startswith("recursive-300")]
    dropped_collection = before.artifact("vector_index", dropped_index)["collection"][0]
    old_board = before.artifact("leaderboard")
    changed = write_sweep(  # the same file, changed: a sweep is its file
        first, slice_data, name="cleaned", chunking=[KEPT, ADDED], retrieval=MODES
    )
    after = run_sweep(str(changed), str(data), progress=False)
    files_before_gc = _files(data)

    # a dry run lists, deletes nothing
    r = cli("gc", changed, "--data-dir", data, "--older-than", "0")
    assert r.returncode == 0, r.stderr
    assert "nothing was deleted: run again with --apply" in r.stdout
    assert _files(data) == files_before_gc
    # another sweep that ran there must be named: its artifacts are shared by content
    other = write_sweep(tmp_path / "o.yaml", slice_data, name="other", chunking=KEPT, retrieval=MODES)
    other_run = run_sweep(str(other), str(data), progress=False)
    r = cli("gc", changed, "--data-dir", data, "--older-than", "0", "--apply")
    assert r.returncode == 2 and "also holds the sweep(s) other: give their sweep files too" in r.stderr
    assert _files(data) - files_before_gc  # `other` added its leaderboard; nothing was removed
    files_before_gc = _files(data)

    r = cli("gc", changed, other, "--data-dir", data, "--older-than", "0", "--apply")
    assert r.returncode == 0, r.stderr
    removed = files_before_gc - _files(data)
    # exactly the dropped chunking's partitions (chunkset to evaluations) and the first run's leaderboard
    needed = set(after.plan.fingerprints(_inputs(after.plan)).items())
    dropped = {(s, fp) for (s, k), fp in before.plan.fingerprints(_inputs(before.plan)).items()}
    dropped -= {(s, fp) for (s, _), fp in needed} | {(s, fp) for (s, _), fp in _other(other_run)}
    assert {(p.parts[0], p.name[:64]) for p in removed if p.parts[0] != "leaderboard"} == dropped
    assert {s for s, _ in dropped} >= {"chunksets", "embeddings", "vector_index", "answers", "evaluations"}
    assert {p.parts[0] for p in removed} <= {s for s, _ in dropped} | {"leaderboard"}
    assert len(old_board) and any(p.parts[0] == "leaderboard" for p in removed)  # the superseded board
    assert "removed" in r.stdout and "lancedb collection " + dropped_collection in r.stdout
    stores = VectorStores(data_dir=str(data))
    assert not stores.get("lancedb").info(dropped_collection)["exists"]
    for key in after.plan.keys("vector_index"):
        name = after.artifact("vector_index", key)["collection"][0]
        assert stores.get("lancedb").info(name)["exists"], key

    # a second gc finds nothing (the deployment's job, its schedule off); a rerun computes nothing
    from rag_sweep.definitions import build_definitions
    from rag_sweep.runner import local_instance

    defs = build_definitions([after.plan, other_run.plan], data_dir=str(data))
    assert defs.get_schedule_def("storage_cleanup_weekly").default_status.value == "STOPPED"
    result = defs.get_job_def("storage_cleanup").execute_in_process(
        instance=local_instance(data),
        run_config={"ops": {"remove_unneeded_storage": {"config": {"older_than": "0"}}}},
    )
    assert result.success
    (step,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    figures = step.event_specific_data.metadata
    assert figures["artifact_files"].value == 0 and figures["collections"].value == 0
    assert figures["kept_files"].value > 0
    _, bill_after = bill(str(changed), str(data))
    assert all(new == 0 for _, new in bill_after.partitions.values()) and bill_after.texts_to_embed == 0
    # the champion still loads and answers
    monkeypatch.setenv("MLFLOW_TRACKING_URI", after.defs.resources["tracking"].resolved_uri())
    model = load_champion("models:/cleaned@champion", tmp_path / "champion")
    answers = model.predict(pd.DataFrame({"question": ["Who directed Ed Wood?"]}))
    assert len(answers) == 1 and answers["doc_ids"][0] is not None
    assert mlflow.MlflowClient().get_model_version_by_alias("cleaned", "champion")


def _other(run):
    return run.plan.fingerprints(_inputs(run.plan)).items()


def _inputs(plan):
    from rag_core.planning.inputs import snapshot_fingerprints

    return snapshot_fingerprints(plan.sweep)
