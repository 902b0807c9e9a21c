"""QA sets in the formats teams already have, read into the project's rows (query_id, question, answers,
relevant_doc_ids[, relevant_doc_grades]); `rag_core.data.datasets.load_qa` then validates them as any QA set.

- BEIR: a folder with `queries.jsonl` (`_id`, `text`) and `qrels/<split>.tsv` (query-id, corpus-id, score;
  graded: every score > 0 is a gold document of that grade; a score is a finite number written plainly; the
  first line is a header if it names those columns), or the qrels file itself. BEIR has no answers.
- Ragas test set (JSONL/Parquet): `user_input`, `reference`, `reference_contexts`; the gold documents are
  the corpus documents that contain a reference context (whitespace and case aside).
- MLflow evaluation dataset export (`EvaluationDataset.to_df()` as JSONL/Parquet, or its records):
  `inputs` (the question under `question`, `query`, `request` or `input`), `expectations`
  (`expected_response`, `expected_retrieved_context` [{doc_uri}] or `expected_document_ids`).

Each row keeps `__where__` (file and line or row) so errors name it.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from rag_core.data.rows import DatasetError, finite_grade, read_rows
from rag_core.data.rows import where as place_of

QUESTION_KEYS = ("question", "query", "request", "input", "user_input")


def detect(path: Path, rows: list[dict] | None) -> str:
    """'beir', 'ragas', 'mlflow' or 'native' (the project's own format)."""
    if path.is_dir() or (path.suffix == ".tsv" and path.parent.name == "qrels"):
        return "beir"
    first = rows[0] if rows else {}
    if "user_input" in first:
        return "ragas"
    if "inputs" in first and "query_id" not in first:
        return "mlflow"
    return "native"


# ---- BEIR ----------------------------------------------------------------------------------------------


def beir_qrels_file(path: Path) -> Path:
    if path.is_file():
        return path
    qrels = sorted((path / "qrels").glob("*.tsv")) if (path / "qrels").is_dir() else []
    if not (path / "queries.jsonl").exists() or not qrels:
        raise DatasetError(
            f"{path}: not a QA set folder: a BEIR dataset holds queries.jsonl and qrels/<split>.tsv"
        )
    test = path / "qrels" / "test.tsv"
    if test.exists():
        return test
    if len(qrels) > 1:
        names = ", ".join(q.name for q in qrels)
        raise DatasetError(f"{path}: several qrels splits ({names}) and no test.tsv: name the split's file")
    return qrels[0]


def read_beir(path: Path) -> list[dict[str, Any]]:
    qrels_file = beir_qrels_file(path)
    queries_file = qrels_file.parent.parent / "queries.jsonl"
    if not queries_file.exists():
        raise DatasetError(f"{qrels_file}: BEIR qrels need {queries_file} beside their qrels/ folder")
    gold: dict[str, dict[str, float]] = {}
    # utf-8-sig: a byte-order mark a spreadsheet wrote would hide the header's first name
    with qrels_file.open(encoding="utf-8-sig", newline="") as fh:
        for lineno, fields in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not fields or (lineno == 1 and _is_header(fields)):
                continue
            if len(fields) != 3:
                raise DatasetError(
                    f"{qrels_file}: line {lineno}: expected 3 tab-separated fields "
                    f"(query-id, corpus-id, score), got {len(fields)}"
                )
            qid, doc_id, score = fields
            hint = " (a header line names the columns query-id, corpus-id, score)" if lineno == 1 else ""
            try:
                grade = finite_grade(score, f"{qrels_file}: line {lineno}", "score")
            except DatasetError as e:
                raise DatasetError(f"{e}{hint}") from None
            if grade > 0:  # 0: judged not relevant
                gold.setdefault(qid, {})[doc_id] = grade
    rows = []
    seen: dict[str, int] = {}
    for q in read_rows(queries_file):  # names the line of invalid JSON
        lineno = q["__row__"]
        qid = str(q.get("_id", ""))
        if not qid:
            raise DatasetError(f"{queries_file}: line {lineno}: field '_id' is missing")
        if (
            qid in seen
        ):  # which of the two texts the qrels judge cannot be known: refused, as native files are
            raise DatasetError(
                f"{queries_file}: line {lineno}: field '_id': duplicate id {qid!r} (first at line {seen[qid]})"
            )
        seen[qid] = lineno
        if qid not in gold:  # BEIR evaluates the queries its split judges
            continue
        docs = gold.pop(qid)
        rows.append(
            {
                "__where__": f"{queries_file}: line {lineno}",
                "query_id": qid,
                "question": q.get("text"),
                "answers": [],
                "relevant_doc_ids": list(docs),
                "relevant_doc_grades": list(docs.values()),
            }
        )
    if gold:
        missing = sorted(gold)[:3]
        raise DatasetError(f"{qrels_file}: field 'query-id': {missing} have no query in {queries_file}")
    if not rows:
        raise DatasetError(f"{qrels_file}: no query has a document with a score > 0")
    return rows


# the names BEIR gives the qrels columns, and the spellings other exports use
HEADER_NAMES = (
    {"query-id", "query_id", "qid"},
    {"corpus-id", "corpus_id", "doc-id", "doc_id", "docid"},
    {"score"},
)


def _is_header(fields: list[str]) -> bool:
    """Line 1 is a header only if it names the columns: a data row whose score is not a number is an error,
    not a header to skip (that dropped the row's query silently)."""
    return len(fields) == len(HEADER_NAMES) and all(
        f.strip().lower() in names for f, names in zip(fields, HEADER_NAMES, strict=True)
    )


# ---- Ragas ---------------------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def read_ragas(path: Path, rows: list[dict], corpus: list[tuple[str, str]] | None) -> list[dict[str, Any]]:
    """`corpus`: (doc_id, text) pairs, to find each reference context's document."""
    if corpus is None:
        raise DatasetError(f"{path}: a Ragas test set needs the corpus to find its gold documents")
    docs = [(doc_id, _squash(text)) for doc_id, text in corpus]
    out = []
    for i, row in enumerate(rows):
        where = place_of(path, row, i)
        contexts = row.get("reference_contexts")
        if isinstance(contexts, str):  # a CSV export holds the list as JSON text
            try:
                contexts = json.loads(contexts)
            except json.JSONDecodeError:
                raise DatasetError(f"{where}: field 'reference_contexts' must be a list of strings") from None
        if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
            raise DatasetError(f"{where}: field 'reference_contexts' must be a list of strings")
        gold = []
        for context in contexts:
            needle = _squash(context)
            gold += [d for d, text in docs if needle and needle in text and d not in gold]
        if contexts and not gold:
            raise DatasetError(
                f"{where}: field 'reference_contexts': none of its {len(contexts)} contexts is found in a "
                f"corpus document (first: {contexts[0][:80]!r}); is this the corpus the set was made from?"
            )
        reference = row.get("reference")
        out.append(
            {
                "__where__": where,
                "query_id": str(row.get("query_id") or f"ragas-{i + 1}"),
                "question": row.get("user_input"),
                "answers": [reference] if isinstance(reference, str) and reference.strip() else [],
                "relevant_doc_ids": gold,
            }
        )
    return out


# ---- MLflow --------------------------------------------------------------------------------------------


def _as_mapping(value: Any, where: str, field: str) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DatasetError(f"{where}: field '{field}' must be a JSON object") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: field '{field}' must be a JSON object, got {type(value).__name__}")
    return {k: v for k, v in value.items() if v is not None}  # Parquet structs hold every key, null or not


def read_mlflow(path: Path, rows: list[dict]) -> list[dict[str, Any]]:
    out = []
    for i, row in enumerate(rows):
        where = place_of(path, row, i)
        inputs = _as_mapping(row.get("inputs"), where, "inputs")
        question = next((inputs[k] for k in QUESTION_KEYS if k in inputs), None)
        if question is None and len(inputs) == 1:
            question = next(iter(inputs.values()))
        if not isinstance(question, str):
            raise DatasetError(
                f"{where}: field 'inputs': no question (a string under one of {', '.join(QUESTION_KEYS)})"
            )
        expect = _as_mapping(row.get("expectations"), where, "expectations")
        response = expect.get("expected_response")
        answers = [response] if isinstance(response, str) and response.strip() else []
        gold = expect.get("expected_document_ids") or [
            c.get("doc_uri") for c in expect.get("expected_retrieved_context") or [] if isinstance(c, dict)
        ]
        if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
            raise DatasetError(
                f"{where}: field 'expectations': expected_retrieved_context needs a doc_uri per entry "
                "(or give expected_document_ids, a list of strings)"
            )
        out.append(
            {
                "__where__": where,
                "query_id": str(row.get("dataset_record_id") or row.get("query_id") or f"mlflow-{i + 1}"),
                "question": question,
                "answers": answers,
                "relevant_doc_ids": list(dict.fromkeys(gold)),
            }
        )
    return out
