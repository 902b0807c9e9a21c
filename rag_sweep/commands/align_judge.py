"""`rag-sweep calibrate-judge SPEC --labels FILE --align`: the judge aligned with part of the labels through
MLflow's `Judge.align()`, then the base and the aligned judge measured on the labels held out.

The labels are split, seeded and stratified by the label (rag_core/metrics/judge_alignment.py `split`). The
alignment part becomes MLflow traces carrying people's verdicts as human feedback (resources/mlflow_judge.py),
handed to `Judge.align()` with the project's optimizer (resources/judge_optimizer.py) or MLflow's MemAlign
(`--optimizer memalign`, needs DSPy, untested here). The held-out rows never reach the alignment: no trace is
made of them, and a prompt that shows one is refused before it is measured. Both judges are measured on
them with `agreement()`; the exit code is the aligned judge's verdict (it is the one `--aligned-out` writes).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from rag_core.planning.spec import SpecError


def _optimizer(args, workers: int):
    if args.optimizer == "memalign":
        if importlib.util.find_spec("dspy") is None:
            raise SpecError("--optimizer memalign: MLflow's MemAlign needs DSPy, which is not installed")
        from mlflow.genai.judges.optimizers.memalign import MemAlignOptimizer

        print("optimizer: MLflow's MemAlign (untested with this judge)", file=sys.stderr)
        return MemAlignOptimizer()
    from resources.judge_optimizer import WorkedExamples

    return WorkedExamples(args.threshold, args.align_examples, workers)


def _kappa(result) -> str:
    if result.kappa is None:
        return f"undefined ({result.undefined})"
    return f"{result.kappa:.3f} (95% {result.kappa_low:.3f} to {result.kappa_high:.3f})"


def align(args, model: str, prompt: str, rows: list[dict], labels: list[bool], judge_llm) -> int:
    """`judge_llm(args)` makes the LLM client: passed in by calibrate_judge, never imported back from it."""
    from rag_core.metrics.judge_agreement import MIN_LABELS, agreement
    from rag_core.metrics.judge_alignment import MIN_ALIGNMENT_LABELS, leaked, split

    if not 0.0 < args.align_share < 1.0:
        raise SpecError(f"--align-share: between 0 and 1 (exclusive), got {args.align_share:g}")
    if args.align_examples < 1:
        raise SpecError(f"--align-examples: at least 1, got {args.align_examples}")
    part, held = split(rows, labels, args.align_share, args.seed)
    if not part or not held:
        raise SpecError(
            f"{args.labels}: {len(rows)} labels cannot be split into an alignment part and a held-out part"
        )
    if shown := leaked(prompt, [rows[i] for i in held]):  # a prompt aligned before, on these labels
        raise SpecError(
            f"the sweep's judge prompt (evaluation.judge_prompt) shows held-out label row(s) "
            f"{', '.join(str(held[i] + 1) for i in shown)}: their measurement would not be held out"
        )
    if len(part) < MIN_ALIGNMENT_LABELS:
        print(
            f"warning: {len(part)} labels to align on: MLflow advises at least {MIN_ALIGNMENT_LABELS} "
            "(50 to 100 better)",
            file=sys.stderr,
        )
    if len(held) < MIN_LABELS:
        print(
            f"warning: {len(held)} held-out labels: the intervals are wide below {MIN_LABELS}",
            file=sys.stderr,
        )

    from resources.mlflow_judge import SweepJudge, labelled_traces, scores

    llm = judge_llm(args)
    optimizer = _optimizer(args, llm.max_concurrency)
    base = SweepJudge(llm, model, prompt)
    traces = labelled_traces([rows[i] for i in part], [labels[i] for i in part], str(args.labels))
    aligned = base.align(traces, optimizer)
    held_rows, held_labels = [rows[i] for i in held], [labels[i] for i in held]
    if shown := leaked(aligned.instructions, held_rows):
        raise SpecError(
            f"the aligned prompt shows held-out label row(s) {', '.join(str(held[i] + 1) for i in shown)}: "
            "not measured"
        )
    lengths = [len(r["answer"]) for r in held_rows]
    results = {}
    for name, judge in (("base", base), ("aligned", aligned)):
        try:
            results[name] = agreement(
                held_labels, scores(judge, held_rows, llm.max_concurrency), lengths, args.threshold
            )
        except ValueError as e:
            raise SpecError(f"{model} ({name}): {e}") from None
    b, a = results["base"], results["aligned"]
    change = None if a.kappa is None or b.kappa is None else a.kappa - b.kappa

    print(f"judge {model} against {len(rows)} labels of {args.labels}")
    print(
        f"aligned on {len(part)} labels, measured on the {len(held)} held out "
        f"(share {args.align_share:g}, seed {args.seed}, stratified by the label)"
    )
    report = getattr(optimizer, "report", None)
    if report is not None and len(report.rows) != len(part):  # each trace gives its row, in order
        raise SpecError(f"the alignment read {len(report.rows)} of its {len(part)} traces")
    if report is not None:
        n_sup = sum(report.labels[i] for i in report.examples)
        print(
            f"alignment: the base judge disagreed with people on {report.disagreed} of the {len(part)} "
            f"(no score on {report.unscored}); the aligned prompt carries {len(report.examples)} worked "
            f"examples ({n_sup} supported, {len(report.examples) - n_sup} unsupported)"
        )
    for name, result in results.items():
        print(f"{name} judge on the held-out labels:")
        print("\n".join("  " + line for line in result.lines(args.min_kappa)))
    print(
        f"held-out kappa: base {_kappa(b)}, aligned {_kappa(a)}"
        + (f", change {change:+.3f}" if change is not None else "")
    )
    print(f"verdict (the aligned judge): {a.verdict(args.min_kappa)} (kappa floor {args.min_kappa:g})")
    if args.aligned_out:
        Path(args.aligned_out).write_text(aligned.instructions)
        print(f"aligned prompt: {args.aligned_out}")
    if args.json:
        alignment = {
            "share": args.align_share,
            "seed": args.seed,
            "optimizer": args.optimizer,
            "alignment_rows": [i + 1 for i in part],  # the labels file's row numbers
            "held_out_rows": [i + 1 for i in held],
        }
        if report is not None:
            alignment |= {
                "disagreed": report.disagreed,
                "unscored": report.unscored,
                "example_rows": [part[i] + 1 for i in report.examples],
            }
        figures = {"model": model, "labels": str(args.labels), "threshold": args.threshold}
        figures |= {
            "min_kappa": args.min_kappa,
            "align": alignment,
            "base": {"verdict": b.verdict(args.min_kappa), **b.as_dict()},
            "aligned": {"verdict": a.verdict(args.min_kappa), **a.as_dict()},
            "kappa_change": change,
            "verdict": a.verdict(args.min_kappa),
        }
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return {"trusted": 0, "below the floor": 1, "undefined": 3}[a.verdict(args.min_kappa)]
