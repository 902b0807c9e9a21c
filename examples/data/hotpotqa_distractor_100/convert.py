"""Convert the 100-question HotpotQA (distractor setting) sample shipped in
noahshinn/reflexion (hotpotqa_runs/data/hotpot-qa-distractor-sample.joblib)
into the normalized RAG-eval layout:

  corpus.parquet  : doc_id (str), title (str), text (str)
  queries.parquet : query_id (str), question (str), answers (list[str]),
                    relevant_doc_ids (list[str])

The .joblib file is a pickled pandas DataFrame written by an old pandas, so
this script must run where pandas 1.x, numpy<2, joblib and pyarrow are
installed (e.g. pip install "pandas==1.5.3" "numpy<2" joblib "pyarrow<18").

Corpus = union of the 10 context paragraphs (2 gold + 8 distractors) of all
100 questions; a paragraph is identified by its Wikipedia title (titles are
unique in the sample and never map to two different texts). Paragraph text is
the concatenation of its sentences, exactly as HotpotQA stores them.
relevant_doc_ids = the paragraphs named in supporting_facts (always 2).
doc_id = "hp-" + first 12 hex chars of sha1(title): opaque, so ids leak
nothing about gold vs distractor; the corpus is sorted by doc_id.

Usage: python convert.py SAMPLE.joblib OUT_DIR
"""

import hashlib
import sys
from pathlib import Path

import joblib
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def as_list(x):
    if isinstance(x, np.ndarray):
        return [as_list(v) for v in x.tolist()]
    if isinstance(x, (list, tuple)):
        return [as_list(v) for v in x]
    return x


def doc_id_for(title: str) -> str:
    return "hp-" + hashlib.sha1(title.encode("utf-8")).hexdigest()[:12]


def main(src: str, out_dir: str) -> None:
    frame = joblib.load(src).reset_index(drop=True)
    paragraphs = {}  # title -> text
    queries = []
    for rec in frame.to_dict("records"):
        titles = as_list(rec["context"]["title"])
        sentence_lists = as_list(rec["context"]["sentences"])
        for title, sents in zip(titles, sentence_lists):
            text = "".join(sents).strip()
            if title in paragraphs and paragraphs[title] != text:
                raise ValueError(f"title {title!r} has two different texts")
            paragraphs[title] = text
        gold_titles = []
        for t in as_list(rec["supporting_facts"]["title"]):
            if t not in gold_titles:
                gold_titles.append(t)
        missing = [t for t in gold_titles if t not in titles]
        if missing:
            raise ValueError(f"{rec['id']}: gold titles not in context: {missing}")
        queries.append(
            {
                "query_id": str(rec["id"]),
                "question": str(rec["question"]).strip(),
                "answers": [str(rec["answer"]).strip()],
                "relevant_doc_ids": [doc_id_for(t) for t in gold_titles],
            }
        )

    ids = {doc_id_for(t) for t in paragraphs}
    if len(ids) != len(paragraphs):
        raise ValueError("doc_id hash collision")
    docs = sorted(
        ({"doc_id": doc_id_for(t), "title": t, "text": x} for t, x in paragraphs.items()),
        key=lambda d: d["doc_id"],
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus_schema = pa.schema([("doc_id", pa.string()), ("title", pa.string()), ("text", pa.string())])
    query_schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("question", pa.string()),
            ("answers", pa.list_(pa.string())),
            ("relevant_doc_ids", pa.list_(pa.string())),
        ]
    )
    pq.write_table(pa.Table.from_pylist(docs, schema=corpus_schema), out / "corpus.parquet")
    pq.write_table(pa.Table.from_pylist(queries, schema=query_schema), out / "queries.parquet")
    print(f"docs={len(docs)} queries={len(queries)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
