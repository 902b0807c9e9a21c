"""`rag-sweep validate` checks the sweep and its data (cheap), naming the field; exit 2 on bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import cli, write_sweep

ROOT = Path(__file__).resolve().parents[1]

SECTIONS = {
    "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    "retrieval": {"mode": ["vector", "bm25"], "top_k": 3},
}


def test_validate_loads_the_data(slice_data, tmp_path, capsys):
    spec = write_sweep(tmp_path / "ok.yaml", slice_data, **SECTIONS)
    assert (r := cli(*["validate", str(spec)])).returncode == 0
    out = r.stdout
    assert f"{slice_data['n_docs']} documents, 20 questions; 2 configs" in out


def test_validate_names_the_field_of_missing_or_bad_data(slice_data, tmp_path, capsys):
    missing = write_sweep(
        tmp_path / "m.yaml", {**slice_data, "corpus": tmp_path / "nope.parquet"}, **SECTIONS
    )
    assert (r := cli(*["validate", str(missing)])).returncode == 2
    err = r.stderr
    assert "field 'data.corpus'" in err and "nope.parquet: file not found" in err
    bad_qa = tmp_path / "qa.jsonl"
    bad_qa.write_text(
        json.dumps({"query_id": "q", "question": "?", "answers": 3, "relevant_doc_ids": []}) + "\n"
    )
    bad = write_sweep(tmp_path / "b.yaml", {**slice_data, "qa": bad_qa}, **SECTIONS)
    assert (r := cli(*["validate", str(bad)])).returncode == 2
    err = r.stderr
    assert "field 'data.qa'" in err and "line 1: field 'answers' must be a list of strings" in err


def test_run_prints_a_data_error_in_one_line_as_validate_does_and_the_traceback_only_when_verbose(
    tmp_path, capsys
):
    corpus, qa = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_text(json.dumps({"doc_id": "d1", "text": "hello world", "metadata": "oops"}) + "\n")
    qa.write_text(
        json.dumps({"query_id": "q", "question": "hello?", "answers": ["world"], "relevant_doc_ids": ["d1"]})
        + "\n"
    )
    spec = write_sweep(tmp_path / "s.yaml", {"corpus": corpus, "qa": qa}, **SECTIONS)
    assert (r := cli(*["run", str(spec), "--data-dir", str(tmp_path / "d")])).returncode == 2
    err = r.stderr.strip().splitlines()
    assert err == [
        f"error: {spec}: field 'data.corpus': {corpus}: line 1: field 'metadata' is a string but not JSON"
    ]
    assert (r := cli(*["validate", str(spec)])).returncode == 2  # one style: the same line, no hint
    assert r.stderr.strip().splitlines() == err
    assert (r := cli(*["run", str(spec), "--data-dir", str(tmp_path / "d"), "--verbose"])).returncode == 2
    err = r.stderr
    assert "Traceback" in err and err.strip().endswith("field 'metadata' is a string but not JSON")


def test_a_bad_output_path_or_llm_setting_is_refused_before_any_work(
    slice_sweep, tmp_path, capsys, monkeypatch
):
    data = tmp_path / "data"
    assert (
        r := cli(*["run", str(slice_sweep), "--data-dir", str(data), "--output", "board.xlsx"])
    ).returncode == 2
    assert "error: --output board.xlsx: use a .csv or .parquet path" in r.stderr
    assert not data.exists()  # nothing was started
    (tmp_path / "board.csv").mkdir()
    (tmp_path / "notes.txt").write_text("a file")
    # both failed only after the whole sweep, with a traceback
    for output, said in (
        (tmp_path / "board.csv", "is a directory; name the file to write"),
        (tmp_path / "notes.txt" / "board.csv", "notes.txt is a file, so nothing can be written under it"),
    ):
        r = cli(*["run", str(slice_sweep), "--data-dir", str(data), "--output", str(output)])
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not data.exists()
    monkeypatch.setenv("RAG_LLM_TIMEOUT_S", "soon")
    from rag_core.planning.spec import SpecError
    from resources import build_resources

    with pytest.raises(SpecError, match=r"\$RAG_LLM_TIMEOUT_S='soon': expected a finite positive float"):
        build_resources(str(tmp_path))
    for bad in ("0", "nan", "inf", "-1"):  # 0, nan and inf were accepted, and then every call failed
        monkeypatch.setenv("RAG_LLM_TIMEOUT_S", bad)
        with pytest.raises(SpecError, match=rf"\$RAG_LLM_TIMEOUT_S='{bad}': expected a finite positive"):
            build_resources(str(tmp_path))
    monkeypatch.setenv("RAG_LLM_REQUESTS_PER_MINUTE", "nan")
    monkeypatch.setenv("RAG_LLM_TIMEOUT_S", "5")
    with pytest.raises(
        SpecError, match=r"\$RAG_LLM_REQUESTS_PER_MINUTE='nan': expected a finite non-negative"
    ):
        build_resources(str(tmp_path))
    monkeypatch.delenv("RAG_LLM_REQUESTS_PER_MINUTE")
    monkeypatch.setenv("RAG_LLM_TIMEOUT_S", "5")
    monkeypatch.setenv("RAG_LLM_MAX_RETRIES", "0")
    llm = build_resources(str(tmp_path))["llm"]
    assert (llm.timeout_s, llm.max_retries) == (5.0, 0)


@pytest.mark.slow
def test_run_counts_and_warns_about_chunks_longer_than_the_embedder_reads(tmp_path, capsys):
    words = [f"word{i}" for i in range(400)]
    docs = [{"doc_id": f"d{i}", "text": " ".join(words[i:] + words[:i]) + "."} for i in range(4)]
    corpus, qa = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    qa.write_text(
        json.dumps({"query_id": "q", "question": "word3?", "answers": ["word3"], "relevant_doc_ids": ["d1"]})
        + "\n"
    )
    spec = write_sweep(
        tmp_path / "s.yaml",
        {"corpus": corpus, "qa": qa},
        name="long-chunks",
        chunking=[
            {"method": "paragraph", "chunk_size": 8000, "chunk_overlap": 0},  # a whole ~800-token doc
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 0},  # well under 256 tokens
        ],
        retrieval={"mode": "vector", "top_k": 1},
    )
    assert (r := cli(*["run", str(spec), "--data-dir", str(tmp_path / "d")])).returncode == 0
    out, err = r.stdout, r.stderr
    warnings = [line for line in err.splitlines() if line.startswith("warning: embeddings[paragraph")]
    assert len(warnings) == 1 and re.search(
        r"(\d+) of \1 chunks \(100\.0%\) are longer than all-MiniLM-L6-v2 reads \(256", warnings[0]
    )
    assert not any(line.startswith("warning: embeddings[recursive") for line in err.splitlines())
    assert "Token indices sequence length" not in err  # the tokenizer's alarm; ours says what to do
    header = next(line for line in out.splitlines() if line.startswith("rank"))
    assert "truncated" in header  # shown only when some chunk is cut
    board = pl.read_parquet(tmp_path / "d" / "leaderboards" / "long-chunks.parquet")
    share = dict(
        zip(board["config_key"].str.split("__").list.first(), board["chunk_truncated_share"], strict=True)
    )
    assert share == {"paragraph-8000-0": 1.0, "recursive-300-0": 0.0}


@pytest.mark.slow
def test_the_plan_counts_what_a_run_then_computes(slice_data, tmp_path, capsys):
    import dagster as dg

    from rag_core.planning.stages import PARTITIONED
    from rag_sweep.runner import bill, run_sweep

    spec = write_sweep(tmp_path / "p.yaml", slice_data, name="billed", **SECTIONS)
    data = tmp_path / "data"
    plan, before = bill(str(spec), str(data))
    assert before.partitions["embeddings"] == (0, 1) and before.partitions["evaluations"] == (0, 2)
    assert before.texts_to_embed == 124 and not before.llm_calls  # extractive: no LLM
    run = run_sweep(str(spec), str(data), progress=False)
    computed, embedded = {}, 0
    for s in PARTITIONED:
        records = run.instance.fetch_materializations(dg.AssetKey(["billed", s.name]), limit=100).records
        fresh = [r for r in records if not r.asset_materialization.metadata["reused"].value]
        computed[s.name] = len(fresh)
        if s.name == "embeddings":
            embedded = sum(r.asset_materialization.metadata["embedding_calls"].value for r in fresh)
            (meta,) = [r.asset_materialization.metadata for r in fresh]
    assert computed == {s: new for s, (_, new) in before.partitions.items()}
    assert embedded == before.texts_to_embed
    # where the vectors were computed: the step's metadata, and each config's MLflow run from the artifact
    device = meta["embedded_now_on"].value
    assert device.startswith("cpu · ") and meta["embedded_on"].value == {device: 124}
    assert meta["device_setting"].value.startswith("auto: ")  # and why it took the CPU
    import mlflow

    client = mlflow.MlflowClient(run.defs.resources["tracking"].resolved_uri())
    experiment = client.get_experiment_by_name("billed")
    configs = client.search_runs([experiment.experiment_id], filter_string="tags.config_key != ''")
    assert len(configs) == 2 and {r.data.tags["embedded_on"] for r in configs} == {f"{device}: 124"}
    _, after = bill(str(spec), str(data))
    assert all(new == 0 for _, new in after.partitions.values()) and after.texts_to_embed == 0
    assert (r := cli(*["plan", str(spec), "--data-dir", str(data)])).returncode == 0
    assert "texts to embed: 0" in r.stdout
    assert "all-MiniLM-L6-v2 on cpu: ~" in r.stdout and "characters/s measured here" in r.stdout, r.stdout


@pytest.mark.slow
def test_keyword_search_over_text_without_spaces_is_warned_about_not_silent(tmp_path, capsys):
    """BM25 reads a run of Chinese characters as one word: a Chinese question finds nothing by keywords.
    validate and run say so, for the keyword configs only."""
    docs = [
        {"doc_id": "d0", "text": "长城是中国古代的军事防御工程，全长两万多公里。"},
        {"doc_id": "d1", "text": "黄河是中国第二长河，发源于青海省。"},
        {"doc_id": "d2", "text": "The Rhine flows from the Alps to the North Sea."},
    ]
    corpus, qa = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    qa.write_text(
        json.dumps(
            {
                "query_id": "q",
                "question": "长城全长多少公里？",
                "answers": ["两万多公里"],
                "relevant_doc_ids": ["d0"],
            },
            ensure_ascii=False,
        )
        + "\n"
    )
    spec = write_sweep(
        tmp_path / "s.yaml",
        {"corpus": corpus, "qa": qa},
        name="cjk",
        chunking={"method": "paragraph", "chunk_size": 1000, "chunk_overlap": 0},
        retrieval={"mode": ["vector", "bm25"], "top_k": 1},
    )
    assert (r := cli(*["validate", str(spec)])).returncode == 0
    err = r.stderr
    assert "warning: 67% of the documents and 100% of the questions are written without spaces" in err

    assert (r := cli(*["run", str(spec), "--data-dir", str(tmp_path / "d")])).returncode == 0
    warnings = [line for line in r.stderr.splitlines() if "without spaces" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: retrievals[paragraph-1000-0__all-minilm")
    assert "bm25" in warnings[0].split(":")[1]  # the keyword config's retrieval, not the vector one
    board = pl.read_parquet(tmp_path / "d" / "leaderboards" / "cjk.parquet")
    recall = dict(zip(board["config_key"].str.contains("bm25"), board["recall_at_k"], strict=True))
    assert recall[True] == 0.0  # what the warning is about


def test_validate_says_what_a_large_grid_means(slice_data, tmp_path, capsys):
    """A grid of thousands of configs: validate gives the steps a run takes and suggests sampling."""
    spec = write_sweep(
        tmp_path / "big.yaml",
        slice_data,
        chunking={"method": "recursive", "chunk_size": [200, 300, 400, 500, 600, 700], "chunk_overlap": 0},
        retrieval={
            "mode": "hybrid",
            "top_k": list(range(1, 11)),
            "hybrid_alpha": [i / 10 for i in range(10)],
        },
    )
    assert (r := cli(*["validate", str(spec)])).returncode == 0
    out, err = r.stdout, r.stderr
    assert "600 configs" in out and "a run evaluates all 600 configs: up to 2418 steps" in out
    assert "warning: 600 configs is a large grid" in err and "search.budget.max_configs" in err
    small = write_sweep(tmp_path / "small.yaml", slice_data, **SECTIONS)
    assert (r := cli(*["validate", str(small)])).returncode == 0
    assert "large grid" not in r.stderr


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder this process cannot write: a read-only mount (root writes through file modes), else 0o555."""
    import os
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)]).returncode:
        pytest.skip("root without the right to mount: no way to make a folder read-only for this process")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_data_dir_that_cannot_be_written_is_a_one_line_error_naming_it(
    slice_data, tmp_path, read_only_dir, capsys
):
    spec = write_sweep(tmp_path / "s.yaml", slice_data, **SECTIONS)
    for data in (read_only_dir, read_only_dir / "new"):  # an existing data dir, and one to create
        assert (r := cli(*["run", str(spec), "--data-dir", str(data)])).returncode == 2
        err = r.stderr
        assert f"error: data dir {data}: cannot write there (Read-only file system" in err or (
            f"error: data dir {data}: cannot write there (Permission denied" in err
        )
        assert "Traceback" not in err


def test_validate_piped_into_a_reader_that_leaves_ends_without_a_traceback(slice_data, tmp_path):
    """`rag-sweep validate … | head -1`: the reader leaves while 1,200 config keys (more than a pipe
    holds) are still to be written; the command ends quietly."""
    import subprocess
    import sys

    spec = write_sweep(
        tmp_path / "big.yaml",
        slice_data,
        name="big",
        chunking={"method": "recursive", "chunk_size": list(range(200, 1200, 50)), "chunk_overlap": 0},
        retrieval={"mode": ["vector", "bm25", "hybrid"], "top_k": list(range(1, 21))},
    )
    cmd = f"'{sys.executable}' -m rag_sweep.cli validate '{spec}' | head -1"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("big:") and out.stdout.count("\n") == 1
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr


def test_what_validate_and_plan_say_a_search_does_holds_for_the_sweep(tmp_path):
    """validate said a bayesian search "evaluates 100 of the 6 configs"; plan said halving "starts all of
    them on 50 questions" of a 10-question set."""
    import yaml

    example = ROOT / "examples" / "sweeps" / "example.yaml"
    spec = yaml.safe_load(example.read_text())
    data = {k: str((example.parent / v).resolve()) for k, v in spec["data"].items()}
    spec["data"] = {**data, "max_queries": 10}
    spec["decision"] = {"holdout": 0}
    bayes = tmp_path / "bayes.yaml"
    bayes.write_text(
        yaml.safe_dump({**spec, "search": {"strategy": "bayesian", "budget": {"max_configs": 100}}})
    )
    r = cli("validate", bayes)
    assert r.returncode == 0 and "a bayesian search evaluates all 12 configs" in r.stdout, r.stdout + r.stderr
    halving = tmp_path / "halving.yaml"
    halving.write_text(
        yaml.safe_dump(
            {**spec, "search": {"strategy": "halving", "start_questions": 50, "budget": {"max_configs": 5}}}
        )
    )
    r = cli("plan", halving, "--data-dir", tmp_path / "data")
    assert r.returncode == 0, r.stderr
    assert "12 configs; search halving starts 5 of the 12 on 10 questions" in r.stdout, r.stdout


def test_a_junk_gold_answer_is_a_counted_warning_not_a_refused_set(tmp_path):
    """A published set (CLAP NQ dev) has a gold answer '.' on one row: the whole set was refused."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"doc_id": "d1", "text": "Paris is the capital of France."}) + "\n")
    qa = tmp_path / "qa.jsonl"
    rows = [
        {
            "query_id": "q1",
            "question": "Capital of France?",
            "answers": ["Paris"],
            "relevant_doc_ids": ["d1"],
        },
        {"query_id": "q2", "question": "And of Spain?", "answers": ["."], "relevant_doc_ids": ["d1"]},
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = write_sweep(
        tmp_path / "s.yaml",
        {"corpus": corpus, "qa": qa},
        chunking={"method": "paragraph", "chunk_size": 200, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 1},
    )
    r = cli("validate", spec)
    assert r.returncode == 0, r.stderr
    assert "2 questions" in r.stdout
    assert f"warning: {qa}: field 'answers': 1 gold answer(s) empty once normalized" in r.stderr
    assert "line 2 answer 1 ('.')" in r.stderr and "1 question(s) left with no reference answer" in r.stderr


def test_an_optimize_budget_too_small_for_the_qa_set_is_refused_before_any_work(tmp_path):
    """A budget the QA set's size rules out passed validate and plan, and failed after the whole sweep ran."""
    corpus, qa = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_text(json.dumps({"doc_id": "d1", "text": "Paris is the capital of France."}) + "\n")
    rows = [
        {"query_id": f"q{i}", "question": f"Capital {i}?", "answers": ["Paris"], "relevant_doc_ids": ["d1"]}
        for i in range(10)
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = write_sweep(
        tmp_path / "s.yaml",
        {"corpus": corpus, "qa": qa},
        chunking={"method": "paragraph", "chunk_size": 200, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 1},
        generation={"model": "openai/gpt-4o-mini"},
        decision={"holdout": 0.3},  # 7 selection questions: 4 validate, 3 train
        optimize={"reflection_model": "openai/gpt-4o", "budget": {"max_metric_calls": 10}},
    )
    message = (
        "field 'optimize.budget.max_metric_calls': 10 cannot hold the seed's validation and one iteration on "
        "the 7 selection questions the QA set (10 questions) gives (the holdout aside)"
    )
    data = tmp_path / "data"
    for args in (["validate", spec], ["plan", spec, "--data-dir", data], ["run", spec, "--data-dir", data]):
        r = cli(*args)
        assert r.returncode == 2 and message in r.stderr and "give at least 14" in r.stderr, r.stderr
    assert not (data / "dagster_home").exists()  # no step ran


def test_the_recommendation_says_what_each_undefined_metric_needs(tmp_path, monkeypatch, capsys):
    """A BEIR set (no answers) was told its exact_match and token_f1 needed gold documents."""
    from rag_sweep import printing as cli_module  # what the CLI prints

    decision = {
        "recommended": "bm25",
        "why": "best",
        "advice": "",
        "undefined_metrics": ["exact_match", "token_f1"],
    }
    monkeypatch.setattr(cli_module, "read_decision", lambda data, sweep: decision)
    cli_module._print_recommendation(tmp_path, "beir")
    out = capsys.readouterr().out
    assert "left out of the overall score: exact_match, token_f1 (no question has what they need: " in out
    assert "exact_match, token_f1 need reference answers (answers))" in out and "gold doc" not in out


def test_a_warning_while_the_shipping_module_loads_does_not_break_the_cli():
    """MLflow warns while resources/shipping/pipeline.py defines its model class; the CLI's warning handler imported
    resources.shipping.bundle to recognise an ExportWarning and failed on the half-imported module, so `rag-sweep run`
    crashed (ImportError) where it first loads the shipping code: before registering the champion."""
    import subprocess
    import sys

    code = (
        "import warnings\n"
        "from rag_sweep import cli\n"
        "warnings.showwarning = cli._show_warning\n"
        "import resources.shipping.bundle\n"
        "warnings.warn(resources.shipping.bundle.ExportWarning('no holdout figure'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning: no holdout figure" in done.stderr
