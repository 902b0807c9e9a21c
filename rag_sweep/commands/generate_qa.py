"""`rag-sweep generate-qa`: a QA set written from a corpus alone (rag_core/data/qa/generation.py), with the cost
before (`--dry-run`) and after, and progress while it runs. The set is JSONL in the project's QA format
beside its sidecar (generator model, seed, prompt versions, filter counts); an existing file is a reviewed
copy and is never overwritten unless asked."""

from __future__ import annotations

import sys
from pathlib import Path

from rag_core.common.completion import failure_summary


def add_parser(sub) -> None:
    cmd = sub.add_parser("generate-qa", help="write a QA set from a corpus through an LLM (then review it)")
    cmd.add_argument("corpus", help="corpus file or folder (the formats a sweep's data.corpus reads)")
    cmd.add_argument("--model", required=True, help="any litellm model string, e.g. openai/gpt-4o-mini")
    cmd.add_argument("--out", required=True, help="the QA set to write (.jsonl)")
    cmd.add_argument("--questions", type=int, default=50, help="questions to keep (default 50)")
    cmd.add_argument("--types", help="question type weights, e.g. factoid=0.7,multi_hop=0.2,unanswerable=0.1")
    cmd.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    cmd.add_argument(
        "--no-require-context",
        action="store_true",
        help="keep questions the model answers without the passage",
    )
    cmd.add_argument("--max-calls", type=int, help="the budget: no LLM call beyond this many")
    cmd.add_argument(
        "--data-dir", help="where the LLM call cache lives (default $RAG_DATA_DIR or ./.rag_data)"
    )
    cmd.add_argument(
        "--dry-run", action="store_true", help="print the estimated calls and cost, write nothing"
    )
    cmd.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    cmd.set_defaults(handler=run)


def parse_types(text: str | None) -> dict[str, float] | None:
    """`factoid=0.7,multi_hop=0.2,unanswerable=0.1` -> weights."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        try:
            out[name.strip()] = float(weight)
        except ValueError:
            raise ValueError(
                f"--types {text}: expected type=weight pairs, e.g. factoid=0.8,multi_hop=0.2"
            ) from None
    return out


def run(args) -> int:
    from pydantic import ValidationError

    from rag_core.data.datasets import load_corpus, load_qa
    from rag_core.data.qa.checks import qa_quality
    from rag_core.data.qa.generation import (
        DEDUPE_MODEL,
        QAGeneration,
        generate_qa,
        sidecar,
        write_generated,
    )
    from rag_core.planning.spec import SpecError
    from rag_sweep.runner.inputs_check import qa_generation_line
    from resources.embedders import EmbeddingService
    from resources.environment import default_data_dir
    from resources.llm import llm_from_env
    from resources.storage import check_new_file, data_root

    try:
        settings = QAGeneration(
            model=args.model,
            questions=args.questions,
            seed=args.seed,
            require_context=not args.no_require_context,
            max_calls=args.max_calls,
            **({"types": parse_types(args.types)} if args.types else {}),
        )
    except (ValidationError, ValueError) as e:
        raise SpecError(f"generate-qa: {e}") from None
    out = Path(args.out)
    if out.suffix != ".jsonl":
        raise SpecError(f"--out {out}: the generated set is JSONL (a .jsonl path)")
    check_new_file(out, "--out")  # not after every call is paid for
    data = data_root(args.data_dir or default_data_dir())
    if out.exists() and not args.overwrite and not args.dry_run:
        raise SpecError(
            f"--out {out}: exists (a reviewed set is used as is); pass --overwrite to generate it again"
        )
    corpus = load_corpus(args.corpus)
    print(qa_generation_line(settings, corpus, out))
    if args.dry_run:
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is made, as --output's is
    data.mkdir(parents=True, exist_ok=True)
    llm = llm_from_env(cache_path=str(data / "llm_cache.sqlite"))
    embedder = EmbeddingService(cache_dir=str(data / "embedding_cache"))

    def progress(kept: int, wanted: int, calls: int) -> None:
        print(f"  {kept}/{wanted} questions kept, {calls} LLM calls so far", file=sys.stderr)

    frame, report = generate_qa(
        corpus, settings, llm, embed=lambda texts: embedder.embed(DEDUPE_MODEL, texts)[0], progress=progress
    )
    if frame.height == 0:
        print(
            f"error: no question was kept ({report.calls} calls, {report.failed_calls} failed, "
            f"{report.malformed_replies} malformed replies, rejected: {dict(report.rejected)}); nothing written"
            + (f"\n  failed calls: {failure_summary(report.errors)}" if report.errors else ""),
            file=sys.stderr,
        )
        return 1
    write_generated(frame, report, out)
    qa = load_qa(out, set(corpus["doc_id"].to_list()))  # what a sweep will read, checked the same way
    quality = qa_quality(qa, corpus)
    rate = f"{quality.answer_in_gold:.0%}" if quality.answer_in_gold is not None else "undefined"
    print(
        f"wrote {frame.height} questions to {out} (metadata: {sidecar(out)})\n"
        f"  kept: {dict(report.kept)}; rejected: {dict(report.rejected) or 'none'}\n"
        f"  calls: {report.calls} ({report.failed_calls} failed, {report.malformed_replies} malformed, "
        f"{report.skipped_for_budget} over the budget), {report.tokens:,} tokens, ${report.cost_usd:.4f}\n"
        + (f"  failed calls: {failure_summary(report.errors)}\n" if report.errors else "")
        + f"  answers found in their gold passages: {rate}\n"
        f"review or edit it, then point a sweep's data.qa at it"
    )
    if frame.height < settings.questions:
        print(
            f"warning: {frame.height} of {settings.questions} questions kept (see the counts above)",
            file=sys.stderr,
        )
    return 0
