"""Plug-ins through entry points: a package on the path with a dist-info (its METADATA and entry_points.txt,
as an installer writes them) is found, listed, validated, fingerprinted and run like a built-in; a broken
one is one error naming it. The example package installed for real and run in a sweep is
tests/test_plugins_sweep.py."""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rag_core.chunking.base import CHUNKERS
from rag_core.chunking.chunkers import chunk_text
from rag_core.common.registry import PluginError, UnknownComponent, refresh_all
from rag_core.metrics import evaluate_queries
from rag_core.metrics.registry import METRICS, scorable_metrics
from rag_core.planning.spec import SpecError, load_sweep
from tests.conftest import ROOT, write_sweep


def _sweep(path: Path, data: dict, **sections) -> Path:
    sections.setdefault("chunking", {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0})
    sections.setdefault("retrieval", {"mode": "vector", "top_k": 2})
    return write_sweep(path, data, **sections)


def install(root: Path, package: str, version: str, modules: dict[str, str], points: dict[str, dict]) -> Path:
    """A distribution laid out as an installer leaves it in site-packages: its modules and a dist-info."""
    site = root / f"site-{package}-{version}"
    site.mkdir(parents=True)
    for name, code in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(code))
    info = site / f"{package.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    lines = []
    for group, eps in points.items():
        lines += [f"[{group}]", *(f"{n} = {v}" for n, v in eps.items()), ""]
    (info / "entry_points.txt").write_text("\n".join(lines))
    return site


@pytest.fixture
def plugin_path():
    """Put sites on sys.path for one test; afterwards the registries forget them and their modules."""
    added: list[str] = []
    before = set(sys.modules)

    def add(site: Path) -> None:
        sys.path.insert(0, str(site))
        added.append(str(site))
        refresh_all()

    yield add
    for s in added:
        if s in sys.path:
            sys.path.remove(s)
    for m in set(sys.modules) - before:
        if m.startswith("demo_"):
            del sys.modules[m]
    refresh_all()


LINES = """
from rag_core.chunking.base import Span

def lines(text, chunk_size, chunk_overlap, measure):
    '''one chunk per line'''
    out, pos = [], 0
    for line in text.split("\\n"):
        if line.strip():
            out.append(Span(pos, pos + len(line)))
        pos += len(line) + 1
    return out
"""

METRIC = """
from rag_core.metrics.registry import Metric

def _score(q):
    return float(len(q.answer.split()) <= {limit}) if q.answer else {empty}

SHORT = Metric("short_answer", "1 when the answer has at most {limit} words", score=_score, weightable={weightable})
"""


def lines_site(root: Path, version: str = "1.2") -> Path:
    points = {"rag_sweep.chunkers": {"lines": "demo_lines:lines"}}
    return install(root, "demo-lines", version, {"demo_lines": LINES}, points)


def metric_site(root: Path, version="1.0", limit=3, empty="None", weightable=True) -> Path:
    code = METRIC.format(limit=limit, empty=empty, weightable=weightable)
    return install(
        root,
        "demo-metrics",
        version,
        {f"demo_metric_{version.replace('.', '_')}": code},
        {"rag_sweep.metrics": {"short_answer": f"demo_metric_{version.replace('.', '_')}:SHORT"}},
    )


def test_an_installed_chunker_is_listed_and_runs_like_a_built_in(plugin_path, tmp_path):
    plugin_path(lines_site(tmp_path))
    assert CHUNKERS.names()[-1] == "lines" and "(demo-lines 1.2)" in CHUNKERS.listing()
    assert str(CHUNKERS.origin("lines")) == "demo-lines 1.2" and CHUNKERS.origin("paragraph").builtin
    text = "alpha beta\n\n  gamma  \ndelta"
    spans = chunk_text(text, "lines", 100, 0)
    assert [text[s.start : s.end] for s in spans] == [
        "alpha beta",
        "gamma",
        "delta",
    ]  # trimmed like built-ins
    assert CHUNKERS.get("lines").description == "one chunk per line"


def test_an_unknown_method_names_the_installed_ones_in_the_spec_error(plugin_path, tmp_path, slice_data):
    plugin_path(lines_site(tmp_path))
    spec = _sweep(
        tmp_path / "s.yaml", slice_data, chunking={"method": "line", "chunk_size": 100, "chunk_overlap": 0}
    )
    with pytest.raises(SpecError) as e:
        load_sweep(spec)
    msg = str(e.value)
    assert "chunking.method" in msg and "unknown chunking method 'line'" in msg
    assert (
        "fixed, sentence, paragraph, recursive, markdown, semantic (built-in); lines (demo-lines 1.2)" in msg
    )
    with pytest.raises(UnknownComponent):
        chunk_text("a b", "line", 10, 0)


@pytest.mark.parametrize(
    ("code", "value", "expected"),
    [
        ("raise ImportError('needs spacy')", "demo_broken:split", "failed to load: ImportError: needs spacy"),
        ("split = 42", "demo_broken:split", "is not a chunking method: got int"),
        ("", "demo_broken:nothing", "failed to load: AttributeError"),
    ],
)
def test_a_plugin_that_cannot_load_is_one_error_naming_it(
    plugin_path, tmp_path, slice_data, code, value, expected
):
    plugin_path(
        install(
            tmp_path, "demo-broken", "0.3", {"demo_broken": code}, {"rag_sweep.chunkers": {"broken": value}}
        )
    )
    assert "broken (demo-broken 0.3)" in CHUNKERS.listing()  # listed without loading it
    spec = _sweep(
        tmp_path / "s.yaml", slice_data, chunking={"method": "broken", "chunk_size": 100, "chunk_overlap": 0}
    )
    with pytest.raises(SpecError) as e:
        load_sweep(spec)
    msg = str(e.value)
    assert f"plug-in chunking method 'broken' ({value}, from demo-broken 0.3) {expected}" in msg
    assert "chunking.method" in msg
    # a sweep that does not use it is unaffected
    load_sweep(
        _sweep(
            tmp_path / "t.yaml", slice_data, chunking={"method": "fixed", "chunk_size": 9, "chunk_overlap": 0}
        )
    )


def test_a_plugin_may_not_take_a_built_ins_name(plugin_path, tmp_path):
    plugin_path(
        install(
            tmp_path,
            "demo-shadow",
            "1.0",
            {"demo_shadow": LINES},
            {"rag_sweep.chunkers": {"fixed": "demo_shadow:lines"}},
        )
    )
    with pytest.raises(
        PluginError, match=r"plug-in chunking method 'fixed' .*demo-shadow 1.0.* has a built-in's name"
    ):
        chunk_text("a b", "fixed", 10, 0)


def test_a_chunk_outside_the_text_is_refused_naming_the_method(plugin_path, tmp_path):
    code = "from rag_core.chunking.base import Span\ndef split(text, size, overlap, measure):\n    return [Span(0, len(text) + 5)]\n"
    plugin_path(
        install(
            tmp_path, "demo-bad", "1.0", {"demo_bad": code}, {"rag_sweep.chunkers": {"bad": "demo_bad:split"}}
        )
    )
    with pytest.raises(
        ValueError, match=r"chunking method 'bad' returned span 0\.\.8, outside its text of 3 characters"
    ):
        chunk_text("a b", "bad", 10, 0)


def _plan(tmp_path, slice_data, name: str, **sections):
    from rag_assets.orchestration.plans import load_plan

    spec = _sweep(tmp_path / f"{name}.yaml", slice_data, name=name, **sections)
    plan = load_plan(spec, "lancedb")
    return plan, plan.fingerprints({"corpus": "c", "qa_set": "q"})


def _changed_stages(before: dict, after: dict) -> set[str]:
    """The stages with a partition whose fingerprint differs between two plans' fingerprints."""
    return {stage for (stage, key), fp in before.items() if after[(stage, key)] != fp}


def test_a_plugins_version_joins_the_fingerprints_of_what_it_makes_and_nothing_else(
    plugin_path, tmp_path, slice_data
):
    chunking = [
        {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        {"method": "lines", "chunk_size": 300, "chunk_overlap": 0},
    ]
    plugin_path(lines_site(tmp_path / "a", "1.0"))
    _, v1 = _plan(tmp_path, slice_data, "fp", chunking=chunking)
    sys.path.pop(0)
    plugin_path(lines_site(tmp_path / "b", "1.1"))
    _, v2 = _plan(tmp_path, slice_data, "fp", chunking=chunking)
    assert v1.keys() == v2.keys()
    changed = {(stage, key) for (stage, key), fp in v1.items() if v2[(stage, key)] != fp}
    assert changed and all(key.startswith("lines-") for stage, key in changed)
    assert {s for s, k in changed if k.startswith("lines-")} >= {"chunksets", "embeddings", "evaluations"}

    # a metric plug-in: every evaluation (it computes the metric), nothing upstream of it
    plugin_path(metric_site(tmp_path, "1.0"))
    _, m1 = _plan(tmp_path, slice_data, "fp", chunking=chunking)
    sys.path.pop(0)
    plugin_path(metric_site(tmp_path / "m2", "2.0"))
    _, m2 = _plan(tmp_path, slice_data, "fp", chunking=chunking)
    changed = {(stage, key) for (stage, key), fp in m1.items() if m2[(stage, key)] != fp}
    assert changed == {("evaluations", k) for s, k in m1 if s == "evaluations"} and len(changed) == 2


def _frames():
    qa = pl.DataFrame(
        {
            "query_id": ["q1", "q2"],
            "question": ["who?", "what?"],
            "answers": [["Ada Lovelace"], []],
            "relevant_doc_ids": [["d1"], ["d2"]],
        }
    )
    ret = pl.DataFrame(
        {
            "query_id": ["q1", "q2"],
            "chunk_ids": [["d1#0"], ["d3#0"]],
            "doc_ids": [["d1"], ["d3"]],
            "texts": [["Ada Lovelace wrote it"], ["nothing"]],
            "latency_ms": [1.0, 1.0],
        }
    )
    ans = pl.DataFrame(
        {
            "query_id": ["q1", "q2"],
            "answer": ["Ada Lovelace", "a much longer answer here"],
            "error": [None, None],
            "latency_ms": [1.0, 1.0],
        }
    )
    return qa, ret, ans


def test_a_metric_plugin_is_a_column_scored_per_question_and_weightable(plugin_path, tmp_path, slice_data):
    plugin_path(metric_site(tmp_path))
    assert scorable_metrics()[-1] == "short_answer"
    per = evaluate_queries(*_frames(), top_k=1)
    assert per["short_answer"].to_list() == [1.0, 0.0]
    spec = _sweep(tmp_path / "w.yaml", slice_data, weights={"short_answer": 0.5, "token_f1": 0.5})
    assert load_sweep(spec).weights["short_answer"] == 0.5


@pytest.mark.parametrize(
    ("empty", "expected"),
    [
        ("float('nan')", "nan"),
        ("2.5", "a weightable metric scores in [0, 1]"),
        ("'x'", "expected a finite number"),
    ],
)
def test_a_metric_never_turns_nan_or_leaves_its_range(plugin_path, tmp_path, empty, expected):
    plugin_path(metric_site(tmp_path, limit=0, empty=empty))
    qa, ret, ans = _frames()
    ans = ans.with_columns(pl.lit("").alias("answer"))
    with pytest.raises(PluginError, match=r"metric 'short_answer' scored question 'q1'") as e:
        evaluate_queries(qa, ret, ans, top_k=1)
    assert expected in str(e.value)


def test_a_metric_that_raises_is_named_with_its_package_and_question(plugin_path, tmp_path):
    code = "def boom(q):\n    '''divides by zero'''\n    return 1 / 0\n"
    plugin_path(
        install(
            tmp_path,
            "demo-boom",
            "1.0",
            {"demo_boom": code},
            {"rag_sweep.metrics": {"boom": "demo_boom:boom"}},
        )
    )
    assert METRICS.get("boom").description == "divides by zero"
    with pytest.raises(
        PluginError, match=r"metric 'boom' \(demo-boom 1.0\) failed on question 'q1': ZeroDivisionError"
    ):
        evaluate_queries(*_frames(), top_k=1)


def test_a_metric_reported_only_cannot_be_weighted(plugin_path, tmp_path, slice_data):
    plugin_path(metric_site(tmp_path, weightable=False))
    spec = _sweep(tmp_path / "w.yaml", slice_data, weights={"short_answer": 0.5, "token_f1": 0.5})
    with pytest.raises(SpecError, match=r"weights.*\['short_answer'\] are reported only"):
        load_sweep(spec)
    assert not math.isnan(evaluate_queries(*_frames(), top_k=1)["short_answer"][0])


def test_components_lists_built_ins_and_plugins_alike_and_flags_a_broken_one(plugin_path, tmp_path, capsys):
    from rag_sweep.cli import main

    plugin_path(metric_site(tmp_path))
    plugin_path(
        install(
            tmp_path,
            "demo-broken",
            "0.3",
            {"demo_broken": "raise ImportError('gone')"},
            {"rag_sweep.chunkers": {"broken": "demo_broken:split"}},
        )
    )
    assert main(["components"]) == 1  # a broken plug-in: listed, and the exit says so
    out = capsys.readouterr().out
    assert (
        "short_answer" in out and "demo-metrics 1.0" in out and "1 when the answer has at most 3 words" in out
    )
    assert "FAILS TO LOAD: plug-in chunking method 'broken'" in out and "ImportError: gone" in out
    assert "paragraph" in out and "recall_at_k" in out
    assert all(line.startswith("|") for line in _markdown(main, capsys))


def _markdown(main, capsys) -> list[str]:
    main(["components", "--markdown"])
    return capsys.readouterr().out.strip().splitlines()


def test_the_example_line_chunker_packs_whole_lines_within_the_size(monkeypatch):
    from rag_core.chunking.base import Measure

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "examples" / "plugins" / "src"))
    from rag_sweep_example_plugins.lines import lines

    text = "- apples\n- pears\n\n- a very long line that does not fit\n- plums"
    spans = lines(text, 20, 9, Measure())
    chunks = [text[s.start : s.end] for s in spans]
    # whole lines packed; a line longer than the size cut into windows; "- pears" fits the overlap but not
    # beside the next line, so it is not carried
    assert chunks == ["- apples\n- pears", "- a very long line t", "hat does not fit", "- plums"]
    short = "a\nb\nc\nd"
    assert [short[s.start : s.end] for s in lines(short, 3, 1, Measure())] == ["a\nb", "b\nc", "c\nd"]


REVERSE = """
from rag_core.search.strategies import Strategy

class Reverse(Strategy):
    '''the space's candidates, last first'''

    def propose(self):
        return next((c for c in reversed(self.space.all()) if self.space.key(c) not in self.seen), None)
"""


def test_a_search_strategy_plugin_runs_one_config_at_a_time_like_bayesian(plugin_path, tmp_path):
    from rag_core.search.strategies import STRATEGIES
    from tests.test_search import _drive, _plan

    points = {"rag_sweep.search_strategies": {"reverse": "demo_reverse:Reverse"}}
    plugin_path(install(tmp_path, "demo-search", "1.0", {"demo_reverse": REVERSE}, points))
    assert STRATEGIES.get("reverse").how == "sequential"
    plan = _plan({"strategy": "reverse", "budget": {"max_configs": 3}})
    assert plan.sweep.search.adaptive and len(plan.config_keys) == 12  # the plan holds the whole space
    report, steps, done = _drive(plan)
    from rag_assets.orchestration.search import space_of

    space, key_of = space_of(plan)
    assert report.evaluated == [key_of[space.key(c)] for c in reversed(space.all())][:3]
    assert report.stopped_by == "max_configs" and len(steps) == len(set(steps))
    with pytest.raises(
        ValueError, match=r"unknown search strategy 'revers'; installed: grid, random, bayesian, halving"
    ):
        _plan({"strategy": "revers"})


EXACT = (
    Path(__file__).parents[1] / "examples/plugins/src/rag_sweep_example_plugins/exact_store.py"
).read_text()


def exact_site(root: Path, version: str = "1.0", name: str = "exact", code: str = EXACT) -> Path:
    points = {"rag_sweep.vector_stores": {name: "demo_exact:ExactStore"}}
    return install(root, "demo-exact", version, {"demo_exact": code}, points)


def test_a_vector_store_plugin_is_validated_fingerprinted_and_searches_like_a_built_in(
    plugin_path, tmp_path, slice_data
):
    from rag_core.components.stores import STORES
    from resources.vector_stores import VectorStores

    with pytest.raises(SpecError, match=r"unknown vector store 'exact'; installed: lancedb, qdrant"):
        load_sweep(_sweep(tmp_path / "s.yaml", slice_data, name="s", index={"store": "exact"}))
    plugin_path(exact_site(tmp_path / "a"))
    assert STORES.names()[-1] == "exact" and "exact (demo-exact 1.0)" in STORES.listing()
    # the spec takes it; a BM25 analyzer it does not offer is refused naming the stores that can
    load_sweep(_sweep(tmp_path / "s.yaml", slice_data, name="s", index={"store": "exact"}))
    with pytest.raises(SpecError, match=r"exact cannot apply 'english'.*stores that can: lancedb"):
        _plan(tmp_path, slice_data, "en", index={"store": "exact", "bm25_analyzer": "english"})

    # searched like a built-in: exact cosine, BM25, hybrid and filters, under <data dir>/exact
    store = VectorStores(data_dir=str(tmp_path / "data")).get("exact")
    rows = [
        {"chunk_id": f"c{i}", "doc_id": f"d{i}", "text": t, "metadata": f'{{"year": {2000 + i}}}'}
        for i, t in enumerate(["red apples", "green pears", "red cherries and apples"])
    ]
    vecs = np.array([[1, 0, 0], [0, 1, 0], [0.8, 0.1, 0.1]], dtype=np.float32)
    assert store.upsert("Rag_demo", rows, vecs) == 3 and (tmp_path / "data" / "exact").is_dir()
    assert [
        h.chunk_id for h in store.retrieve("Rag_demo", "vector", "", np.array([1, 0, 0]), 2, 0.5, "rrf")
    ] == [
        "c0",
        "c2",
    ]
    assert [h.chunk_id for h in store.retrieve("Rag_demo", "bm25", "apples", None, 5, 0.5, "rrf")] == [
        "c0",
        "c2",
    ]
    assert (
        store.retrieve("Rag_demo", "hybrid", "pears", np.array([0, 1, 0]), 1, 0.5, "rrf")[0].chunk_id == "c1"
    )
    hits = store.vector_search("Rag_demo", np.array([1, 0, 0]), 3, where={"year": {"$gte": 2001}})
    assert [h.chunk_id for h in hits] == ["c2", "c1"]
    assert store.info("Rag_demo")["count"] == 3

    # its package's version joins the index's fingerprint (and what is built on it), nothing upstream
    _, v1 = _plan(tmp_path, slice_data, "fp", index={"store": "exact"})
    sys.path.pop(0)
    plugin_path(exact_site(tmp_path / "b", "1.1"))
    _, v2 = _plan(tmp_path, slice_data, "fp", index={"store": "exact"})
    changed = _changed_stages(v1, v2)
    assert changed == {"vector_index", "retrievals", "rerankings", "answers", "evaluations"}


def test_a_store_plugin_that_is_not_a_store_is_one_error_naming_it(plugin_path, tmp_path, slice_data):
    plugin_path(exact_site(tmp_path, name="flat"))  # its class says `exact`: the entry point says `flat`
    with pytest.raises(
        SpecError, match=r"plug-in vector store 'flat' \(demo_exact:ExactStore, from demo-exact"
    ):
        load_sweep(_sweep(tmp_path / "s.yaml", slice_data, name="s", index={"store": "flat"}))


def test_a_shipped_model_installs_the_plugins_its_config_runs_with(plugin_path, tmp_path, slice_data):
    from rag_core.planning.extension_points import config_plugins
    from resources.shipping.bundle import environment

    plugin_path(exact_site(tmp_path / "a", "1.0"))
    plugin_path(lines_site(tmp_path / "b", "1.2"))
    chunking = {"method": "lines", "chunk_size": 300, "chunk_overlap": 0}
    plan, _ = _plan(tmp_path, slice_data, "ship", chunking=chunking, index={"store": ["exact", "lancedb"]})
    pins = {c.index.store: config_plugins(c) for c in plan.sweep.configs}
    assert pins == {"exact": ["demo-exact==1.0", "demo-lines==1.2"], "lancedb": ["demo-lines==1.2"]}
    (pip,) = [d["pip"] for d in environment(pins["exact"])["dependencies"] if isinstance(d, dict)]
    assert pip[-2:] == ["demo-exact==1.0", "demo-lines==1.2"] and any(p.startswith("mlflow==") for p in pip)


SHORTEST = """
def shortest_first(query, texts, k, model):
    '''the shortest candidates first'''
    return sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))

def broken(query, texts, k, model):
    '''lists a candidate twice'''
    return [0, 0]
"""


def reranker_site(root: Path, version: str = "1.0") -> Path:
    points = {
        "rag_sweep.rerankers": {
            "shortest": "demo_rerank:shortest_first",
            "twice": "demo_rerank:broken",
            "ce": "demo_rerank:shortest_first",  # the key cross_encoder's partitions have
        }
    }
    return install(root, "demo-rerank", version, {"demo_rerank": SHORTEST}, points)


def test_a_reranker_plugin_orders_the_candidates_and_its_version_joins_the_fingerprints(
    plugin_path, tmp_path, slice_data
):
    from rag_core.retrieval.rerank import rerank

    rerank_section = {"method": "shortest", "candidates": 4}
    with pytest.raises(
        SpecError, match=r"unknown reranker 'shortest'; installed: none, mmr, llm, cross_encoder"
    ):
        load_sweep(_sweep(tmp_path / "s.yaml", slice_data, name="s", rerank=rerank_section))
    plugin_path(reranker_site(tmp_path / "a"))
    plan, v1 = _plan(tmp_path, slice_data, "rr", rerank=rerank_section)
    with pytest.raises(SpecError, match=r"plug-in reranker 'ce' has the key of the built-in 'cross_encoder'"):
        load_sweep(_sweep(tmp_path / "ce.yaml", slice_data, name="ce", rerank={"method": "ce", "model": "m"}))
    (c,) = plan.sweep.configs
    assert c.rerank.key == "shortest-c4" and c.fetch_k == 4
    texts = ["a longer first chunk", "mid chunk", "short", "the longest chunk of all four"]
    retrieved = pl.DataFrame(
        {
            "query_id": ["q1"],
            "chunk_ids": [["c0", "c1", "c2", "c3"]],
            "doc_ids": [["d0", "d1", "d2", "d3"]],
            "scores": [[0.9, 0.8, 0.7, 0.6]],
            "titles": [["", "", "", ""]],
            "texts": [texts],
        }
    )
    qa = pl.DataFrame({"query_id": ["q1"], "question": ["which chunk?"]})
    out = rerank(c, retrieved, qa, None, dict, lambda t: None)
    assert out["chunk_ids"][0].to_list() == ["c2", "c1"]  # top_k 2 of the plug-in's order
    # a bad order is an error naming the reranker, its package and the question
    twice = c.model_copy(update={"rerank": c.rerank.model_copy(update={"method": "twice"})})
    with pytest.raises(
        ValueError, match=r"reranker 'twice' \(demo-rerank 1.0\) returned \[0, 0\] for 4 candidates"
    ):
        rerank(twice, retrieved, qa, None, dict, lambda t: None)
    # upgraded: the rerankings and what follows them, nothing upstream
    sys.path.pop(0)
    plugin_path(reranker_site(tmp_path / "b", "1.1"))
    _, v2 = _plan(tmp_path, slice_data, "rr", rerank=rerank_section)
    assert _changed_stages(v1, v2) == {
        "rerankings",
        "answers",
        "evaluations",
    }


FIRST = """
def first_words(question, texts, titles):
    '''the first five words of the first context block'''
    return " ".join((texts[0] if texts else "").split()[:5])

def not_text(question, texts, titles):
    '''answers with a number'''
    return 42
"""


def reader_site(root: Path, version: str = "1.0") -> Path:
    points = {
        "rag_sweep.generators": {"first_words": "demo_reader:first_words", "number": "demo_reader:not_text"}
    }
    return install(root, "demo-reader", version, {"demo_reader": FIRST}, points)


def test_an_answer_generator_plugin_answers_offline_and_its_version_joins_the_fingerprints(
    plugin_path, tmp_path, slice_data
):
    from rag_core.generation.answering import answer

    generation = {"model": "first_words", "temperature": 0.7, "samples": 3}
    plugin_path(reader_site(tmp_path / "a"))
    plan, v1 = _plan(tmp_path, slice_data, "gen", generation=generation)
    (c,) = plan.sweep.configs
    # a reader: no prompt, temperature or samples; no LLM call in its answers' stage
    assert c.generation.key == "first-words" and c.generation.samples == 1 and c.generation.temperature == 0
    assert not plan.calls_llm("answers")
    qa = pl.DataFrame({"query_id": ["q1", "q2"], "question": ["who?", "what?"]})
    reranked = pl.DataFrame(
        {
            "query_id": ["q1", "q2"],
            "chunk_ids": [["c0"], []],
            "doc_ids": [["d0"], []],
            "titles": [["T"], []],
            "texts": [["one two three four five six seven"], []],
        }
    )
    out = answer(c, qa, reranked, None, len, lambda: None)
    assert out["answer"].to_list() == ["one two three four five", ""] and out["error"].null_count() == 2
    number = c.model_copy(update={"generation": c.generation.model_copy(update={"model": "number"})})
    with pytest.raises(ValueError, match=r"answer generator 'number' \(demo-reader 1.0\) returned int"):
        answer(number, qa, reranked, None, len, lambda: None)
    sys.path.pop(0)
    plugin_path(reader_site(tmp_path / "b", "1.1"))
    _, v2 = _plan(tmp_path, slice_data, "gen", generation=generation)
    assert _changed_stages(v1, v2) == {"answers", "evaluations"}
    # not installed: the same name is a litellm model (with a prompt and an LLM call)
    sys.path.pop(0)
    refresh_all()
    plan, _ = _plan(tmp_path, slice_data, "gen2", generation={"model": "first_words"})
    assert not plan.sweep.configs[0].generation.is_reader


HASHED = (
    Path(__file__).parents[1] / "examples/plugins/src/rag_sweep_example_plugins/hashed_words.py"
).read_text()
BAD_EMBEDDER = """
import numpy as np

def zeros(texts):
    '''a zero vector per text'''
    return np.zeros((len(texts), 4))
"""


def embedder_site(root: Path, version: str = "1.0") -> Path:
    points = {
        "rag_sweep.embedders": {"hashed_words": "demo_hashed:HASHED_WORDS", "zeros": "demo_zeros:zeros"}
    }
    return install(root, "demo-embed", version, {"demo_hashed": HASHED, "demo_zeros": BAD_EMBEDDER}, points)


def test_an_embedding_model_plugin_embeds_through_the_cache_and_its_version_joins_the_fingerprints(
    plugin_path, tmp_path, slice_data
):
    from resources.embedders import EmbeddingService

    plugin_path(embedder_site(tmp_path / "a"))
    service = EmbeddingService(cache_dir=str(tmp_path / "cache"))
    texts = ["Red apples and red cherries", "green pears", "Red apples and red cherries"]
    vectors, stats = service.embed("hashed_words", texts)
    assert vectors.shape == (3, 256) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert (vectors[0] == vectors[2]).all() and stats.embedded == 2 and stats.device == "cpu · plug-in"
    assert service.embed("hashed_words", texts)[1].embedded == 0  # cached like any model's vectors
    assert (
        service.token_counts("hashed_words", texts[:2]) == [5, 2]
        and service.max_tokens("hashed_words") is None
    )
    with pytest.raises(ValueError, match=r"'hashed_words' is a plug-in model: use unit: chars"):
        service.token_offsets("hashed_words", texts)
    with pytest.raises(
        ValueError, match=r"embedding model 'zeros' \(demo-embed 1.0\) returned an array of shape"
    ):
        service.embed("zeros", ["a"])

    embedding = {"model": "hashed_words"}
    _, v1 = _plan(tmp_path, slice_data, "emb", embedding=embedding)
    sys.path.pop(0)
    plugin_path(embedder_site(tmp_path / "b", "1.1"))
    _, v2 = _plan(tmp_path, slice_data, "emb", embedding=embedding)
    changed = _changed_stages(v1, v2)
    assert changed == {"embeddings", "vector_index", "retrievals", "rerankings", "answers", "evaluations"}


KEYWORD_FIRST = """
from rag_core.retrieval.retrieve import Hit

def keyword_first(searcher, query, vector, k):
    '''the keyword hits, then the vector hits they miss (scored below every keyword hit)'''
    words = searcher.keyword(query, k)
    seen = {h.chunk_id for h in words}
    rest = [h for h in searcher.vector(vector, k) if h.chunk_id not in seen]
    return words + [Hit(h.chunk_id, h.doc_id, h.text, h.score - 10.0) for h in rest][: k - len(words)]

def scoreless(searcher, query, vector, k):
    '''hits without scores'''
    return [("c0", None)]
"""


def mode_site(root: Path, version: str = "1.0") -> Path:
    points = {
        "rag_sweep.retrievers": {
            "keyword_first": "demo_mode:keyword_first",
            "scoreless": "demo_mode:scoreless",
        }
    }
    return install(root, "demo-mode", version, {"demo_mode": KEYWORD_FIRST}, points)


def test_a_retrieval_mode_plugin_composes_the_stores_searches_and_its_version_joins_the_fingerprints(
    plugin_path, tmp_path, slice_data
):
    from resources.vector_stores import VectorStores

    retrieval = {"mode": "keyword_first", "top_k": 3}
    with pytest.raises(
        SpecError, match=r"unknown retrieval mode 'keyword_first'; installed: vector, bm25, hybrid"
    ):
        load_sweep(_sweep(tmp_path / "s.yaml", slice_data, name="s", retrieval=retrieval))
    plugin_path(mode_site(tmp_path / "a"))
    plan, v1 = _plan(tmp_path, slice_data, "mode", retrieval=retrieval)
    assert (
        plan.sweep.configs[0].retrieval.key == "keyword_first"
        and plan.sweep.configs[0].retrieval.reads_vector
    )

    store = VectorStores(data_dir=str(tmp_path / "data")).get("lancedb")
    rows = [
        {"chunk_id": f"c{i}", "doc_id": f"d{i}", "text": t, "metadata": f'{{"year": {2000 + i}}}'}
        for i, t in enumerate(["red apples", "green pears", "blue plums"])
    ]
    store.upsert("Rag_modes", rows, np.array([[1, 0, 0], [0, 1, 0], [0.6, 0.8, 0]], dtype=np.float32))
    hits = store.retrieve("Rag_modes", "keyword_first", "pears", np.array([1, 0, 0]), 3, 0.5, "rrf")
    assert [h.chunk_id for h in hits] == ["c1", "c0", "c2"]  # the keyword hit first, then by cosine
    filtered = store.retrieve(
        "Rag_modes", "keyword_first", "pears", np.array([1, 0, 0]), 3, 0.5, "rrf", {"year": {"$gte": 2002}}
    )
    assert [h.chunk_id for h in filtered] == ["c2"]  # every search under the config's filter
    with pytest.raises(ValueError, match=r"retrieval mode 'scoreless' \(demo-mode 1.0\) returned"):
        store.retrieve("Rag_modes", "scoreless", "pears", np.array([1, 0, 0]), 3, 0.5, "rrf")

    sys.path.pop(0)
    plugin_path(mode_site(tmp_path / "b", "1.1"))
    _, v2 = _plan(tmp_path, slice_data, "mode", retrieval=retrieval)
    changed = _changed_stages(v1, v2)
    assert changed == {"retrievals", "rerankings", "answers", "evaluations"}


@pytest.mark.slow  # a sweep run end to end, then `rag-sweep run` in a process of its own
def test_a_name_a_plugin_gave_when_the_sweep_ran_is_refused_once_it_is_gone(
    plugin_path, tmp_path, small_slice
):
    """Run with an answer-generator plug-in, the sweep records the name; with the plug-in gone, the name is
    not read as a litellm model: the plan, `rag-sweep run` and the registered champion refuse it, naming
    the package to install."""
    from rag_assets.orchestration.plans import load_plan
    from rag_sweep.runner import run_sweep
    from resources.shipping.pipeline import MissingPlugin
    from resources.shipping.registry import load_champion
    from tests.conftest import cli

    spec = _sweep(
        tmp_path / "plugged.yaml",
        small_slice,
        name="plugged",
        retrieval={"mode": "bm25", "top_k": 2},
        generation={"model": "first_words"},
    )
    data = tmp_path / "data"
    plugin_path(reader_site(tmp_path / "a"))
    run = run_sweep(str(spec), str(data), progress=False)
    assert run.plan.sweep.configs[0].generation.is_reader
    sys.path.pop(0)
    refresh_all()
    wanted = (
        "generation.model 'first_words' is the answer generator of plug-in package demo-reader 1.0, which is "
        "not installed: pip install 'demo-reader==1.0'"
    )
    with pytest.raises(SpecError, match=re.escape(wanted)):
        load_plan(spec, "lancedb", data)
    r = cli("run", spec, "--data-dir", data)
    assert r.returncode == 2 and wanted in r.stderr and "Traceback" not in r.stderr
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{data / 'mlflow.db'}"
    try:
        with pytest.raises(MissingPlugin, match=re.escape(wanted)):
            load_champion("models:/plugged@champion")
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    other = load_plan(spec, "lancedb", tmp_path / "never-ran")  # another data dir: no record, as before
    assert not other.sweep.configs[0].generation.is_reader


def test_a_shipped_model_refuses_to_load_without_its_plugin_naming_the_package(plugin_path, tmp_path, capsys):
    """Saved with an answer-generator plug-in, the model answers with it; loaded where the plug-in is not
    installed, it refuses (and `verify-model` says so) instead of calling a litellm model of that name."""
    import mlflow.pyfunc

    from rag_sweep.cli import main
    from resources.shipping.bundle import save
    from resources.shipping.pipeline import MissingPlugin
    from tests.small_model import small_bundle

    plugin_path(reader_site(tmp_path / "a"))
    bundle = small_bundle(tmp_path, generation={"model": "first_words"})
    assert bundle.manifest["plugin_components"] == {"generation.model": {"first_words": "demo-reader==1.0"}}
    folder = save(bundle, tmp_path / "model")
    answered = mlflow.pyfunc.load_model(str(folder)).predict(["Who wrote Arthur's Magazine?"])
    assert answered["error"][0] is None and len(answered["answer"][0].split()) <= 5
    sys.path.pop(0)
    refresh_all()
    wanted = "which is not installed: pip install 'demo-reader==1.0'"
    with pytest.raises(MissingPlugin, match=re.escape(wanted)):
        mlflow.pyfunc.load_model(str(folder))
    assert main(["verify-model", str(folder)]) == 1
    assert wanted in capsys.readouterr().err


def test_the_example_plugins_import_only_the_public_plugin_module():
    """A plug-in imports `rag_sweep.plugins` and nothing else of the project (its internals may move); every
    name the public module lists resolves."""
    import ast

    import rag_sweep.plugins as api

    internal = ("rag_core", "resources", "rag_assets", "sensors", "rag_sweep")
    found = {}
    for path in sorted((ROOT / "examples/plugins/src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            for name in names:
                if name.split(".")[0] in internal:
                    found.setdefault(name, []).append(path.name)
    assert set(found) == {"rag_sweep.plugins"}, found
    assert all(hasattr(api, name) for name in api.__all__)


def test_the_store_hooks_protocol_is_what_embedded_store_and_the_example_store_define(monkeypatch):
    """`StoreHooks` states every hook a store plug-in fills in: `EmbeddedStore` leaves exactly its required
    ones abstract, with the same parameters; the example's store defines every one with those parameters
    (`ann` may be left out by a store without approximate indexes)."""
    import inspect

    from rag_sweep.plugins import EmbeddedStore, StoreHooks
    from resources.vector_stores.hooks import OPTIONAL, hook_names, required_hooks

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "plugins" / "src"))
    from rag_sweep_example_plugins.exact_store import ExactStore

    def parameters(cls, name):
        member = inspect.getattr_static(cls, name)
        function = member.fget if isinstance(member, property) else member
        return list(inspect.signature(function).parameters)

    assert EmbeddedStore.__abstractmethods__ == set(required_hooks())
    assert set(hook_names()) - set(required_hooks()) == set(OPTIONAL)
    for name in hook_names():
        assert parameters(EmbeddedStore, name) == parameters(StoreHooks, name), name
        expected = parameters(StoreHooks, name)
        defined = parameters(ExactStore, name)
        assert defined == expected or defined + ["ann"] == expected, (name, defined)


def test_a_store_plugin_that_leaves_a_hook_undefined_is_refused_naming_it(monkeypatch):
    """A misspelt hook (`_keyword_serach`) leaves `_keyword_search` undefined: the plug-in is refused when it
    is read, naming the hook, not when a sweep first opens the store."""
    from rag_core.components.stores import _adapt
    from rag_sweep.plugins import EmbeddedStore

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "plugins" / "src"))
    from rag_sweep_example_plugins.exact_store import ExactStore

    hooks = {name: getattr(ExactStore, name) for name in ("_build", "_count", "_drop", "_vector_search")}
    base = {"backend": "misspelt", "analyzers": ("plain",), "files": "local", "_root": "/tmp", **hooks}
    misspelt = type("Misspelt", (EmbeddedStore,), {**base, "_keyword_serach": ExactStore._keyword_search})
    with pytest.raises(
        TypeError, match=r"^it does not define _keyword_search \(rag_sweep.plugins.StoreHooks\)$"
    ):
        _adapt("misspelt", misspelt)
    spelt = type("Spelt", (EmbeddedStore,), {**base, "_keyword_search": ExactStore._keyword_search})
    assert _adapt("misspelt", spelt).implementation is spelt
