"""Names people read: the CLI's runs are named by what they do in the Dagster UI (`<sweep>__<stage>`, never
`__ephemeral_asset_job__`, which told 9 of the example's first 10 runs apart only by their tags), and what
`rag-sweep run` prints names the configs by the short labels of its table, with the recommendation's
config key once."""

from __future__ import annotations

import contextlib
import io

import polars as pl
import pytest

from tests.conftest import write_sweep

PREFIX = "named_runs"


@pytest.fixture(scope="module")
def ran(slice_data, tmp_path_factory):
    """A two-config sweep with a holdout, run by `rag-sweep run`: (its data dir, what it printed)."""
    from rag_sweep.cli import main

    root = tmp_path_factory.mktemp("names")
    spec = write_sweep(
        root / "named.yaml",
        slice_data,
        name="named-runs",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": ["vector", "bm25"], "top_k": 2},
        decision={"holdout": 0.3},
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(spec), "--data-dir", str(root / "data")]) == 0
    return root / "data", out.getvalue()


def test_every_run_of_a_sweep_names_its_sweep_and_stage(ran):
    from rag_assets.orchestration.plans import load_plan
    from rag_sweep.runner.instance import local_instance
    from rag_sweep.runner.sweep import runner_definitions

    data, _ = ran
    names = [r.job_name for r in local_instance(data).get_runs()]
    assert names and "__ephemeral_asset_job__" not in names, names
    assert all(name.startswith(f"{PREFIX}__") for name in names), names
    plan = load_plan(str(data.parent / "named.yaml"), data_dir=data)
    graph = runner_definitions(plan, str(data)).resolve_asset_graph()
    assets = {key.path[-1] for key in graph.get_all_asset_keys()}
    stages = {name.removeprefix(f"{PREFIX}__") for name in names}
    # each a stage's asset, the holdout's chain, or both input snapshots in one run
    assert stages <= assets | {"holdout", "corpus_and_qa_set"}, stages - assets
    assert {"chunksets", "embeddings", "evaluations", "leaderboard", "holdout", "confirmation"} <= stages


def test_the_recommendation_is_printed_by_its_label_with_its_key_once(ran):
    data, printed = ran
    board = pl.read_parquet(data / "leaderboards" / "named-runs.parquet")
    key = board.filter(pl.col("recommended"))["config_key"][0]
    label = dict(zip(board["config_key"], board["label"], strict=True))[key]
    assert len(key) > 2 * len(label)  # the point: a short label for a long key
    block = printed[printed.index("\nRecommended: ") : printed.index("  Ship report: ")]
    lines = block.strip().splitlines()
    assert lines[0] == f"Recommended: {label} (config {key})"
    assert block.count(key) == 1, block
    (holdout,) = [line for line in lines if line.startswith("  Holdout (")]
    assert f", {label} scores " in holdout
    assert f"\nShip the winner (models:/named-runs@champion, version 1: {label}):\n" in printed
    assert not any(k in printed for k in board["config_key"] if k != key)  # the others by label
