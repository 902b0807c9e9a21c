"""`rag-sweep calibrate-judge`: how far the sweep's LLM judge agrees with people (rag_core/metrics/judge_agreement.py).

The labels file (JSONL, CSV or Parquet) has one row per labelled answer: `question`, `answer`, `context` (the
passages the answer was given, as the judge sees them) and `supported` (true/false, 1/0 or yes/no: did the
person find every claim of the answer in the context). The judge is asked exactly what a sweep's evaluation
asks it (the faithfulness prompt, temperature 0), through the data dir's LLM call cache.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rag_core.planning.spec import SpecError
from resources import environment
from resources.storage import data_root

TRUE, FALSE = {"true", "1", "yes", "y", "supported"}, {"false", "0", "no", "n", "unsupported"}
FIELDS = ("question", "answer", "context", "supported")


def add_parser(sub) -> None:
    cal = sub.add_parser(
        "calibrate-judge",
        help="the sweep's LLM judge against human labels: Cohen's kappa and accuracy with 95%% intervals, the "
        "confusion table, base rates and length bias; exit 0 trusted, 1 below --min-kappa, 3 undefined",
    )
    cal.add_argument("spec", help="sweep YAML file: its evaluation.judge_model is the judge")
    cal.add_argument(
        "--labels", required=True, help="JSONL, CSV or Parquet: question, answer, context, supported"
    )
    cal.add_argument("--model", help="another litellm model than the sweep's judge")
    cal.add_argument("--threshold", type=float, default=0.5, help="a score at or above it is 'supported'")
    cal.add_argument("--min-kappa", type=float, default=0.6, help="the agreement a trusted judge reaches")
    cal.add_argument("--json", help="also write the figures to this file")
    cal.add_argument(
        "--data-dir", help="where the LLM call cache lives (default $RAG_DATA_DIR or ./.rag_data)"
    )


def read_labels(path: str) -> tuple[list[dict], list[bool]]:
    """The labelled rows and their labels; a missing field or a label that is no yes/no is an error naming
    the file, the row (1-based) and the field, before any call."""
    import polars as pl

    file = Path(path)
    if not file.is_file():
        raise SpecError(f"--labels {path}: no such file")
    try:
        frame = {
            ".jsonl": lambda: pl.read_ndjson(file),
            ".csv": lambda: pl.read_csv(file),
            ".parquet": lambda: pl.read_parquet(file),
        }[file.suffix.lower()]()
    except KeyError:
        raise SpecError(f"--labels {path}: expected a .jsonl, .csv or .parquet file") from None
    except Exception as e:  # a file its reader cannot parse
        raise SpecError(f"--labels {path}: cannot be read ({type(e).__name__}: {e})") from None
    missing = [f for f in FIELDS if f not in frame.columns]
    if missing:
        raise SpecError(
            f"--labels {path}: no field {', '.join(missing)} (each row needs {', '.join(FIELDS)})"
        )
    rows, labels = [], []
    for n, row in enumerate(frame.select(FIELDS).iter_rows(named=True), start=1):
        for f in ("question", "answer", "context"):
            if not isinstance(row[f], str) or (f != "answer" and not row[f].strip()):
                raise SpecError(f"{path}: row {n}, field '{f}': expected text, got {row[f]!r}")
        value = str(row["supported"]).strip().lower()
        if value not in TRUE | FALSE:
            raise SpecError(
                f"{path}: row {n}, field 'supported': expected true/false, 1/0 or yes/no, got {row['supported']!r}"
            )
        rows.append(row)
        labels.append(value in TRUE)
    if not rows:
        raise SpecError(f"--labels {path}: no rows")
    return rows, labels


def run(args) -> int:
    from orchestration.plans import load_plan
    from rag_core.common.concurrency import map_concurrently
    from rag_core.metrics.judge import judge_prompt, parse_verdict
    from rag_core.metrics.judge_agreement import MIN_LABELS, agreement
    from resources.llm import llm_from_env

    model = args.model or load_plan(args.spec).sweep.judge_model
    if not model:
        raise SpecError(f"{args.spec}: no judge to calibrate: set evaluation.judge_model, or give --model")
    rows, labels = read_labels(args.labels)  # before any call
    if len(rows) < MIN_LABELS:
        print(f"warning: {len(rows)} labels: the intervals are wide below {MIN_LABELS}", file=sys.stderr)
    data = data_root(args.data_dir or environment.default_data_dir())
    llm = llm_from_env(cache_path=str(data / "llm_cache.sqlite"))

    def score(row: dict) -> float | None:
        if not row["answer"].strip():  # as the evaluation: an empty answer scores 0 without a call
            return 0.0
        reply = llm.complete(
            model, judge_prompt(row["question"], row["answer"], row["context"]), temperature=0.0, max_tokens=8
        )
        return None if reply.error else parse_verdict(reply.text)

    scores = map_concurrently(score, rows, llm.max_concurrency, what="answers judged")
    try:
        result = agreement(labels, scores, [len(r["answer"]) for r in rows], args.threshold)
    except ValueError as e:
        raise SpecError(f"{model}: {e}") from None
    print(f"judge {model} against {len(rows)} labels of {args.labels}")
    print("\n".join(result.lines(args.min_kappa)))
    if args.json:
        figures = {"model": model, "labels": str(args.labels), "threshold": args.threshold}
        figures |= {
            "min_kappa": args.min_kappa,
            "verdict": result.verdict(args.min_kappa),
            **result.as_dict(),
        }
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return {"trusted": 0, "below the floor": 1, "undefined": 3}[result.verdict(args.min_kappa)]
