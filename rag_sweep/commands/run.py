"""`rag-sweep run`: a sweep materialized end to end through its Dagster assets (rag_sweep/runner/sweep.py),
or an unchanged rerun answered from the last run's record without importing Dagster; then its board."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rag_core.planning.spec import SpecError
from rag_sweep.printing import _print_run
from rag_sweep.runner.up_to_date import remembered
from resources.storage import check_new_file


def add_parser(sub) -> None:
    cmd = sub.add_parser("run", help="materialize a sweep end to end and print its leaderboard")
    cmd.add_argument("spec", help="sweep YAML file")
    cmd.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    cmd.add_argument("--output", help="also write the leaderboard to this .csv or .parquet path")
    cmd.add_argument(
        "--store", help="vector store of configs that name none (default $RAG_VECTOR_STORE or lancedb)"
    )
    cmd.add_argument("--force", action="store_true", help="recompute every stage even if its artifact exists")
    cmd.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    cmd.set_defaults(handler=run)


def check_output(output: str) -> None:
    """--output must be a .csv or .parquet file this run can create: said before the sweep, not after it."""
    if Path(output).suffix not in (".csv", ".parquet"):
        raise SpecError(f"--output {output}: use a .csv or .parquet path")
    check_new_file(output, "--output")


def run(args) -> int:
    if args.output:
        check_output(args.output)  # its suffix (the path is checked with every command's outputs)
    t0 = time.perf_counter()
    run = None if args.force else remembered(args.spec, args.data_dir, args.store)
    if run is not None:
        print("every partition is up to date: nothing to compute", file=sys.stderr)
    else:
        from rag_sweep.runner.sweep import run_sweep

        run = run_sweep(args.spec, args.data_dir, args.force, args.verbose, store=args.store)
    return _print_run(run, args, time.perf_counter() - t0)
