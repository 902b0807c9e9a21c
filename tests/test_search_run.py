"""An adaptive (bayesian) search in a real run: it evaluates max_trials configs of the planned space, each
an ordinary set of partitions, and a rerun with a larger budget resumes without evaluating any twice."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_assets.cli import run_sweep
from tests.conftest import write_sweep

pytestmark = pytest.mark.slow


def _evaluations(instance) -> list[str]:
    records = instance.fetch_materializations(dg.AssetKey(["search", "evaluations"]), limit=1000).records
    return [r.partition_key for r in records]


def test_a_bayesian_search_evaluates_its_budget_and_resumes(slice_data, tmp_path):
    sections = dict(
        name="search",
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
        ],
        retrieval={"mode": ["vector", "bm25", "hybrid"], "top_k": [2, 5]},
    )
    spec = write_sweep(
        tmp_path / "s.yaml", slice_data, search={"strategy": "bayesian", "max_trials": 4}, **sections
    )
    first = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
    assert len(first.plan.config_keys) == 12  # the plan holds the whole space
    assert len(first.search.evaluated) == 4 and first.search.resumed == 0
    assert sorted(first.board["config_key"]) == sorted(first.search.evaluated)
    assert 1 <= first.search.index_builds <= 2
    assert sorted(_evaluations(first.instance)) == sorted(first.search.evaluated)  # only what it chose

    spec = write_sweep(
        tmp_path / "s.yaml", slice_data, search={"strategy": "bayesian", "max_trials": 6}, **sections
    )
    second = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
    assert second.search.resumed == 4 and sorted(second.search.evaluated[:4]) == sorted(
        first.search.evaluated
    )
    assert len(set(second.search.evaluated)) == 6 and second.board.height == 6
    evaluations = _evaluations(second.instance)
    assert len(evaluations) == len(set(evaluations)) == 6  # no config evaluated twice
    assert second.board.filter(second.board["recommended"]).height == 1
