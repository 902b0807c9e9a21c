"""`index.ann` as a sweep dimension: its keys and fingerprints, the settings each type takes, and a store
that lacks a type refused in one line before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rag_core.common.fingerprint import fingerprint
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError, load_sweep

BASE = {
    "name": "t",
    "data": {"corpus": "c.parquet", "qa": "q.parquet"},
    "chunking": {"method": "fixed", "chunk_size": 100, "chunk_overlap": 10},
    "index": [{"store": ["lancedb", "qdrant", "chroma"]}, {"store": "lancedb", "bm25_analyzer": "english"}],
    "retrieval": {"mode": ["vector", "hybrid"], "top_k": 3},
}
INPUTS = {"corpus": "c", "qa_set": "q"}


def write(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_exact_indexes_keep_the_keys_and_fingerprints_they_had(tmp_path):
    """Computed on the commit before `index.ann` existed (the same sweep): exact, written or not, changes
    no key, no artifact fingerprint, no sweep fingerprint and no MLflow param. (The evaluations' and the
    whole plan's were computed again when the qa_set, retrievals and evaluations stages' versions moved on,
    2026-12-07, again when the rerankings and answers stages' moved on, and when the evaluations stage's moved
    to 12 (chunk cohesion on 100 chunks; with version 11 this code still gives the values before): their
    code changed, not the index's.)"""
    for index in (BASE["index"], [{**i, "ann": "exact"} for i in BASE["index"]]):
        sweep = load_sweep(write(tmp_path, {**BASE, "index": index}))
        plan = Plan.resolve(sweep)
        fps = plan.fingerprints(INPUTS)
        assert sweep.fingerprint() == "e0fda75455d57d9deb6f2ffd4ed18092985b1ec3813d918332c32941425dbc6b"
        assert fps[("vector_index", "fixed-100-10__all-minilm-l6-v2__lancedb")] == (
            "dc3c217b2a3e50f1083b9014deea0309b26c7869b5db8f3c2a53e3c8a595013a"
        )
        assert fps[("vector_index", "fixed-100-10__all-minilm-l6-v2__chroma")] == (
            "796bddc411270c6cf00a1d211fd1dfa0d988639599b5416622e603de3fc83ed9"
        )
        key = "fixed-100-10__all-minilm-l6-v2__lancedb-english__hybrid-rrf-a0.5-k3__none-k3__extractive"
        assert fps[("evaluations", key)] == "0213c002889f76bd0514216ef5973cf43671d033d3fd73b2fddc991943dcde7d"
        # every stage of every config, and the configs' MLflow params
        assert fingerprint(sorted(fps.items())) == (
            "5cba51ee48d930040e2ed1a6ddaec11725ac029ce85a47236f65258ace6d0bd9"
        )
        assert fingerprint([c.flat_params() for c in plan.configs]) == (
            "9fedceb02bbe648af7539f1d0fca83ec7fbac804b6334f68f6cd6c8fdefc2615"
        )


def test_the_index_type_and_its_settings_make_their_own_index_and_share_what_is_upstream(tmp_path):
    spec = {
        **BASE,
        "index": {
            "store": "lancedb",
            "ann": [
                "exact",
                "ivf_pq",
                {"type": "ivf_hnsw_sq", "m": 8, "ef": 32},
                {"type": "ivf_pq", "nprobes": 5},
                "ivf_sq",
                "ivf_rq",
                {"type": "ivf_rq", "num_bits": 1},
            ],
        },
        "retrieval": {"mode": "vector", "top_k": [3, 5]},
    }
    plan = Plan.resolve(load_sweep(write(tmp_path, spec)))
    assert plan.keys("vector_index") == [
        "fixed-100-10__all-minilm-l6-v2__lancedb",
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_pq-np20",
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_hnsw_sq-m8-efc128-ef32-np20",
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_pq-np5",
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_sq-np20-rf10",  # re-ranked unless told
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_rq-nb4-np20-rf10",  # 4 bits unless told
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_rq-nb1-np20-rf10",
    ]
    assert len(plan.keys("embeddings")) == 1  # one embedding serves every index
    assert len(plan.keys("retrievals")) == 14  # each index searched at both depths: one build each
    fps = plan.fingerprints(INPUTS)
    assert len({fps[("vector_index", k)] for k in plan.keys("vector_index")}) == 7
    approx = next(c for c in plan.configs if c.index.ann.type == "ivf_hnsw_sq")
    assert approx.flat_params()["index.ann"] == (
        '{"ef": 32, "ef_construction": 128, "m": 8, "nprobes": 20, "type": "ivf_hnsw_sq"}'
    )
    # the default written out is the same index as the type's name alone
    same = {**spec, "index": {"store": "lancedb", "ann": {"type": "ivf_pq", "nprobes": 20}}}
    assert Plan.resolve(load_sweep(write(tmp_path, same))).keys("vector_index") == [
        "fixed-100-10__all-minilm-l6-v2__lancedb-ivf_pq-np20"
    ]


@pytest.mark.parametrize(
    ("ann", "message"),
    [
        (
            {"type": "hnsw", "nprobes": 4},
            r"field 'index.ann': Value error, hnsw takes m, ef_construction, ef; not nprobes",
        ),
        (
            "annoy",
            r"field 'index.ann.type': Input should be 'exact', 'ivf_pq', 'ivf_sq', 'ivf_rq', 'ivf_hnsw_sq' or "
            r"'hnsw'",
        ),
        (
            {"type": "ivf_sq", "num_bits": 2},
            r"field 'index.ann': Value error, ivf_sq takes num_partitions, nprobes, refine_factor; not num_bits",
        ),
        (
            {"type": "ivf_rq", "num_bits": 10},
            r"field 'index.ann.num_bits': Input should be less than or equal to 9",
        ),
        ({"type": "hnsw", "m": 1}, r"field 'index.ann.m': Input should be greater than 1"),
    ],
)
def test_settings_an_index_type_does_not_take_are_errors_naming_the_field(tmp_path, ann, message):
    spec = {**BASE, "index": {"store": "chroma", "ann": ann}}
    with pytest.raises(SpecError, match=message) as e:
        load_sweep(write(tmp_path, spec))
    assert "\n" not in str(e.value)


def test_a_store_that_lacks_the_index_type_is_refused_in_one_line_before_any_work(tmp_path):
    spec = {**BASE, "index": [{"store": "lancedb", "ann": "ivf_pq"}, {"store": "qdrant", "ann": "hnsw"}]}
    path = write(tmp_path, spec)
    with pytest.raises(SpecError) as e:
        Plan.resolve(load_sweep(path))
    assert str(e.value) == (
        f"{path}: field 'index.ann': qdrant has no 'hnsw' index (it builds exact); stores that have: "
        "chroma, milvus, weaviate"
    )
    lancedb_hnsw = {**BASE, "index": {"store": "lancedb", "ann": "hnsw"}}
    with pytest.raises(
        SpecError,
        match=r"lancedb has no 'hnsw' index \(it builds exact, ivf_pq, ivf_sq, ivf_rq, ivf_hnsw_sq\)",
    ):
        Plan.resolve(load_sweep(write(tmp_path, lancedb_hnsw)))


def test_the_cli_refuses_it_before_reading_the_data(tmp_path):
    """`validate` and `run` stop on the plan, before the corpus (which does not exist here) is read."""
    from tests.conftest import cli

    path = write(tmp_path, {**BASE, "index": {"store": "qdrant", "ann": {"type": "hnsw", "m": 8}}})
    r = cli("run", path)
    assert r.returncode == 2, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: ") and "field 'index.ann': qdrant has no 'hnsw' index" in first, r.stderr
    assert "Traceback" not in r.stderr


def test_the_example_sweep_plans_five_indexes_over_one_embedding_with_labels_apart():
    from rag_core.planning.labels import short_labels
    from tests.conftest import ROOT

    sweep = load_sweep(ROOT / "examples" / "sweeps" / "ann.yaml")
    plan = Plan.resolve(sweep)
    assert len(plan.keys("embeddings")) == 1 and len(plan.keys("vector_index")) == 5
    labels = short_labels(sweep.configs)
    assert len(set(labels.values())) == len(labels) == 10


def test_a_config_with_an_approximate_index_round_trips_through_its_dump(tmp_path):
    """A shipped model rebuilds its index from the config in its manifest (resources/shipping/pipeline.py): the
    approximate index and its settings come back from the dump; an exact one dumps no `ann` at all."""
    import json

    from rag_core.planning.spec import RagConfig

    spec = {**BASE, "index": {"store": "chroma", "ann": ["exact", {"type": "hnsw", "m": 8}]}}
    configs = load_sweep(write(tmp_path, spec)).configs
    exact, approx = (next(c for c in configs if c.index.ann.type == t) for t in ("exact", "hnsw"))
    assert "ann" not in exact.model_dump()["index"]
    back = RagConfig.model_validate(json.loads(json.dumps(approx.model_dump())))
    assert back == approx and back.index.ann.settings() == {"m": 8, "ef_construction": 128, "ef": 64}


def test_a_keyword_only_config_searches_no_approximate_index_and_keys_none(tmp_path):
    """`bm25` reads no vector: an `index.ann` beside it is left out of its config (and its key), so no index
    is built that nothing searches, and a grid of modes x ann types gives the keyword config once."""
    spec = {**BASE, "index": {"store": "lancedb", "ann": ["exact", "ivf_pq"]}}
    spec["retrieval"] = {"mode": ["vector", "bm25", "hybrid"], "top_k": 3}
    plan = Plan.resolve(load_sweep(write(tmp_path, spec)))
    assert len(plan.config_keys) == 5 and len(set(plan.config_keys)) == 5
    bm25 = [k for k in plan.config_keys if "bm25" in k]
    assert len(bm25) == 1 and "ivf_pq" not in bm25[0]
    alone = {
        **spec,
        "index": {"store": "lancedb", "ann": "ivf_pq"},
        "retrieval": {"mode": "bm25", "top_k": 3},
    }
    sweep = load_sweep(write(tmp_path, alone))
    assert [c.index.ann.approximate for c in sweep.configs] == [False]
    assert [k for k in Plan.resolve(sweep).keys("vector_index") if "ivf_pq" in k] == []
