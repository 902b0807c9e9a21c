"""The sweep's inputs: the corpus and the QA set, validated and normalized to Parquet."""

import dagster as dg

from rag_assets.common import base_metadata
from rag_assets.lineage import Lineage
from rag_core.datasets import load_corpus, load_qa
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore


def build(sweep: Sweep) -> list[dg.AssetsDefinition]:
    @dg.asset(
        group_name="inputs",
        kinds={"parquet"},
        description=f"Corpus of sweep {sweep.name}: {sweep.corpus_path}",
    )
    def corpus(context: dg.AssetExecutionContext, artifacts: ArtifactStore) -> dg.MaterializeResult:
        lineage = Lineage(sweep)
        fp = lineage.corpus_fp
        reused = artifacts.exists("corpus", fp)
        df = artifacts.read("corpus", fp, "corpus") if reused else load_corpus(sweep.corpus_path)
        if not reused:
            artifacts.write("corpus", fp, df)
        context.log.info(f"corpus: {df.height} documents from {sweep.corpus_path}")
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("corpus", fp), reused),
                "source": dg.MetadataValue.path(str(sweep.corpus_path)),
                "dagster/row_count": df.height,
                "total_chars": int(df["text"].str.len_chars().sum()),
            },
            data_version=dg.DataVersion(fp),
        )

    @dg.asset(
        group_name="inputs",
        kinds={"parquet"},
        deps=[corpus],
        description=f"QA set of sweep {sweep.name}: {sweep.qa_path}",
    )
    def qa_set(context: dg.AssetExecutionContext, artifacts: ArtifactStore) -> dg.MaterializeResult:
        lineage = Lineage(sweep)
        fp = lineage.qa_fp
        reused = artifacts.exists("qa", fp)
        if reused:
            df = artifacts.read("qa", fp, "qa_set")
        else:
            docs = artifacts.read("corpus", lineage.corpus_fp, "corpus")
            df = load_qa(sweep.qa_path, set(docs["doc_id"].to_list()), sweep.max_queries)
            artifacts.write("qa", fp, df)
        no_gold = int((df["relevant_doc_ids"].list.len() == 0).sum())
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("qa", fp), reused),
                "source": dg.MetadataValue.path(str(sweep.qa_path)),
                "dagster/row_count": df.height,
                "queries_without_gold_docs": no_gold,
            },
            data_version=dg.DataVersion(fp),
        )

    return [corpus, qa_set]
