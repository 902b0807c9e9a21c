"""The Dagster definitions load, and partitions carry real lineage through their mappings."""

from pathlib import Path

import dagster as dg

from rag_assets.definitions import build_definitions
from rag_core.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]


def _defs(tmp_path):
    return build_definitions(load_sweep(ROOT / "examples" / "sweeps" / "example.yaml"), str(tmp_path))


def test_definitions_load(tmp_path):
    defs = _defs(tmp_path)
    dg.Definitions.validate_loadable(defs)
    keys = {a.key.to_user_string() for a in defs.assets}
    assert keys == {
        "corpus",
        "qa_set",
        "chunksets",
        "embeddings",
        "vector_index",
        "retrievals",
        "rerankings",
        "answers",
        "evaluations",
        "leaderboard",
    }
    assert {s.name for s in defs.sensors} == {"input_change_sensor", "rag_automation_sensor"}
    assert [s.name for s in defs.schedules] == ["nightly_reevaluation"]


def test_workspace_module_loads():
    import importlib

    mod = importlib.import_module("rag_assets.definitions")
    assert isinstance(mod.defs, dg.Definitions)


def _upstream(defs, asset: str, upstream: str, key: str) -> set[str]:
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey(asset))
    up = graph.get(dg.AssetKey(upstream))
    mapping = node.assets_def.get_partition_mapping(dg.AssetKey(upstream))
    result = mapping.get_upstream_mapped_partitions_result_for_partitions(
        node.partitions_def.subset_with_partition_keys([key]), node.partitions_def, up.partitions_def
    )
    return set(result.partitions_subset.get_partition_keys())


def test_each_partition_maps_to_its_real_upstream_partition(tmp_path):
    defs = _defs(tmp_path)
    cfg = "recursive-384-48__all-minilm-l6-v2__hybrid-rrf-a0.5-k5__none-k5__extractive"
    rerank = "recursive-384-48__all-minilm-l6-v2__hybrid-rrf-a0.5-k5__none-k5"
    assert _upstream(defs, "answers", "rerankings", cfg) == {rerank}
    assert _upstream(defs, "rerankings", "retrievals", rerank) == {
        "recursive-384-48__all-minilm-l6-v2__hybrid-rrf-a0.5-k5"
    }
    assert _upstream(defs, "retrievals", "vector_index", "paragraph-1024-0__all-minilm-l6-v2__bm25-k2") == {
        "paragraph-1024-0__all-minilm-l6-v2"
    }
    assert _upstream(defs, "embeddings", "chunksets", "recursive-384-48__all-minilm-l6-v2") == {
        "recursive-384-48"
    }


def test_partition_counts_snapshot(tmp_path):
    graph = _defs(tmp_path).resolve_asset_graph()
    counts = {
        k: len(graph.get(dg.AssetKey(k)).partitions_def.get_partition_keys())
        for k in (
            "chunksets",
            "embeddings",
            "vector_index",
            "retrievals",
            "rerankings",
            "answers",
            "evaluations",
        )
    }
    assert counts == {
        "chunksets": 2,
        "embeddings": 2,
        "vector_index": 2,
        "retrievals": 12,
        "rerankings": 12,
        "answers": 12,
        "evaluations": 12,
    }
