"""Loading and validating the corpus and the QA set.

Corpus: Parquet or JSONL with `doc_id`, `text` (`title`, `metadata` optional), or a directory of `.txt`/`.md`
files (doc_id = path relative to the directory, title = file stem).
QA set: Parquet or JSONL with `query_id`, `question`, `answers` (list of strings), `relevant_doc_ids` (list,
may be empty); BEIR, Ragas and MLflow evaluation datasets are read too (rag_core/data/qa/formats.py).
Errors name the file, the row (1-based; the line for JSONL) and the field.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import polars as pl

from rag_core.data.qa import formats
from rag_core.data.rows import DatasetError, finite_grade, read_rows, where


class DataWarning(UserWarning):
    """Rows or values a loader could not use and dropped: the message says what, where and how many."""


CORPUS_SCHEMA = {"doc_id": pl.String, "title": pl.String, "text": pl.String, "metadata": pl.String}
QA_SCHEMA = {
    "query_id": pl.String,
    "question": pl.String,
    "answers": pl.List(pl.String),
    "relevant_doc_ids": pl.List(pl.String),
}


def _string(path: Path, row: dict, i: int, field: str, required: bool = True) -> str | None:
    value = row.get(field)
    if value is None:
        if required:
            raise DatasetError(f"{where(path, row, i)}: field '{field}' is missing")
        return None
    if not isinstance(value, str):
        raise DatasetError(
            f"{where(path, row, i)}: field '{field}' must be a string, got {type(value).__name__}"
        )
    if required and not value.strip():
        raise DatasetError(f"{where(path, row, i)}: field '{field}' is empty")
    return value


def _string_list(path: Path, row: dict, i: int, field: str) -> list[str]:
    value = row.get(field)
    if value is None:
        raise DatasetError(f"{where(path, row, i)}: field '{field}' is missing")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise DatasetError(f"{where(path, row, i)}: field '{field}' must be a list of strings")
    return list(value)


def _utf8(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"{file}: not UTF-8 text (byte {e.start}: {e.reason}); re-encode it as UTF-8 or remove it"
        ) from None


def _metadata(path: Path, row: dict, i: int) -> dict | None:
    """A JSON object, given as a mapping (JSONL) or as its JSON text (a Parquet string column)."""
    meta = row.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta.strip() else None
        except json.JSONDecodeError:
            raise DatasetError(f"{where(path, row, i)}: field 'metadata' is a string but not JSON") from None
    if meta is not None and not isinstance(meta, dict):
        raise DatasetError(
            f"{where(path, row, i)}: field 'metadata' must be a JSON object, got {type(meta).__name__}"
        )
    return meta


def load_corpus(path: str | Path) -> pl.DataFrame:
    """The project's corpus format, a folder of text files, or a BEIR corpus (`corpus.jsonl` with `_id`,
    `title`, `text`, or the BEIR dataset folder holding it)."""
    path = Path(path)
    if path.is_dir() and (path / "corpus.jsonl").is_file():
        path = path / "corpus.jsonl"
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".md") and p.is_file())
        if not files:
            raise DatasetError(f"{path}: directory holds no .txt or .md files")
        rows = [{"doc_id": str(f.relative_to(path)), "title": f.stem, "text": _utf8(f)} for f in files]
    else:
        rows = read_rows(path)
    out, seen = [], {}
    for i, row in enumerate(rows):
        if "doc_id" not in row and "_id" in row:  # BEIR
            row["doc_id"] = str(row["_id"])
        doc_id = _string(path, row, i, "doc_id")
        if doc_id in seen:
            raise DatasetError(
                f"{where(path, row, i)}: field 'doc_id': duplicate id {doc_id!r} (first at row {seen[doc_id] + 1})"
            )
        seen[doc_id] = i
        meta = _metadata(path, row, i)
        out.append(
            {
                "doc_id": doc_id,
                "title": _string(path, row, i, "title", required=False) or "",
                "text": _string(path, row, i, "text"),
                "metadata": json.dumps(meta, sort_keys=True, default=str) if meta is not None else "{}",
            }
        )
    if not out:
        raise DatasetError(f"{path}: the corpus is empty")
    return pl.DataFrame(out, schema=CORPUS_SCHEMA)


_LANGUAGE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*$")


def language_code(value: str) -> str:
    """A BCP 47 tag's language, as the metrics name it: `zh-CN` -> `zh`, `EN` -> `en`; ValueError otherwise."""
    if not _LANGUAGE.match(value):
        raise ValueError(f"{value!r} is not a language tag (an ISO 639 code such as en, zh or de-CH)")
    return re.split(r"[-_]", value)[0].lower()


def _language(path: Path, row: dict, i: int) -> str | None:
    value = _string(path, row, i, "language", required=False)
    if value is None:
        return None
    try:
        return language_code(value)
    except ValueError as e:
        raise DatasetError(f"{where(path, row, i)}: field 'language': {e}") from None


def _warn_uncovered(path: Path, languages: list[str | None]) -> None:
    from rag_core.metrics.languages import COVERED

    counts: dict[str, int] = {}
    for lang in languages:
        if lang is not None and lang not in COVERED:
            counts[lang] = counts.get(lang, 0) + 1
    if counts:
        named = ", ".join(f"{lang} ({n})" for lang, n in sorted(counts.items()))
        warnings.warn(
            DataWarning(
                f"{path}: field 'language': {sum(counts.values())} question(s) in a language with no answer "
                f"normalization of its own ({named}; those with one: {', '.join(sorted(COVERED))}): scored with "
                "Unicode punctuation removed, no articles and whitespace tokens, so an answer in a script "
                "written without spaces is one token"
            ),
            stacklevel=3,
        )


def load_qa(
    path: str | Path,
    known_doc_ids: set[str] | None = None,
    max_queries: int | None = None,
    corpus: pl.DataFrame | None = None,
    language: str | None = None,
    detect: bool = False,
) -> pl.DataFrame:
    """The project's QA format, or BEIR, Ragas or an MLflow evaluation dataset (rag_core/data/qa/formats.py);
    `corpus` (doc_id, text) finds the gold documents of a Ragas set. A `language` per question (else the
    set's `language`) is how its answers are normalized (rag_core/metrics/languages.py); the column is kept
    when the file has one. `detect` (data.language: auto): a question without its own `language` gets the
    language its answers are scored in (`scoring_language`: its gold documents', else its gold answers',
    else its own); the languages found are said, and the unsure ones (scored without a language) counted."""
    from rag_core.metrics.languages import normalize, scoring_language

    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: file not found")
    rows = _qa_rows(path, corpus)
    out, seen = [], set()
    junk: list[str] = []  # the gold answers nothing can match, where they were
    detected: dict[str, str | None] = {}  # data.language auto: query id -> the language found (None: unsure)
    doc_text: dict[str, str] | None = None  # the corpus's texts by id, read when a language is detected
    emptied = 0  # questions left with no reference answer by dropping them
    blank: list[str] = []  # questions with no reference answer and no gold document: nothing to score against
    for i, row in enumerate(rows):
        qid = _string(path, row, i, "query_id")
        if qid in seen:
            raise DatasetError(f"{where(path, row, i)}: field 'query_id': duplicate id {qid!r}")
        seen.add(qid)
        rel = _string_list(path, row, i, "relevant_doc_ids")
        if known_doc_ids is not None:
            missing = [d for d in rel if d not in known_doc_ids]
            if missing:
                raise DatasetError(
                    f"{where(path, row, i)}: field 'relevant_doc_ids': {missing[:3]} not in the corpus"
                )
        answers = _string_list(path, row, i, "answers")
        question = _string(path, row, i, "question")
        lang = _language(path, row, i)
        if lang is None and detect:
            if doc_text is None:
                doc_text = (
                    dict(zip(corpus["doc_id"], corpus["text"], strict=True)) if corpus is not None else {}
                )
            # None when unsure: scored without a language
            lang = scoring_language(answers, [doc_text[d] for d in rel if d in doc_text], question)
            detected[qid] = lang
        # an answer empty once normalized would be matched by an empty (failed) answer, EM 1 and F1 1: it is
        # not scored. Published sets have a few ('.'): dropped and counted, not a reason to refuse the set
        kept = [a for a in answers if normalize(a, lang or language)]
        if len(kept) < len(answers):
            junk += [
                f"{where(path, row, i)} answer {j + 1} ({a!r})"
                for j, a in enumerate(answers)
                if a not in kept
            ]
            emptied += not kept
            answers = kept
        if not answers and not rel and row.get("question_type") != "unanswerable":  # generated ones: meant so
            blank.append(f"{where(path, row, i)} ({qid!r})")
        out.append(
            {
                "query_id": qid,
                "question": question,
                "answers": answers,
                "relevant_doc_ids": rel,
                "relevant_doc_grades": _grades(path, row, i, len(rel)),
                "language": lang,
            }
        )
    if not out:
        raise DatasetError(f"{path}: the QA set is empty")
    _warn_unscorable(path, junk, emptied, blank)
    out = _once(path, out)
    if max_queries is not None:
        out = out[:max_queries]
    _warn_detected(path, [detected[r["query_id"]] for r in out if r["query_id"] in detected])
    _warn_uncovered(path, [r["language"] or language for r in out])
    return _qa_frame(out)


def _qa_rows(path: Path, corpus: pl.DataFrame | None) -> list[dict]:
    """The file's rows in the project's format, whichever of the formats it is in."""
    rows = None if path.is_dir() or path.suffix == ".tsv" else read_rows(path)
    kind = formats.detect(path, rows)
    if kind == "beir":
        return formats.read_beir(path)
    if kind == "ragas":
        pairs = list(zip(corpus["doc_id"], corpus["text"], strict=True)) if corpus is not None else None
        return formats.read_ragas(path, rows, pairs)
    if kind == "mlflow":
        return formats.read_mlflow(path, rows)
    return rows


def _warn_unscorable(path: Path, junk: list[str], emptied: int, blank: list[str]) -> None:
    """Say what was dropped (gold answers empty once normalized) and what nothing can score."""
    if junk:
        warnings.warn(
            DataWarning(
                f"{path}: field 'answers': {len(junk)} gold answer(s) empty once normalized (case, punctuation "
                f"and articles removed) dropped, as no answer can be judged against them ({junk[0]}"
                f"{', …' if len(junk) > 1 else ''}); {emptied} question(s) left with no reference answer "
                "(their answer metrics are undefined, as for a question without gold documents)"
            ),
            stacklevel=3,
        )
    if blank:
        warnings.warn(
            DataWarning(
                f"{path}: {len(blank)} question(s) with no reference answer and no gold document ({blank[0]}"
                f"{', …' if len(blank) > 1 else ''}): no retrieval or answer metric can score them (only a "
                "judge's); give them `answers` or `relevant_doc_ids`, or mark them question_type unanswerable"
            ),
            stacklevel=3,
        )


def _warn_detected(path: Path, found: list[str | None]) -> None:
    """data.language: auto: say the languages found for the questions kept (None: unsure)."""
    from rag_core.metrics.languages import UNSURE

    if not found:
        return
    counts: dict[str, int] = {}
    for lang in found:
        counts[lang or "unsure"] = counts.get(lang or "unsure", 0) + 1
    named = ", ".join(f"{lang} {n}" for lang, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    warnings.warn(
        DataWarning(
            f"{path}: field 'language' detected (data.language: auto: the gold documents', else the gold "
            f"answers', else the question's) for {len(found)} question(s): {named} "
            f"(unsure: below {UNSURE:g} confidence, scored without a language as SQuAD's script does; short "
            "questions say little: give a `language` column where it matters)"
        ),
        stacklevel=3,
    )


def _qa_frame(out: list[dict]) -> pl.DataFrame:
    """The QA set's frame: a grades column only for a graded set, a language column only where a question
    has one."""
    schema = dict(QA_SCHEMA)
    if all(r["relevant_doc_grades"] is None for r in out):  # binary relevance: no grades column
        out = [{k: v for k, v in r.items() if k != "relevant_doc_grades"} for r in out]
    else:
        for r in out:  # a row without grades in a graded set: its gold documents have grade 1
            r["relevant_doc_grades"] = r["relevant_doc_grades"] or [1.0] * len(r["relevant_doc_ids"])
        schema["relevant_doc_grades"] = pl.List(pl.Float64)
    if all(r["language"] is None for r in out):  # no language per question: no column
        out = [{k: v for k, v in r.items() if k != "language"} for r in out]
    else:
        schema["language"] = pl.String
    return pl.DataFrame(out, schema=schema)


def question_key(question: str, relevant_doc_ids: list[str], language: str | None = None) -> str:
    """What makes two rows one question: the question normalized (case, punctuation, articles and white
    space, as answers are), its gold documents as a set and its declared language (the same words asked of a
    set in two languages are two questions, each scored in its own)."""
    from rag_core.metrics.languages import normalize

    text = normalize(question, language) or " ".join(question.lower().split())
    return json.dumps([text, sorted(set(relevant_doc_ids)), language or ""], ensure_ascii=False)


def _once(path: Path, rows: list[dict]) -> list[dict]:
    """Each question counted once: a row with the same normalized question and gold documents as an earlier
    one is folded into it (its gold answers added), and the count said. Two copies of a question would count
    its evidence twice (a paired test's p, an interval) and could fall on both sides of the holdout split."""
    first: dict[str, dict] = {}
    folded: list[tuple[str, str]] = []
    kept = []
    for row in rows:
        key = question_key(row["question"], row["relevant_doc_ids"], row.get("language"))
        if key in first:
            into = first[key]
            into["answers"] = into["answers"] + [a for a in row["answers"] if a not in into["answers"]]
            folded.append((row["query_id"], into["query_id"]))
            continue
        first[key] = row
        kept.append(row)
    if folded:
        example = ", ".join(f"{a!r} = {b!r}" for a, b in folded[:3]) + (", …" if len(folded) > 3 else "")
        warnings.warn(
            DataWarning(
                f"{path}: {len(folded)} duplicate question(s) (the same question, normalized, with the same gold "
                f"documents as an earlier row: {example}) counted once, their gold answers joined: "
                f"{len(kept)} questions remain"
            ),
            stacklevel=3,
        )
    return kept


def _grades(path: Path, row: dict, i: int, n: int) -> list[float] | None:
    """Optional graded relevance: `relevant_doc_grades`, finite numbers > 0 aligned with `relevant_doc_ids`
    (JSON's NaN and Infinity, which Python reads, are refused as a qrels file's 'nan' and 'inf' are)."""
    value = row.get("relevant_doc_grades")
    if value is None:
        return None
    if not isinstance(value, list):
        raise DatasetError(f"{where(path, row, i)}: field 'relevant_doc_grades' must be a list of numbers")
    if any(isinstance(g, str) for g in value):  # a number as text is not a number in a JSON list
        raise DatasetError(f"{where(path, row, i)}: field 'relevant_doc_grades' must be a list of numbers")
    grades = [finite_grade(g, where(path, row, i), "relevant_doc_grades") for g in value]
    if len(grades) != n or any(g <= 0 for g in grades):
        raise DatasetError(
            f"{where(path, row, i)}: field 'relevant_doc_grades' needs one grade > 0 per relevant_doc_ids entry"
        )
    return grades
