"""Write judge_labels.jsonl: faithfulness labels whose truth the data itself settles, for measuring an LLM
judge (evaluation.judge_labels; docs/guides/judges-and-labels.md).

For questions 31 to 42 of the sample (the example sweeps read the first 30), skipping yes/no answers and any
whose gold answer is not written in its two gold paragraphs: the context is those paragraphs, and

  - supported: the question's gold answer, which the context states word for word;
  - not supported: the next such question's gold answer, which the context does not contain.

They are constructed, not people's verdicts: they measure whether a judge tells an answer its context states
from one it does not, the least a faithfulness judge must do. Deterministic: run it again, the same file.

Usage: python judge_labels.py   (reads corpus.parquet and queries.parquet beside it)
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
FIRST, COUNT = 30, 12  # questions 31 to 42: none of them in a sweep that reads the first 30


def main() -> None:
    corpus = pl.read_parquet(HERE / "corpus.parquet")
    text = dict(zip(corpus["doc_id"], corpus["text"], strict=True))
    picked = []
    for q in pl.read_parquet(HERE / "queries.parquet").slice(FIRST).iter_rows(named=True):
        answer = q["answers"][0]
        context = "\n\n".join(text[d] for d in q["relevant_doc_ids"])
        if answer.lower() in ("yes", "no") or answer.lower() not in context.lower():
            continue
        picked.append((q["question"], answer, context))
        if len(picked) == COUNT:
            break
    rows = []
    for i, (question, answer, context) in enumerate(picked):
        rows.append({"question": question, "answer": answer, "context": context, "supported": "yes"})
        # another question's answer, absent from this context
        other = next(a for _, a, _ in picked[i + 1 :] + picked[:i] if a.lower() not in context.lower())
        rows.append({"question": question, "answer": other, "context": context, "supported": "no"})
    with open(HERE / "judge_labels.jsonl", "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} labels ({len(picked)} supported, {len(picked)} not) -> {HERE / 'judge_labels.jsonl'}")


if __name__ == "__main__":
    main()
