"""`rag-sweep validate` checks the sweep and its data (cheap), naming the field; exit 2 on bad input."""

from __future__ import annotations

import json

from rag_assets.cli import main
from tests.conftest import write_sweep

SECTIONS = {
    "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    "retrieval": {"mode": ["vector", "bm25"], "top_k": 3},
}


def test_validate_loads_the_data(slice_data, tmp_path, capsys):
    spec = write_sweep(tmp_path / "ok.yaml", slice_data, **SECTIONS)
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert f"{slice_data['n_docs']} documents, 20 questions; 2 configs" in out


def test_validate_names_the_field_of_missing_or_bad_data(slice_data, tmp_path, capsys):
    missing = write_sweep(
        tmp_path / "m.yaml", {**slice_data, "corpus": tmp_path / "nope.parquet"}, **SECTIONS
    )
    assert main(["validate", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "field 'data.corpus'" in err and "nope.parquet: file not found" in err
    bad_qa = tmp_path / "qa.jsonl"
    bad_qa.write_text(
        json.dumps({"query_id": "q", "question": "?", "answers": 3, "relevant_doc_ids": []}) + "\n"
    )
    bad = write_sweep(tmp_path / "b.yaml", {**slice_data, "qa": bad_qa}, **SECTIONS)
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "field 'data.qa'" in err and "line 1: field 'answers' must be a list of strings" in err
