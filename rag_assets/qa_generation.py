"""`rag-sweep generate-qa`: a QA set written from a corpus alone (rag_core/data/qa/generation.py), with the cost
before (`--dry-run`) and after, and progress while it runs. The set is JSONL in the project's QA format
beside its sidecar (generator model, seed, prompt versions, filter counts); an existing file is a reviewed
copy and is never overwritten unless asked."""

from __future__ import annotations

import sys
from pathlib import Path

from rag_core.common.completion import failure_summary


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


def estimate_line(settings, corpus, out: Path) -> str:
    """What generating the set will ask of the LLM, before any call (validate, plan, generate-qa)."""
    from rag_core.data.qa.generation import estimate_calls
    from resources.llm import price

    calls = estimate_calls(settings)
    mean_chars = int(corpus["text"].str.len_chars().mean() or 0)
    prompt_tokens = min(mean_chars, settings.passage_chars) // 4 + 150
    each = price(settings.model, prompt_tokens, 40)
    cost = (
        f"${each * calls:.4f}" if each is not None else f"unknown (litellm has no price for {settings.model})"
    )
    types = ", ".join(f"{n} {t}" for t, n in settings.targets().items())
    cap = f"; capped at {settings.max_calls}" if settings.max_calls else ""
    return (
        f"QA set {out}: {settings.questions} questions ({types}) to generate from {corpus.height} documents "
        f"with {settings.model}, seed {settings.seed}\n"
        f"  estimated: ~{calls} LLM calls (more when questions are rejected{cap}), "
        f"~{calls * (prompt_tokens + 40):,} tokens, cost {cost}"
    )


def generate_qa_command(args) -> int:
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
    print(estimate_line(settings, corpus, out))
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
