"""`rag-sweep calibrate-judge`: how far the sweep's LLM judge agrees with people (rag_core/metrics/judge_agreement.py).

The labels file (JSONL, CSV or Parquet) has one row per labelled answer: `question`, `answer`, `context` (the
passages the answer was given, as the judge sees them) and `supported` (true/false, 1/0 or yes/no: did the
person find every claim of the answer in the context). The judge is asked exactly what a sweep's evaluation
asks it (the faithfulness prompt, or the sweep's evaluation.judge_prompt; temperature 0), through the data
dir's LLM call cache.

With `--align` the labels are split (seeded, stratified by the label) into an alignment part and a held-out
part. The judge is aligned through MLflow's `Judge.align()` on the first part's traces (resources/
mlflow_judge.py, resources/judge_optimizer.py), and both the base and the aligned judge are measured on the
held-out part only, which the alignment never sees. The exit code is the aligned judge's verdict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rag_core.planning.spec import SpecError
from resources import environment
from resources.storage import data_root


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
    cal.add_argument(
        "--align",
        action="store_true",
        help="align the judge with MLflow's Judge.align() on part of the labels, then measure the base and "
        "the aligned judge on the labels held out (the exit code is the aligned judge's verdict)",
    )
    cal.add_argument(
        "--align-share", type=float, default=0.5, help="with --align: the labels' share to align on"
    )
    cal.add_argument("--seed", type=int, default=0, help="with --align: the split's seed")
    cal.add_argument(
        "--align-examples",
        type=int,
        default=8,
        help="with --align: the most worked examples the aligned prompt carries (default 8)",
    )
    cal.add_argument(
        "--optimizer",
        choices=("examples", "memalign"),
        default="examples",
        help="with --align: the project's worked examples (default), or MLflow's MemAlign (needs DSPy; "
        "untested here)",
    )
    cal.add_argument("--aligned-out", help="with --align: write the aligned judge's prompt to this file")
    cal.set_defaults(handler=run)


def read_labels(path: str) -> tuple[list[dict], list[bool]]:
    from rag_core.metrics.judge_agreement import LabelsError
    from rag_core.metrics.judge_agreement import read_labels as read

    try:
        return read(path)
    except LabelsError as e:  # a row's error names its file, row and field; the file's, the flag too
        raise SpecError(str(e) if ": row " in str(e) else f"--labels {e}") from None


def judge_llm(args):
    """The LLM client the environment configures, with the data dir's call cache."""
    from resources.llm import llm_from_env

    data = data_root(args.data_dir or environment.default_data_dir())
    return llm_from_env(cache_path=str(data / "llm_cache.sqlite"))


def run(args) -> int:
    from rag_assets.orchestration.plans import load_plan
    from rag_core.evaluation.evaluate import judge_labelled
    from rag_core.metrics.judge import JUDGE_PROMPT
    from rag_core.metrics.judge_agreement import MIN_LABELS, agreement
    from rag_core.metrics.judge_alignment import leaked

    sweep = load_plan(args.spec).sweep
    model = args.model or sweep.judge_model
    if not model:
        raise SpecError(f"{args.spec}: no judge to calibrate: set evaluation.judge_model, or give --model")
    prompt = sweep.judge_prompt or JUDGE_PROMPT  # evaluation.judge_prompt, else the built-in one
    rows, labels = read_labels(args.labels)  # before any call
    if args.align:
        from rag_sweep.commands.align_judge import align

        return align(args, model, prompt, rows, labels, judge_llm)
    if args.aligned_out:
        raise SpecError("--aligned-out: only with --align")
    if len(rows) < MIN_LABELS:
        print(f"warning: {len(rows)} labels: the intervals are wide below {MIN_LABELS}", file=sys.stderr)
    if shown := leaked(prompt, rows):
        print(
            f"warning: {len(shown)} of the labels are worked examples in the judge's prompt "
            "(evaluation.judge_prompt): measured on answers it was shown",
            file=sys.stderr,
        )
    llm = judge_llm(args)

    scores = judge_labelled(llm, model, rows, prompt)
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
