"""Two sweeps in one deployment: their assets live side by side under their own prefixes, share one
instance and one data dir, and share content-addressed work (the same chunkset is built once)."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_sweep.definitions import build_definitions
from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep

pytestmark = pytest.mark.slow
CHUNKING = {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}


def test_two_sweeps_materialize_side_by_side(slice_data, tmp_path):
    a = write_sweep(
        tmp_path / "a.yaml",
        slice_data,
        name="alpha",
        chunking=CHUNKING,
        retrieval={"mode": "bm25", "top_k": 3},
    )
    b = write_sweep(
        tmp_path / "b.yaml",
        slice_data,
        name="beta",
        chunking=CHUNKING,
        retrieval={"mode": ["vector", "hybrid"], "top_k": 3},
    )
    data = tmp_path / "data"
    first = run_sweep(str(a), str(data), progress=False)
    second = run_sweep(str(b), str(data), progress=False)
    assert first.board.height == 1 and second.board.height == 2
    defs = build_definitions([first.plan, second.plan], str(data))
    dg.Definitions.validate_loadable(defs)
    instance = second.instance
    for prefix in ("alpha", "beta"):
        assert instance.fetch_materializations(dg.AssetKey([prefix, "leaderboard"]), limit=1).records
    # the same chunkset and embeddings: built by the first sweep, reused by the second
    (chunkset,) = second.plan.keys("chunksets")
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(["beta", "chunksets"]), asset_partitions=[chunkset]),
        limit=1,
    ).records[0]
    assert record.asset_materialization.metadata["reused"].value is True
    emb = instance.fetch_materializations(dg.AssetKey(["beta", "embeddings"]), limit=1).records[0]
    assert emb.asset_materialization.metadata["embedding_calls"].value == 0
    # one deployment runs either sweep: re-materialize alpha's leaderboard through the combined definitions
    result = dg.materialize(
        [*defs.assets],
        selection=[dg.AssetKey(["alpha", "leaderboard"])],
        instance=instance,
        resources=defs.resources,
    )
    assert result.success
