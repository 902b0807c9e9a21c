"""`rag-sweep`: run a sweep end to end through the same Dagster assets, in process, no server needed.

    rag-sweep run SPEC [--data-dir DIR] [--output leaderboard.csv|.parquet] [--store NAME] [--force]
    rag-sweep validate SPEC
    rag-sweep components [--markdown]
    rag-sweep plan SPEC [--data-dir DIR] [--store NAME]
    rag-sweep generate-qa CORPUS --model MODEL --out QA.jsonl
    rag-sweep export SPEC [--config KEY] --out DIR [--data-dir DIR]
    rag-sweep verify-model DIR --fingerprint FP | models:/NAME@ALIAS [--download DIR]
    rag-sweep gate SPEC --against models:/NAME@champion|CONFIG|OTHER.yaml [--margin X] [--junit PATH]
    rag-sweep warm [--idle-minutes M] [--stop]

The input files are observed and snapshotted, then the plan's partitions run, a stage's due partitions in
one Dagster run once the partitions they read are complete, into a persistent Dagster instance under `<data-dir>/dagster_home`
(so `dagster dev` can show them). A partition whose latest materialization already holds the artifact these
snapshots give is skipped, so re-running an unchanged spec recomputes nothing; a killed run resumes from
what is complete. The work is the runner's (runner/); this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

from rag_assets.qa_generation import estimate_line, generate_qa_command
from rag_core.common.registry import PluginError
from rag_core.data.datasets import DatasetError, DataWarning
from rag_core.planning.extension_points import plugins_line
from rag_core.planning.spec import SpecError

# what a run and an export print (kept importable from here: the CLI's names)
from rag_sweep import warm_process
from rag_sweep.commands import calibrate_judge, components, gate, gc, import_labels, models
from rag_sweep.printing import (  # noqa: F401
    _of_them,
    _print_champion,
    _print_explore,
    _print_export,
    _print_run,
    _warn_size,
    _warn_unsegmented,
    serve_command,
)
from resources import environment  # first: the process defaults (rag_assets imports it first too)
from resources.devices import DeviceUnavailable
from resources.storage import check_new_file
from runner.errors import CheckFailed, DataDirError, StepFailed
from runner.up_to_date import remembered
from shipping import ExportWarning


def _check_output(output: str) -> None:
    """--output must be a .csv or .parquet file this run can create: said before the sweep, not after it."""
    if Path(output).suffix not in (".csv", ".parquet"):
        raise SpecError(f"--output {output}: use a .csv or .parquet path")
    check_new_file(output, "--output")


_default_show_warning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A loader's DataWarning (rows or values it dropped, counted) as one line, like the CLI's own warnings."""
    if issubclass(category, DataWarning | ExportWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None, start_warm: bool = False) -> int:
    """`rag-sweep ARGV`; `start_warm`: a run that imports Dagster and the libraries leaves a warm process
    behind for the next command (the `rag-sweep` command only, rag_sweep/console.py)."""
    warnings.showwarning = _show_warning
    try:
        return _main(argv, start_warm)
    except BrokenPipeError:  # `rag-sweep validate ... | head`: the reader left; no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        return 0
    except BaseException as e:  # after the run: printing its board
        if not _interrupt(e):
            raise
        _interrupted()


def console(start_warm: bool = False) -> None:
    """The `rag-sweep` command: `main`, then `exit_now`. Tests call `main`, which returns."""
    exit_now(main(start_warm=True) if start_warm else main())


def exit_now(code: int | None) -> None:
    """End the process as Python's own exit would, less its teardown: after a run that loaded Dagster,
    MLflow and LanceDB, that spends 1-2.5 s freeing their modules one by one. What of it matters is done
    first: the threads that are not daemons joined, the atexit handlers run, the output flushed."""
    threading._shutdown()  # what the interpreter does first at exit: join the non-daemon threads
    atexit._run_exitfuncs()  # logging, multiprocessing's children, MLflow's async loggers
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader left: nothing more to say
        pass
    os._exit(code if isinstance(code, int) else 0)


def _interrupt(e: BaseException) -> bool:
    """Ctrl-C, or Dagster's word for it inside a run (Dagster is imported only by a run that computes)."""
    dagster = sys.modules.get("dagster")
    return isinstance(e, KeyboardInterrupt) or (
        dagster is not None and isinstance(e, dagster.DagsterExecutionInterruptedError)
    )


def _main(argv: list[str] | None, start_warm: bool = False) -> int:
    parser = argparse.ArgumentParser(
        prog="rag-sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize a sweep end to end and print its leaderboard")
    run.add_argument("spec", help="sweep YAML file")
    run.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    run.add_argument("--output", help="also write the leaderboard to this .csv or .parquet path")
    run.add_argument(
        "--store", help="vector store of configs that name none (default $RAG_VECTOR_STORE or lancedb)"
    )
    run.add_argument("--force", action="store_true", help="recompute every stage even if its artifact exists")
    run.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    val = sub.add_parser("validate", help="validate a sweep file and its data, and list its configs")
    val.add_argument("spec")
    pln = sub.add_parser("plan", help="what a run would compute and cost, before running it")
    pln.add_argument("spec")
    pln.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    pln.add_argument("--store", help="vector store of configs that name none")
    gen = sub.add_parser("generate-qa", help="write a QA set from a corpus through an LLM (then review it)")
    gen.add_argument("corpus", help="corpus file or folder (the formats a sweep's data.corpus reads)")
    gen.add_argument("--model", required=True, help="any litellm model string, e.g. openai/gpt-4o-mini")
    gen.add_argument("--out", required=True, help="the QA set to write (.jsonl)")
    gen.add_argument("--questions", type=int, default=50, help="questions to keep (default 50)")
    gen.add_argument("--types", help="question type weights, e.g. factoid=0.7,multi_hop=0.2,unanswerable=0.1")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    gen.add_argument(
        "--no-require-context",
        action="store_true",
        help="keep questions the model answers without the passage",
    )
    gen.add_argument("--max-calls", type=int, help="the budget: no LLM call beyond this many")
    gen.add_argument(
        "--data-dir", help="where the LLM call cache lives (default $RAG_DATA_DIR or ./.rag_data)"
    )
    gen.add_argument(
        "--dry-run", action="store_true", help="print the estimated calls and cost, write nothing"
    )
    gen.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    models.add_parsers(sub)
    gate.add_parser(sub)
    gc.add_parser(sub)
    calibrate_judge.add_parser(sub)
    import_labels.add_parser(sub)
    components.add_parser(sub)
    warm_process.add_parser(sub)
    args = parser.parse_args(argv)

    try:
        if args.command == "generate-qa":
            return generate_qa_command(args)
        if args.command == "validate":
            return _validate(args.spec)
        if args.command == "plan":
            return _plan(args)
        if args.command == "export":
            return models.export(args)
        if args.command == "verify-model":
            return models.verify_model(args)
        if args.command == "gate":
            return gate.run(args)
        if args.command == "gc":
            return gc.run(args)
        if args.command == "calibrate-judge":
            return calibrate_judge.run(args)
        if args.command == "components":
            return components.run(args)
        if args.command == "import-labels":
            return import_labels.run(args)
        if args.command == "warm":
            return warm_process.command(args)
        if args.output:
            _check_output(args.output)  # before any work
        t0 = time.perf_counter()
        # an unchanged rerun: answered from the last run's record, without importing Dagster
        run = None if args.force else remembered(args.spec, args.data_dir, args.store)
        if run is not None:
            print("every partition is up to date: nothing to compute", file=sys.stderr)
        else:
            warm_process.import_for_run()
            if start_warm and warm_process.starts_one() and (pid := warm_process.start_from_here()):
                print(
                    f"rag-sweep: warm process {pid} started: the next commands in this environment fork "
                    f"from it instead of importing the libraries again; it exits after "
                    f"{warm_process.DEFAULT_IDLE_MINUTES:g} idle minutes (`rag-sweep warm --stop`; "
                    "RAG_SWEEP_WARM=0 starts none)",
                    file=sys.stderr,
                )
            from runner.sweep import run_sweep

            run = run_sweep(args.spec, args.data_dir, args.force, args.verbose, store=args.store)
    except (
        SpecError,
        DatasetError,
        DataDirError,
        environment.Unreachable,
        DeviceUnavailable,
        CheckFailed,
        StepFailed,
        PluginError,
    ) as e:
        if getattr(args, "verbose", False):  # a server's URL in it keeps no password
            lines = traceback.format_exception(e.__cause__ or e)
            print(environment.redact("".join(lines)), end="", file=sys.stderr)
        print(f"error: {environment.redact(str(e))}", file=sys.stderr)
        if args.command == "run" and not args.verbose:
            print("(rerun with --verbose for the traceback)", file=sys.stderr)
        if isinstance(e, StepFailed):
            return 4 if args.command == "gate" else 1  # a gate's 1 is its verdict "fail"
        return 2
    return _print_run(run, args, time.perf_counter() - t0)


def _interrupted() -> None:
    print(
        "\ninterrupted: every complete artifact is kept; run the same command again to resume",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)  # now: LLM calls still in flight would hold the exit until they end or time out


def _validate(spec: str) -> int:
    from orchestration.plans import load_plan
    from runner.estimate import load_data

    plan = load_plan(spec)
    corpus, qa = load_data(plan.sweep)
    if qa is None:
        print(estimate_line(plan.sweep.qa_generation, corpus, plan.sweep.qa_path))
    questions = qa.height if qa is not None else f"{plan.sweep.qa_generation.questions} generated"
    print(
        f"{plan.sweep.name}: {corpus.height} documents, {questions} questions; {len(plan.configs)} configs, "
        + ", ".join(f"{len(keys)} {stage}" for stage, keys in plan.partitions.items())
    )
    _warn_unsegmented(plan, corpus, qa)
    if line := plugins_line():
        print(line)
    for key in plan.config_keys:
        print(f"  {key}")
    _warn_size(plan)
    return 0


def _plan(args) -> int:
    from runner.estimate import bill

    plan, estimate = bill(args.spec, args.data_dir, args.store)
    search = plan.sweep.search
    adaptive = (
        f"; search {search.strategy} evaluates {_of_them(plan)}"
        if search.sequential
        else f"; search halving starts {_of_them(plan)} on "
        f"{min(search.start_questions, estimate.selection_questions)} questions"
        if search.how == "halving"
        else ""
    )
    print(f"{plan.sweep.name}: {len(plan.config_keys)} configs{adaptive}")
    print("\n".join(estimate.lines()))
    return 0


if __name__ == "__main__":
    console()
