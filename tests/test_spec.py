from pathlib import Path

import pytest
import yaml

from rag_core.common.fingerprint import fingerprint
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError, load_sweep

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "name": "t",
    "data": {"corpus": "c.parquet", "qa": "q.parquet"},
    "chunking": {"method": ["fixed", "sentence"], "chunk_size": [100, 200], "chunk_overlap": 10},
    "retrieval": {"mode": ["vector", "bm25", "hybrid"], "top_k": [3, 5], "hybrid_alpha": [0.3, 0.7]},
}


def write(tmp_path, spec, name="s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(spec))
    return p


def test_example_sweep_expands_to_twelve_configs():
    sweep = load_sweep(ROOT / "examples" / "sweeps" / "example.yaml")
    assert len(sweep.configs) == 12
    plan = Plan.resolve(sweep)
    assert plan.keys("chunksets") == ["paragraph-1024-0", "recursive-384-48"]
    assert len(plan.keys("vector_index")) == 2
    assert sweep.corpus_path.exists() and sweep.qa_path.exists()


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_sweep_loads_and_resolves_its_plan(path):
    sweep = load_sweep(path)
    assert Plan.resolve(sweep).config_keys
    assert sweep.corpus_path.exists() and sweep.qa_path.exists()


def test_the_local_models_example_optimizes_one_of_its_configs_within_its_smallest_budget():
    from rag_core.decision.holdout import holdout_size
    from rag_core.planning.spec import check_optimize_budget

    sweep = load_sweep(ROOT / "examples" / "sweeps" / "local_llm.yaml")
    assert set(sweep.optimize.configs) <= set(Plan.resolve(sweep).config_keys)
    selection = sweep.max_queries - holdout_size(sweep.max_queries, sweep.decision.holdout)
    check_optimize_budget(sweep, selection)  # refuses a budget below the smallest
    assert sweep.optimize.budget.max_metric_calls == sweep.optimize.min_metric_calls(selection)


def test_irrelevant_settings_do_not_multiply_configs(tmp_path):
    sweep = load_sweep(write(tmp_path, BASE))
    # 4 chunkings x (vector 2 + bm25 2 + hybrid 2 alphas x 2 k = 8) retrievals
    assert len(sweep.configs) == 4 * 8
    keys = Plan.resolve(sweep).config_keys
    assert "fixed-100-10__all-minilm-l6-v2__lancedb__hybrid-rrf-a0.3-k3__none-k3__extractive" in keys


def test_list_of_mappings_pairs_settings(tmp_path):
    spec = dict(
        BASE,
        chunking=[
            {"method": "fixed", "chunk_size": 100, "chunk_overlap": 0},
            {"method": "sentence", "chunk_size": 300, "chunk_overlap": 20},
        ],
    )
    plan = Plan.resolve(load_sweep(write(tmp_path, spec)))
    assert plan.keys("chunksets") == ["fixed-100-0", "sentence-300-20"]


def test_fingerprint_independent_of_yaml_key_order(tmp_path):
    a = load_sweep(write(tmp_path, BASE, "a.yaml"))
    reordered = {k: BASE[k] for k in reversed(list(BASE))}
    reordered["retrieval"] = {k: BASE["retrieval"][k] for k in reversed(list(BASE["retrieval"]))}
    b = load_sweep(write(tmp_path, reordered, "b.yaml"))
    assert a.fingerprint() == b.fingerprint()
    assert fingerprint({"x": 1, "y": [1, 2]}) == fingerprint({"y": [1, 2], "x": 1})
    assert fingerprint({"x": 1}) != fingerprint({"x": 2})


def test_fingerprint_is_stable_across_processes():
    # a literal: if this changes, every cached artifact is invalidated, so it must change on purpose only
    assert (
        fingerprint("chunkset", {"a": 1})
        == "fe3d7a10ef45c2d1e118d0390bdc3a0b058a59bcf3f49c141b711524891f8664"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rag_core.common.fingerprint import fingerprint; print(fingerprint('chunkset', {'b': 2, 'a': 1}))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.strip()
    assert out == fingerprint("chunkset", {"a": 1, "b": 2})


def test_random_search_is_seeded(tmp_path):
    spec = dict(BASE, search={"strategy": "random", "budget": {"max_configs": 5}, "seed": 7})
    a = Plan.resolve(load_sweep(write(tmp_path, spec, "a.yaml"))).config_keys
    b = Plan.resolve(load_sweep(write(tmp_path, spec, "b.yaml"))).config_keys
    assert a == b and len(a) == 5


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"chunking": {"method": "bogus", "chunk_size": 100, "chunk_overlap": 0}}, "chunking.method"),
        ({"chunking": {"method": "fixed", "chunk_size": 100, "chunk_overlap": 100}}, "chunking"),
        ({"chunking": {"method": "fixed", "chunk_size": -1, "chunk_overlap": 0}}, "chunking.chunk_size"),
        ({"retrieval": {"mode": "vector", "top_k": 5, "hybrid_alpha": 1.5}}, "retrieval.hybrid_alpha"),
        ({"retrieval": {"mode": "vector", "top_k": 5, "fusion": "max"}}, "retrieval.fusion"),
        ({"retrieval": {"mode": "vector", "top_k": 5, "colour": "red"}}, "retrieval.colour"),
        (
            {"generation": {"model": "gpt-4o-mini", "prompt_template": "no placeholders"}},
            "generation.prompt_template",
        ),
        ({"weights": {"accuracy": 1.0}}, "weights"),
        ({"search": {"strategy": "bayes"}}, "search.strategy"),
        ({"data": {"corpus": "c.parquet"}}, "data.qa"),
    ],
)
def test_validation_errors_name_file_and_field(tmp_path, patch, field):
    p = write(tmp_path, {**BASE, **patch})
    with pytest.raises(SpecError) as e:
        load_sweep(p)
    assert str(p) in str(e.value)
    assert f"'{field}" in str(e.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        load_sweep(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_sweep(bad)


def test_colliding_partition_keys_are_rejected(tmp_path):
    spec = dict(BASE, embedding={"model": ["org-a/model-x", "org-b/model-x"]})
    with pytest.raises(SpecError, match="partition key"):
        Plan.resolve(load_sweep(write(tmp_path, spec)))


@pytest.mark.parametrize(
    "patch,field,message",
    [
        ({"weights": {"recall_at_k": float("nan")}}, "weights", "finite"),
        ({"weights": {"recall_at_k": 1.0, "token_f1": float("inf")}}, "weights", "finite"),
        ({"retrieval": []}, "retrieval", "empty list"),
        ({"retrieval": {"mode": [], "top_k": 3}}, "retrieval.mode", "empty list"),
        ({"chunking": []}, "chunking", "empty list"),
        ({"retrieval": {"mode": "vector", "top_k": True}}, "retrieval.top_k", "integer"),
        (
            {"chunking": {"method": "fixed", "chunk_size": "512", "chunk_overlap": 0}},
            "chunking.chunk_size",
            "integer",
        ),
        (
            {"retrieval": {"mode": "vector", "top_k": 10}, "rerank": {"method": "mmr", "candidates": 2}},
            "rerank.candidates",
            "cannot fill top_k",
        ),
        ({"weights": {"faithfulness_judge": 1.0}}, "weights.faithfulness_judge", "judge_model"),
    ],
)
def test_bad_values_are_errors_on_load_naming_the_field(tmp_path, patch, field, message):
    """Values that used to pass and give a silent wrong result (nan scores, 0 configs, coerced ints)."""
    p = write(tmp_path, {**BASE, **patch})
    with pytest.raises(SpecError) as e:
        load_sweep(p)
    assert str(p) in str(e.value) and f"'{field}" in str(e.value) and message in str(e.value), str(e.value)


def test_a_duplicated_yaml_key_is_an_error_naming_the_line(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text(
        "name: dup\ndata: {corpus: c.parquet, qa: q.parquet}\nchunking: {method: fixed, chunk_size: 100, "
        "chunk_overlap: 0}\nretrieval:\n  mode: vector\n  top_k: 3\n  top_k: 5\n"
    )
    with pytest.raises(SpecError, match=r"(?s)duplicate key 'top_k' \(first on line 6\).*line 7"):
        load_sweep(p)


def test_bm25_analyzer_is_a_setting_recorded_in_the_config(tmp_path):
    spec = dict(BASE, index={"store": "lancedb", "bm25_analyzer": ["plain", "english"]})
    plan = Plan.resolve(load_sweep(write(tmp_path, spec)))
    assert plan.keys("vector_index")[:2] == [
        "fixed-100-10__all-minilm-l6-v2__lancedb",
        "fixed-100-10__all-minilm-l6-v2__lancedb-english",
    ]
    assert {c.flat_params()["index.bm25_analyzer"] for c in plan.configs} == {"plain", "english"}
    bad = write(tmp_path, dict(BASE, index={"store": "chroma", "bm25_analyzer": "english"}), "bad.yaml")
    with pytest.raises(SpecError, match="field 'index.bm25_analyzer': chroma cannot apply 'english'"):
        Plan.resolve(load_sweep(bad))


def _index_own(plan) -> dict:
    return {k.split("__")[-1]: p.own for k, p in plan.partitions["vector_index"].items()}


def test_keyword_configs_follow_the_qa_sets_language(tmp_path):
    """data.language ja: a config that searches keywords gets the japanese analyzer, with the segmenter's
    version in its index's fingerprint; a vector-only config keeps plain and its index as before."""
    from rag_core.metrics.languages import segmenter

    spec = dict(BASE, data={**BASE["data"], "language": "ja"})
    sweep = load_sweep(write(tmp_path, spec))
    by_mode = {(c.retrieval.mode, c.index.bm25_analyzer) for c in sweep.configs}
    assert by_mode == {("vector", "plain"), ("bm25", "japanese"), ("hybrid", "japanese")}
    own = _index_own(Plan.resolve(sweep))
    assert own["lancedb"] == {"store": "lancedb", "bm25_analyzer": "plain"}
    assert own["lancedb-japanese"] == {
        "store": "lancedb",
        "bm25_analyzer": "japanese",
        "segmenter": f"{segmenter('ja')}; NFKC, lowercase, runs of letters, digits and marks",
    }
    # zh and th likewise; any other language (English too) keeps plain
    for language, analyzer in [("zh-TW", "chinese"), ("th", "thai"), ("en", "plain"), ("ko", "plain")]:
        spec = dict(BASE, data={**BASE["data"], "language": language})
        sweep = load_sweep(write(tmp_path, spec, f"{language}.yaml"))
        assert {c.index.bm25_analyzer for c in sweep.configs if c.retrieval.mode == "bm25"} == {analyzer}
    # a named analyzer wins, for every config
    spec = dict(BASE, data={**BASE["data"], "language": "ja"}, index={"bm25_analyzer": ["plain", "japanese"]})
    sweep = load_sweep(write(tmp_path, spec, "named.yaml"))
    assert {(c.retrieval.mode, c.index.bm25_analyzer) for c in sweep.configs} == {
        (m, a) for m in ("vector", "bm25", "hybrid") for a in ("plain", "japanese")
    }


def test_plain_and_english_indexes_add_nothing_to_their_settings(tmp_path):
    """Their index keys and settings are exactly as before the language analyzers (so are the fingerprints
    and collections built on them), whatever data.language says."""
    for language in (None, "en", "ja", "auto"):
        data = {**BASE["data"], **({"language": language} if language else {})}
        named = ["plain", "english"]
        spec = dict(BASE, data=data, index={"store": "lancedb", "bm25_analyzer": named})
        if language == "ja":  # english cannot go with ja (below): plain only
            spec["index"] = {"store": "lancedb", "bm25_analyzer": "plain"}
            named = ["plain"]
        own = _index_own(Plan.resolve(load_sweep(write(tmp_path, spec, f"{language}.yaml"))))
        expected = {
            "lancedb": {"store": "lancedb", "bm25_analyzer": "plain"},
            "lancedb-english": {"store": "lancedb", "bm25_analyzer": "english"},
        }
        assert own == {k: v for k, v in expected.items() if v["bm25_analyzer"] in named}


@pytest.mark.parametrize(
    "language, analyzer, message",
    [
        ("ja", "thai", "'thai' segments th text but data.language is ja; leave it unset"),
        ("ja", "english", "'english' stems English words and cannot segment ja text"),
        ("de", "chinese", r"'chinese' segments zh text but data.language is de; name plain \(de has no"),
        ("ja", "korean", "field 'index.bm25_analyzer': Input should be 'plain', 'english', 'chinese'"),
    ],
)
def test_an_analyzer_for_another_language_is_refused(tmp_path, language, analyzer, message):
    spec = dict(BASE, data={**BASE["data"], "language": language}, index={"bm25_analyzer": analyzer})
    path = write(tmp_path, spec)
    with pytest.raises(SpecError, match=message) as e:
        load_sweep(path)
    assert str(e.value).startswith(f"{path}: ") and "index.bm25_analyzer" in str(e.value)


def test_a_store_without_the_languages_analyzer_is_refused_by_name(tmp_path, monkeypatch):
    """No language (or auto): any analyzer may be named. A store that cannot apply the one a config follows
    is refused, naming the stores that can and how to keep plain."""
    from rag_core.components.stores import STORES, Store

    spec = dict(BASE, data={**BASE["data"], "language": "auto"}, index={"bm25_analyzer": "thai"})
    assert {c.index.bm25_analyzer for c in load_sweep(write(tmp_path, spec)).configs} == {"thai"}
    STORES.names()  # the built-ins registered
    monkeypatch.setitem(
        STORES._builtins, "plainonly", Store("plainonly", "test", ("plain",), "local", object)
    )
    spec = dict(BASE, data={**BASE["data"], "language": "th"}, index={"store": "plainonly"})
    with pytest.raises(
        SpecError, match="plainonly cannot apply 'thai'.*name plain to keep it.*lancedb, qdrant"
    ):
        Plan.resolve(load_sweep(write(tmp_path, spec, "th.yaml")))
    spec["index"] = {"store": "plainonly", "bm25_analyzer": "plain"}
    Plan.resolve(load_sweep(write(tmp_path, spec, "plain.yaml")))


def test_the_unsegmented_warning_fires_only_where_the_index_does_not_segment(tmp_path, capsys):
    """`rag-sweep validate` and the retrievals warn of questions written without spaces between words
    only for keyword configs whose analyzer reads them as one word (plain, english)."""
    from types import SimpleNamespace

    import polars as pl

    from rag_assets.retrievals import Retrievals
    from rag_sweep.printing import _warn_unsegmented

    corpus = pl.DataFrame({"text": ["東京大学は日本の国立大学です。"]})
    qa = pl.DataFrame({"question": ["東京大学はどこですか"]})
    frame = pl.DataFrame(
        {"latency_ms": [1.0], "chunk_ids": [["c0"]], "transform_fallback": [False]},
    )
    data = {**BASE["data"], "language": "ja"}
    for analyzer, warned in [(None, False), ("plain", True)]:
        index = {"bm25_analyzer": analyzer} if analyzer else {}
        spec = dict(BASE, data=data, index=index)
        plan = Plan.resolve(load_sweep(write(tmp_path, spec, f"{analyzer}.yaml")))
        _warn_unsegmented(plan, corpus, qa)
        assert ("without spaces between words" in capsys.readouterr().err) is warned
        c = next(c for c in plan.configs if c.retrieval.mode == "bm25")
        log = []
        run = SimpleNamespace(
            config=c,
            read=lambda name: qa,
            context=SimpleNamespace(log=SimpleNamespace(warning=log.append)),
            partition=SimpleNamespace(own={}),
        )
        meta = Retrievals().report(run, frame, reused=False)
        assert meta["unsegmented_question_share"] == 1.0 and bool(log) is warned


def test_the_llm_endpoint_is_in_the_fingerprint_of_what_calls_an_llm(tmp_path):
    """The same model name on another server is another model: its answers are new artifacts. Stages
    that call no LLM (and the extractive config) keep their fingerprints, so their work is reused."""
    spec = {
        "name": "t",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": {"method": "fixed", "chunk_size": 100, "chunk_overlap": 10},
        "retrieval": {"mode": "bm25", "top_k": 3},
        "generation": {"model": ["extractive", "openai/gpt-4o-mini"]},
    }
    sweep = load_sweep(write(tmp_path, spec))

    def fps(api_base):
        return Plan.resolve(sweep, llm_api_base=api_base).fingerprints({"corpus": "c", "qa_set": "q"})

    default, a, b = fps(None), fps("http://a:8000/v1"), fps("http://b:8000/v1")
    llm = {k for k in a if k[0] in ("answers", "evaluations") and "gpt-4o-mini" in k[1]}
    assert len(llm) == 4  # answers and evaluation, on the selection split and on the holdout
    assert all(a[k] != b[k] and a[k] != default[k] for k in llm)
    assert all(a[k] == b[k] == default[k] for k in a if k not in llm)  # chunks, index, extractive answers


def test_a_spec_path_that_is_no_readable_file_is_a_one_line_error(tmp_path):
    """A directory was an IsADirectoryError traceback in validate, plan and run."""
    with pytest.raises(SpecError, match=r"is a directory, not a sweep spec"):
        load_sweep(tmp_path)
    binary = tmp_path / "sweep.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match=r"sweep.yaml: cannot be read as a sweep spec: 'utf-8' codec"):
        load_sweep(binary)
    from tests.conftest import cli

    for command in ("validate", "plan", "run"):
        r = cli(command, tmp_path)
        assert r.returncode == 2 and "is a directory, not a sweep spec" in r.stderr, (command, r.stderr)
        assert "Traceback" not in r.stderr


OPTIMIZING = {**BASE, "generation": {"model": "openai/gpt-4o-mini"}}


@pytest.mark.parametrize("section", ["optimize:\n", "optimize: {}\n", "optimize: null\n"])
def test_an_empty_optimize_section_is_an_error_saying_what_it_needs(tmp_path, section):
    """`optimize:` with nothing under it (YAML null) was ignored: the sweep ran without optimizing."""
    p = write(tmp_path, OPTIMIZING)
    p.write_text(p.read_text() + section)
    with pytest.raises(
        SpecError, match=r"s.yaml: field 'optimize': the section is empty; it needs reflection_model"
    ):
        load_sweep(p)


def test_an_optimize_budget_below_one_iteration_is_refused_on_load(tmp_path):
    """budget 1 passed validate and plan and failed after the whole sweep ran; 4 (the seed's validation and
    one iteration on the fewest questions, 2) is the least any QA set runs with."""
    for calls in (1, 3):
        spec = {
            **OPTIMIZING,
            "optimize": {"reflection_model": "openai/gpt-4o", "budget": {"max_metric_calls": calls}},
        }
        with pytest.raises(
            SpecError, match=rf"field 'optimize.budget.max_metric_calls': {calls} cannot .* give at least 4 "
        ):
            load_sweep(write(tmp_path, spec))
    spec = {
        **OPTIMIZING,
        "optimize": {"reflection_model": "openai/gpt-4o", "budget": {"max_metric_calls": 4}},
    }
    assert load_sweep(write(tmp_path, spec)).optimize.budget.max_metric_calls == 4


def test_the_optimize_budget_is_checked_against_the_selection_questions(tmp_path):
    from rag_core.optimization.evolve import train_val_split
    from rag_core.planning.spec import check_optimize_budget

    optimize = {"reflection_model": "openai/gpt-4o", "budget": {"max_metric_calls": 17}}
    sweep = load_sweep(write(tmp_path, {**OPTIMIZING, "optimize": optimize}))
    # 12 selection questions: the seed scores 6 validation questions, an iteration 3 + 3 and the 6 again
    assert sweep.optimize.min_metric_calls(12) == 18
    with pytest.raises(
        SpecError,
        match=r"'optimize.budget.max_metric_calls': 17 cannot .* on the 12 selection questions .* give at least 18",
    ):
        check_optimize_budget(sweep, 12)
    check_optimize_budget(sweep, 10)  # 5 + 3 + 3 + 5 = 16
    with pytest.raises(
        SpecError, match=r"field 'optimize': prompt optimization needs at least 2 selection questions"
    ):
        check_optimize_budget(sweep, 1)
    for n in range(2, 40):  # the sizes are the optimization's own split
        train, val = train_val_split([f"q{i}" for i in range(n)], sweep.optimize.val_share, 0)
        assert sweep.optimize.split_sizes(n) == (len(train), len(val))


def test_the_local_models_example_measures_its_judge_on_labels_the_data_settles(tmp_path):
    """The example's judge labels: as judge_labels.py writes them (run again, the same file), on questions no
    example sweep reads, each `yes` an answer its context states word for word and each `no` one it does
    not; half of each, so that a judge answering alike for all has a kappa of 0, not a high accuracy."""
    import json
    import runpy
    import shutil

    import polars as pl

    from rag_core.metrics.judge_agreement import read_labels

    folder = ROOT / "examples" / "data" / "hotpotqa_distractor_100"
    copy = tmp_path / "data"
    copy.mkdir()
    for name in ("corpus.parquet", "queries.parquet", "judge_labels.py"):
        shutil.copy(folder / name, copy / name)
    runpy.run_path(str(copy / "judge_labels.py"), run_name="__main__")
    assert (copy / "judge_labels.jsonl").read_bytes() == (folder / "judge_labels.jsonl").read_bytes()
    rows = [json.loads(line) for line in (folder / "judge_labels.jsonl").read_text().splitlines()]
    for row in rows:
        stated = row["answer"].lower() in row["context"].lower()
        assert stated == (row["supported"] == "yes"), row
    assert [r["supported"] for r in rows].count("yes") == len(rows) // 2 == 12
    sweep = load_sweep(ROOT / "examples" / "sweeps" / "local_llm.yaml")
    assert len(read_labels(sweep.judge_labels)[0]) == len(rows)
    read = set(pl.read_parquet(folder / "queries.parquet").head(sweep.max_queries)["question"])
    assert not read & {r["question"] for r in rows}
