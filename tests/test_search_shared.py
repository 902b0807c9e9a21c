"""A search on a data dir another sweep already worked in: the content-addressed artifacts that sweep made
are the search's too, but its Dagster asset partitions (`<sweep>/<stage>`) hold no materialization of them
until the search records one. (A halving search counted another sweep's chunkset as done and failed at its
first step that read it: "chunksets[...] is not materialized yet".)"""

from __future__ import annotations

import dagster as dg
import pytest

from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep

pytestmark = pytest.mark.slow
CHUNKING = {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}


def test_a_halving_search_reuses_what_another_sweep_materialized(slice_data, tmp_path):
    grid = write_sweep(
        tmp_path / "a.yaml",
        slice_data,
        name="grid",
        chunking=CHUNKING,
        retrieval={"mode": "bm25", "top_k": 3},
    )
    halving = write_sweep(
        tmp_path / "b.yaml",
        slice_data,
        name="halving",
        chunking=CHUNKING,
        retrieval={"mode": "bm25", "top_k": [2, 3]},
        search={"strategy": "halving", "start_questions": 10, "growth": 2},
    )
    data = str(tmp_path / "data")
    first = run_sweep(str(grid), data, progress=False)
    second = run_sweep(str(halving), data, progress=False)
    assert first.board.height == 1
    assert second.search.stopped_by == "halving" and set(second.search.evaluated) == set(
        second.plan.config_keys
    )
    assert (second.board["n_queries"] == 20).all()
    # the grid's chunkset is reused, and recorded as the halving sweep's own partition (not rebuilt)
    (chunkset,) = second.plan.keys("chunksets")
    records = second.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(["halving", "chunksets"]), asset_partitions=[chunkset]),
        limit=10,
    ).records
    assert records and all(r.asset_materialization.metadata["reused"].value for r in records)
