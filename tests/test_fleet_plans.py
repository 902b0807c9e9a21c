"""The plan a fleet's workers read from the data dir is data, never code (issue 42): JSON from which a
worker resolves the runner's plan, named by the SHA-256 of its bytes and refused when they do not match;
no pickle is ever read from there (a pickle's `__reduce__` would run on every worker), GEPA's saved state
included. No broker needed."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from rag_core.planning.plan import Plan
from rag_core.planning.spec import sweep_from_dict
from rag_sweep.fleet import step_jobs

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "Answer from the context only.\n{context}\n{query}"
BETTER = "Answer in one short phrase, from the context only.\n{context}\n{query}"


def _plan(tmp_path: Path) -> Plan:
    """A plan with everything the environment adds: a holdout, an optimized config, a local model's
    version (a cross-encoder folder) and the deployment's LLM endpoint."""
    reranker = tmp_path / "runner_disk" / "ce"
    reranker.mkdir(parents=True)
    (reranker / "weights.bin").write_bytes(b"weights")
    raw = {
        "name": "fleet-plan",
        "data": {"corpus": "c.jsonl", "qa": "q.jsonl"},
        "chunking": {"method": "paragraph", "chunk_size": 512, "chunk_overlap": 0},
        "retrieval": {"mode": ["bm25", "vector"], "top_k": 2},
        "rerank": [{"method": "none"}, {"method": "cross_encoder", "model": str(reranker)}],
        "generation": {"model": "openai/gpt-4o-mini", "prompt_template": ANSWER},
        "evaluation": {"judge_model": "openai/gpt-4o-mini"},
        "decision": {"holdout": 0.3},
        "optimize": {"reflection_model": "openai/gpt-4o"},
    }
    sweep = sweep_from_dict(raw, tmp_path / "sweep.yaml")
    base = Plan.resolve(sweep).config_keys[0]
    return Plan.resolve(sweep, "lancedb", "http://llm.internal:8000/v1", {base: {"answer_prompt": BETTER}})


def _same(a: Plan, b: Plan) -> None:
    assert b == a
    assert b.config_keys == a.config_keys and b.optimized_from == a.optimized_from
    for mine, theirs in ((a.partitions, b.partitions), (a.holdout_partitions, b.holdout_partitions)):
        assert {s: list(by_key) for s, by_key in theirs.items()} == {s: list(k) for s, k in mine.items()}
        assert all(theirs[s][k].own == p.own for s, by_key in mine.items() for k, p in by_key.items())
    inputs = {"corpus": "c" * 64, "qa_set": "q" * 64}
    assert b.fingerprints(inputs) == a.fingerprints(inputs)


def test_the_plan_a_worker_reads_is_json_and_resolves_to_the_runners_plan(tmp_path):
    plan = _plan(tmp_path)
    assert plan.holdout and plan.optimized_from and plan.model_versions  # what the test is about
    data = tmp_path / "data"
    name = step_jobs.publish_plan(plan, str(data))
    (written,) = (data / "fleet" / "plans").iterdir()
    blob = written.read_bytes()
    assert written.name == f"{name}.json" and name == hashlib.sha256(blob).hexdigest()
    assert not blob.startswith(b"\x80")  # no pickle (every pickle protocol >= 2 starts so)
    doc = json.loads(blob)
    assert doc["sweep"]["name"] == "fleet-plan" and doc["llm_api_base"] == "http://llm.internal:8000/v1"
    assert step_jobs.publish_plan(plan, str(data)) == name  # the same plan, the same file
    # the worker has none of the runner's disk: the local model's version comes from the file
    shutil.rmtree(tmp_path / "runner_disk")
    read = step_jobs.read_plan(str(data), name)
    _same(plan, read)
    # in the same order: the overall score sums the weights in it (sorted, exact ties moved a last bit)
    assert list(read.sweep.weights) == list(plan.sweep.weights) != sorted(plan.sweep.weights)


def test_a_plan_file_whose_content_is_not_its_name_is_refused(tmp_path):
    plan = _plan(tmp_path)
    data = tmp_path / "data"
    name = step_jobs.publish_plan(plan, str(data))
    (written,) = (data / "fleet" / "plans").iterdir()
    # another valid plan (every config on the holdout split's questions too) under this plan's name
    other = Plan.resolve(plan.sweep.model_copy(update={"name": "other"}))
    other_dir = tmp_path / "other"
    step_jobs.publish_plan(other, str(other_dir))
    (swapped,) = (other_dir / "fleet" / "plans").iterdir()
    written.write_bytes(swapped.read_bytes())
    with pytest.raises(Exception, match=r"refused: its content is not the plan the runner published") as e:
        step_jobs.read_plan(str(data), name)
    assert str(written) in str(e.value)
    with pytest.raises(Exception, match="names no published plan"):
        step_jobs.read_plan(str(data), "../../" + name)


class _CreatesAFile:
    """What issue 42 showed: a pickle whose `__reduce__` creates a file when it is loaded."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_pickle_at_the_old_plan_path_is_never_loaded(tmp_path):
    data = tmp_path / "data"
    marker = tmp_path / "pwned"
    blob = pickle.dumps(_CreatesAFile(marker))
    plans = data / "fleet" / "plans"
    plans.mkdir(parents=True)
    # named as its content's hash, as a plan is
    for name in (hashlib.sha256(blob).hexdigest(), hashlib.sha256(blob).hexdigest()[:24]):
        (plans / f"{name}.pkl").write_bytes(blob)
        with pytest.raises(Exception):  # noqa: B017 (no plan by that name: refused, whatever the wording)
            step_jobs.step_job(str(data), name, "embeddings")
        assert not marker.exists()
    # a published plan's name with a pickle beside it: the worker reads the plan, never the pickle
    name = step_jobs.publish_plan(_plan(tmp_path), str(data))
    (plans / f"{name}.pkl").write_bytes(blob)
    step_jobs.step_job(str(data), name, "embeddings")
    assert not marker.exists()


def test_gepa_state_a_data_dir_holds_is_never_loaded(tmp_path, monkeypatch):
    """GEPA saves its state as a pickle and loads it to resume: it lives in this user's private cache dir,
    never under the data dir (whose old `gepa_state/<fp>/` is not read)."""
    from gepa.core.state import GEPAState

    from rag_assets.prompt_optimization import _gepa_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    data, fp, marker = tmp_path / "data", "f" * 64, tmp_path / "pwned"
    (data / "gepa_state" / fp).mkdir(parents=True)
    (data / "gepa_state" / fp / "gepa_state.bin").write_bytes(pickle.dumps(_CreatesAFile(marker)))
    run_dir = Path(_gepa_dir(str(data), fp))
    assert not run_dir.is_relative_to(data)
    assert (run_dir.parent.parent.stat().st_mode & 0o777) == 0o700  # no other user writes a state there
    if os.path.exists(os.path.join(run_dir, "gepa_state.bin")):  # what gepa's initialize_gepa_state asks
        GEPAState.load(str(run_dir))
    assert not marker.exists()
    assert _gepa_dir(str(data), fp) == str(run_dir) != _gepa_dir(str(tmp_path / "other"), fp)  # resumable


def test_a_worker_builds_both_chains_from_the_published_plan(tmp_path):
    """The holdout's chain and an adaptive search's chain run on the fleet as jobs a worker rebuilds from the
    published plan (what `rag-sweep run` sends with RAG_EXECUTOR=celery): every stage an op, in order, on
    the Celery executor."""
    data = tmp_path / "data"
    plan = _plan(tmp_path)
    name = step_jobs.publish_plan(plan, str(data))
    for stage, job, stages in (
        ("holdout", f"{plan.prefix}__holdout", list(plan.holdout_partitions)),
        ("chain", f"{plan.prefix}__search_chain", list(plan.partitions)),
    ):
        built = step_jobs.step_job(str(data), name, stage)
        assert built.name == job
        prefix = f"{plan.prefix}__holdout_chain_" if stage == "holdout" else f"{job}_"
        assert [n.name for n in built.graph.nodes_in_topological_order] == [prefix + s for s in stages]
        assert built.executor_def.name == "celery"
