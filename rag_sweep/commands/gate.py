"""`rag-sweep gate`: is each config of a sweep file not worse than a baseline (the registered champion)?
Exit 0 pass, 1 fail, 3 inconclusive, 2 a usage or input error, 4 a step failed (rag_sweep/runner/gate.py)."""

from __future__ import annotations

from pathlib import Path

from rag_core.planning.spec import SpecError


def add_parser(sub) -> None:
    gat = sub.add_parser(
        "gate",
        help="is each config of SPEC not worse than a baseline (the champion)? exit 0 pass, 1 fail, "
        "3 inconclusive, 2 a usage or input error, 4 a step failed",
    )
    gat.add_argument("spec", help="sweep YAML file: its configs are the candidates")
    gat.add_argument(
        "--against",
        required=True,
        help="the baseline: a registered version (models:/NAME@champion, models:/NAME/N), a config key or "
        "label of SPEC, or another sweep's file (its recommendation)",
    )
    gat.add_argument(
        "--margin", type=float, help="how much lower an overall score still passes (gate.margin)"
    )
    gat.add_argument(
        "--metric-margin",
        action="append",
        metavar="METRIC=X",
        help="a metric's own margin, e.g. recall_at_k=0.02 (repeatable; gate.metric_margins)",
    )
    gat.add_argument(
        "--alpha", type=float, help="family-wise error rate, Holm over the candidates (gate.alpha)"
    )
    gat.add_argument(
        "--equivalence", action="store_true", help="two one-sided tests: pass only within ±margin"
    )
    gat.add_argument("--junit", help="write a JUnit XML report here (one test case per candidate and metric)")
    gat.add_argument("--markdown", help="write the Markdown summary here (for a pull request comment)")
    gat.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    gat.add_argument("--store", help="vector store of configs that name none")
    gat.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    gat.set_defaults(handler=run)


def run(args) -> int:
    """Every config of the spec and the baseline evaluated on the same questions; each candidate's verdict."""
    from pydantic import ValidationError

    from rag_core.planning.spec import GateSpec
    from rag_sweep.printing import print_gate
    from rag_sweep.runner.gate import run_gate

    margins = {}
    for item in args.metric_margin or []:
        metric, _, value = item.partition("=")
        try:
            margins[metric.strip()] = float(value)
        except ValueError:
            raise SpecError(
                f"--metric-margin {item}: expected METRIC=NUMBER, e.g. recall_at_k=0.02"
            ) from None
    given = {"margin": args.margin, "alpha": args.alpha, "metric_margins": margins or None}
    try:  # the same bounds as the file's gate: section, said before any work
        GateSpec(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        raise SpecError(
            f"--{'-'.join(map(str, first['loc'][:1])).replace('_', '-')}: {first['msg']}"
        ) from None
    for flag in ("junit", "markdown"):
        if (path := getattr(args, flag)) and not Path(path).resolve().parent.is_dir():
            raise SpecError(f"--{flag} {path}: its folder does not exist")
    gated = run_gate(
        args.spec,
        args.against,
        args.data_dir,
        args.store,
        {**given, "equivalence": args.equivalence},
        verbose=args.verbose,
    )
    if args.junit:
        Path(args.junit).write_text(gated.files["junit.xml"])
    if args.markdown:
        Path(args.markdown).write_text(gated.files["gate.md"])
    print_gate(gated)
    return gated.result.exit_code
