"""A sweep's input files as its snapshots hold them: what each snapshot is of, the fingerprints the files
as they are now would have, and the QA set loaded as the run's snapshot loads it, a bad file's error naming
the sweep file's field first. Dagster-free: `validate` and `plan` read them before any Dagster is imported,
and the snapshot assets (rag_assets/inputs.py) are built on them."""

from __future__ import annotations

from contextlib import contextmanager

import polars as pl

from rag_core.common.fingerprint import file_hash
from rag_core.data.datasets import DatasetError, load_qa
from rag_core.planning.stages import artifact_fingerprint


def corpus_identity(sweep) -> str:
    """What the corpus snapshot is of: the corpus file's content."""
    return file_hash(sweep.corpus_path)


def qa_identity(sweep) -> tuple:
    """What the QA set snapshot is of: the QA file's content and how many of its questions are kept, and
    with data.language: auto, the detector that gave each question its language."""
    if sweep.detect_language:
        from rag_core.metrics.languages import detector_version

        return file_hash(sweep.qa_path), sweep.max_queries, detector_version()
    return file_hash(sweep.qa_path), sweep.max_queries


@contextmanager
def named_field(sweep, field: str):
    """A bad input file's error with the sweep file and its field first (then the file, row and field),
    the same whichever command finds it: `validate`, `plan` or the run's snapshot."""
    try:
        yield
    except DatasetError as e:
        raise DatasetError(f"{sweep.path}: field '{field}': {e}") from None


def load_sweep_qa(sweep, corpus: pl.DataFrame) -> pl.DataFrame:
    """The sweep's QA set as its snapshot holds it (what the runner's checks read before any work)."""
    known = set(corpus["doc_id"].to_list())
    return load_qa(sweep.qa_path, known, sweep.max_queries, corpus, sweep.language, sweep.detect_language)


def snapshot_fingerprints(sweep) -> dict[str, str]:
    """The fingerprints the corpus and QA set snapshots of the files as they are now would have (computed
    here only: the runner's skip rules and the bill read them)."""
    corpus = artifact_fingerprint("corpus", corpus_identity(sweep), {})
    if not sweep.qa_path.exists():  # to be generated (qa_generation): nothing to snapshot yet
        return {"corpus": corpus}
    return {
        "corpus": corpus,
        "qa_set": artifact_fingerprint("qa_set", qa_identity(sweep), {"corpus": corpus}),
    }
