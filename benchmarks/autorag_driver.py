"""AutoRAG's side of benchmarks/autorag_comparable.py, run by AutoRAG's own interpreter (not this project's).

    AUTORAG_PYTHON benchmarks/autorag_driver.py WORK MODEL_DIR DATA_DIR

AutoRAG 0.3.27's evaluator on the comparable work: DATA_DIR's corpus (one chunk a document, its title on the
first line as rag-sweep indexes it) and questions;
lexical (BM25, Porter stemmer), semantic (its vector DB: Chroma, cosine, the model at MODEL_DIR through
llama-index's HuggingFaceEmbedding, that is sentence-transformers on torch, batches of 16) and hybrid
(RRF, k0 60) retrieval, each at top_k 2 and 5, scored by retrieval F1, recall and nDCG. WORK must not
exist (a cold run). Prints one JSON line: its CPU seconds, its peak memory and the vector node's top-5
document ids per question. Needs only pandas and AutoRAG, so it runs in AutoRAG's environment.
"""

import json
import resource
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

CONFIG = """
vectordb:
  - name: minilm
    db_type: chroma
    client_type: persistent
    embedding_model:
      - type: huggingface
        model_name: {model}
    collection_name: minilm
    path: {project}/resources/chroma
    similarity_metric: cosine
    embedding_batch: 16
node_lines:
- node_line_name: retrieve_node_line
  nodes:
    - node_type: lexical_retrieval
      strategy: {{metrics: [retrieval_f1, retrieval_recall, retrieval_ndcg]}}
      top_k: [2, 5]
      modules:
        - {{module_type: bm25, bm25_tokenizer: porter_stemmer}}
    - node_type: semantic_retrieval
      strategy: {{metrics: [retrieval_f1, retrieval_recall, retrieval_ndcg]}}
      top_k: [2, 5]
      modules:
        - {{module_type: vectordb, vectordb: minilm}}
    - node_type: hybrid_retrieval
      strategy: {{metrics: [retrieval_f1, retrieval_recall, retrieval_ndcg]}}
      modules:
        # AutoRAG takes one top_k a hybrid node, or a list a module; weight_range (60, 60): RRF's k0 60
        - module_type: hybrid_rrf
          weight_range: (60, 60)
          top_k: [2, 5]
"""


def main() -> None:
    work, model, data = (Path(a) for a in sys.argv[1:4])
    work.mkdir(parents=True)
    corpus = pd.read_parquet(data / "corpus.parquet")
    qa = pd.read_parquet(data / "queries.parquet")
    when = datetime(2026, 1, 1)  # AutoRAG's corpus schema asks for a modification time
    pd.DataFrame(
        {
            "doc_id": corpus["doc_id"],
            # what rag-sweep embeds and indexes of a chunk: its document's title, a newline, the text
            "contents": corpus["title"].fillna("") + "\n" + corpus["text"],
            "metadata": [{"last_modified_datetime": when}] * len(corpus),
        }
    ).to_parquet(work / "corpus.parquet")
    pd.DataFrame(
        {
            "qid": qa["query_id"],
            "query": qa["question"],
            "retrieval_gt": [[list(ids)] for ids in qa["relevant_doc_ids"]],
            "generation_gt": [list(a) for a in qa["answers"]],
        }
    ).to_parquet(work / "qa.parquet")
    project = work / "project"
    (work / "config.yaml").write_text(CONFIG.format(model=model, project=project))

    import llama_index.embeddings.huggingface  # noqa: F401  AutoRAG's local models (its gpu extra)
    from autorag.evaluator import Evaluator

    Evaluator(str(work / "qa.parquet"), str(work / "corpus.parquet"), project_dir=str(project)).start_trial(
        str(work / "config.yaml"), skip_validation=True
    )
    top5 = {}
    for f in sorted((project / "0" / "retrieve_node_line" / "semantic_retrieval").glob("[0-9]*.parquet")):
        ids = pd.read_parquet(f)["retrieved_ids"]
        if len(ids.iloc[0]) == 5:
            top5 = {q: list(r) for q, r in zip(qa["query_id"], ids, strict=True)}
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"cpu_s": r.ru_utime + r.ru_stime, "peak_mb": r.ru_maxrss / 1024, "top5": top5}))


if __name__ == "__main__":
    main()
