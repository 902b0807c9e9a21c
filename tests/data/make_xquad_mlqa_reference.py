"""Write xquad_mlqa_reference.jsonl: answers to the XQuAD slice's questions, scored by MLQA's own script.

Scores come from MLQA's official evaluation script (mlqa_evaluation_v1.py) read from a git copy of
facebookresearch/MLQA at a named commit and run as it is (its `metric_max_over_ground_truths` over
`exact_match_score` and `f1_score`); nothing of this project scores them. The predictions:

  * `extractive <mode>`: the answers the example sweep (examples/sweeps/multilingual.yaml) gave with its
    extractive reader, per config (read from the sweep's MLflow runs in DATA_DIR), empty answers left out
    and an answer two configs gave kept once;
  * `widened`: the gold answer with the word before and the word after it in its gold paragraph (Chinese:
    the character before and after, spaces aside), the span boundary error extractive readers make;
  * `narrowed`: the gold answer without its last word (Chinese: its last character), when it has two or more.

Only MLQA's languages (the script refuses others). Usage, after `rag-sweep run examples/sweeps/multilingual.yaml
--data-dir DATA_DIR`:

  python tests/data/make_xquad_mlqa_reference.py --mlqa MLQA_GIT_DIR --data-dir DATA_DIR
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import types
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
SLICE = ROOT / "examples" / "data" / "xquad_multilingual"
OUT = Path(__file__).with_name("xquad_mlqa_reference.jsonl")
# mlqa_evaluation_v1.py as first committed; no later commit changed it (HEAD 24bf470 holds the same blob)
MLQA_COMMIT = "5ef5c731a96acb7008b51aac4acb5fa9dff4f297"
MLQA_LANGS = ("en", "es", "de", "vi", "ar", "hi", "zh")
EXPERIMENT = "xquad-multilingual"
CONFIGS = ("bm25", "vector")  # the example sweep's run names


def mlqa_script(git_dir: Path) -> types.ModuleType:
    source = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{MLQA_COMMIT}:mlqa_evaluation_v1.py"],
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8")
    module = types.ModuleType("mlqa_evaluation_v1")
    exec(compile(source, "mlqa_evaluation_v1.py", "exec"), module.__dict__)
    return module


def sweep_answers(data_dir: Path) -> dict[str, dict[str, str]]:
    """Per config run name, query id -> the answer, from the runs' per_question.json artifacts."""
    db = sqlite3.connect(data_dir / "mlflow.db")
    rows = db.execute(
        "SELECT r.name, r.run_uuid FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
        "WHERE e.name = ? AND r.lifecycle_stage = 'active' ORDER BY r.start_time",
        (EXPERIMENT,),
    ).fetchall()
    runs = {name: run for name, run in rows if name in CONFIGS}  # the latest run of each config
    out = {}
    for name in CONFIGS:
        art = data_dir / "mlartifacts" / EXPERIMENT / runs[name] / "artifacts" / "per_question.json"
        table = json.loads(art.read_text("utf-8"))
        cols = table["columns"]
        out[name] = {r[cols.index("query_id")]: r[cols.index("answer")] or "" for r in table["data"]}
    return out


def _word_start(text: str, i: int) -> int:
    while i > 0 and not text[i - 1].isspace():
        i -= 1
    return i


def _word_end(text: str, i: int) -> int:
    while i < len(text) and not text[i].isspace():
        i += 1
    return i


def widened(answer: str, context: str, lang: str) -> str | None:
    i = context.index(answer)
    j = i + len(answer)
    a, b = i, j
    if lang != "zh":  # to the ends of the words the answer starts and ends in
        a, b = _word_start(context, a), _word_end(context, b)
    while a > 0 and context[a - 1].isspace():
        a -= 1
    while b < len(context) and context[b].isspace():
        b += 1
    if lang == "zh":  # one character
        a, b = max(0, a - 1), min(len(context), b + 1)
    else:  # one word
        a, b = _word_start(context, a), _word_end(context, b)
    span = context[a:b].strip()
    return span if span != answer else None


def narrowed(answer: str, lang: str) -> str | None:
    if lang == "zh":
        return answer[:-1] if len(answer) >= 2 else None
    words = answer.split()
    return " ".join(words[:-1]) if len(words) >= 2 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mlqa", type=Path, required=True, help="git directory of facebookresearch/MLQA")
    ap.add_argument("--data-dir", type=Path, required=True, help="the example sweep's data dir")
    args = ap.parse_args()
    mlqa = mlqa_script(args.mlqa)

    qa = pl.read_parquet(SLICE / "queries.parquet").filter(pl.col("language").is_in(MLQA_LANGS))
    text = dict(pl.read_parquet(SLICE / "corpus.parquet").select("doc_id", "text").iter_rows())
    predictions: dict[tuple[str, str], list[str]] = {}  # (query id, prediction) -> sources, in order
    answers = sweep_answers(args.data_dir)
    for q in qa.iter_rows(named=True):
        qid, lang, gold = q["query_id"], q["language"], q["answers"][0]
        for config in CONFIGS:
            if answers[config][qid].strip():
                predictions.setdefault((qid, answers[config][qid]), []).append(f"extractive {config}")
        for source, pred in (
            ("widened", widened(gold, text[q["relevant_doc_ids"][0]], lang)),
            ("narrowed", narrowed(gold, lang)),
        ):
            if pred:
                predictions.setdefault((qid, pred), []).append(source)

    of = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    lines = []
    for (qid, pred), sources in predictions.items():
        lang, golds = of[qid]["language"], of[qid]["answers"]
        em = mlqa.metric_max_over_ground_truths(mlqa.exact_match_score, pred, golds, lang)
        f1 = mlqa.metric_max_over_ground_truths(mlqa.f1_score, pred, golds, lang)
        row = {
            "query_id": qid,
            "language": lang,
            "source": ", ".join(sources),
            "prediction": pred,
            "answers": golds,
            "exact_match": float(em),
            "f1": float(f1),
        }
        lines.append(json.dumps(row, ensure_ascii=False))
    OUT.write_text("\n".join(lines) + "\n", "utf-8")
    print(f"{len(lines)} rows -> {OUT}")


if __name__ == "__main__":
    main()
