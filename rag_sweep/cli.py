"""`rag-sweep`: run a sweep end to end through the same Dagster assets, in process, no server needed.

The input files are observed and snapshotted, then the plan's partitions run, a stage's due partitions in
one Dagster run once the partitions they read are complete, into a persistent Dagster instance under `<data-dir>/dagster_home`
(so `dg dev` can show them). A partition whose latest materialization already holds the artifact these
snapshots give is skipped, so re-running an unchanged spec recomputes nothing; a killed run resumes from
what is complete. The work is the runner's (rag_sweep/runner/); this module parses arguments and prints.
Each command is a parser whose `handler` runs it (`set_defaults`): the larger ones a module of
rag_sweep/commands/ each; `--help` lists every command's usage from its parser.
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
from rag_sweep.commands import calibrate_judge, components, gate, gc, import_labels, models
from rag_sweep.printing import (  # noqa: F401
    _of_them,
    _print_champion,
    _print_explore,
    _print_export,
    _print_run,
    _warn_size,
    _warn_unsegmented,
    search_spend_line,
    serve_command,
)
from rag_sweep.runner.errors import CheckFailed, DataDirError, StepFailed
from rag_sweep.runner.up_to_date import remembered
from resources import (
    environment,  # first: the process defaults (rag_assets imports it first too)
    reachability,
)
from resources.devices import DeviceUnavailable
from resources.no_links import PlantedLink
from resources.shipping import ExportWarning
from resources.storage import check_new_file, is_remote, normalized


def _check_output(output: str) -> None:
    """--output must be a .csv or .parquet file this run can create: said before the sweep, not after it."""
    if Path(output).suffix not in (".csv", ".parquet"):
        raise SpecError(f"--output {output}: use a .csv or .parquet path")
    check_new_file(output, "--output")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A loader's DataWarning (rows or values it dropped, counted) as one line, like the CLI's own warnings."""
    if issubclass(category, DataWarning | ExportWarning):
        print(f"warning: {environment.redact(str(message))}", file=sys.stderr)
    else:  # a library's, as Python shows it, but redacted (it may name a server's URL)
        text = warnings.formatwarning(message, category, filename, lineno, line)
        try:
            (file or sys.stderr).write(environment.redact(text))
        except OSError:  # as Python's own: a warning that cannot be shown is dropped
            pass


def main(argv: list[str] | None = None) -> int:
    """`rag-sweep ARGV`, in this process."""
    warnings.showwarning = _show_warning
    if sys.stdout is None or not _open_fd(1):  # `rag-sweep run … >&-`: before any work (and before a file
        # the command opens is given fd 1, where a library's print would then write)
        print(
            f"error: {CLOSED_STDOUT}; run it again with its output sent somewhere (> FILE, | less)",
            file=sys.stderr,
        )
        return 2
    try:
        return _main(argv)
    except BrokenPipeError:  # `rag-sweep validate ... | head`: the reader left; one line, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        try:
            print(f"rag-sweep: {CLOSED_STDOUT} (its reader left); what it computed is kept", file=sys.stderr)
        except OSError:
            pass
        return 2
    except BaseException as e:  # after the run: printing its board
        if not _interrupt(e):
            raise
        _interrupted()


CLOSED_STDOUT = "standard output is closed"


def _open_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def console() -> None:
    """The `rag-sweep` command: `main`, then `exit_now`. Tests call `main`, which returns."""
    exit_now(main())


def exit_now(code: int | None) -> None:
    """End the process as Python's own exit would, less its teardown: after a run that loaded Dagster,
    MLflow and LanceDB, that spends 1-2.5 s freeing their modules one by one. What of it matters is done
    first: the threads that are not daemons joined, the atexit handlers run, the output flushed."""
    threading._shutdown()  # what the interpreter does first at exit: join the non-daemon threads
    atexit._run_exitfuncs()  # logging, multiprocessing's children, MLflow's async loggers
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the stream was closed when the command started
                stream.flush()
        except (BrokenPipeError, ValueError):  # the reader left: nothing more to say
            pass
    os._exit(code if isinstance(code, int) else 0)


def _interrupt(e: BaseException) -> bool:
    """Ctrl-C, or Dagster's word for it inside a run (Dagster is imported only by a run that computes)."""
    dagster = sys.modules.get("dagster")
    return isinstance(e, KeyboardInterrupt) or (
        dagster is not None and isinstance(e, dagster.DagsterExecutionInterruptedError)
    )


class RedactingParser(argparse.ArgumentParser):
    """argparse's messages redacted: a usage error echoes the arguments (`unrecognized arguments: --data_dir
    s3://KEY:PASSWORD@bucket`), before any command could redact them. Subcommands' parsers are of this class
    too (argparse makes them of the parent's class)."""

    def _print_message(self, message: str, file=None) -> None:
        super()._print_message(environment.redact(message) if message else message, file)


def build_parser() -> argparse.ArgumentParser:
    """The `rag-sweep` command line: one subcommand each (subcommands)."""
    parser = RedactingParser(prog="rag-sweep", formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize a sweep end to end and print its leaderboard")
    run.set_defaults(handler=_run)
    run.add_argument("spec", help="sweep YAML file")
    run.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    run.add_argument("--output", help="also write the leaderboard to this .csv or .parquet path")
    run.add_argument(
        "--store", help="vector store of configs that name none (default $RAG_VECTOR_STORE or lancedb)"
    )
    run.add_argument("--force", action="store_true", help="recompute every stage even if its artifact exists")
    run.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    val = sub.add_parser("validate", help="validate a sweep file and its data, and list its configs")
    val.add_argument("spec", help="sweep YAML file")
    val.set_defaults(handler=lambda args: _validate(args.spec))
    pln = sub.add_parser("plan", help="what a run would compute and cost, before running it")
    pln.add_argument("spec", help="sweep YAML file")
    pln.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    pln.add_argument("--store", help="vector store of configs that name none")
    pln.set_defaults(handler=_plan)
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
    gen.set_defaults(handler=generate_qa_command)
    models.add_parsers(sub)
    gate.add_parser(sub)
    gc.add_parser(sub)
    calibrate_judge.add_parser(sub)
    import_labels.add_parser(sub)
    components.add_parser(sub)
    parser.description = f"{__doc__.splitlines()[0]}\n\n{usages(parser)}\n\n" + "\n".join(
        __doc__.splitlines()[2:]
    )
    return parser


def usages(parser: argparse.ArgumentParser) -> str:
    """Every command's usage line, as its own parser writes it (one line each)."""
    return "\n".join(
        "    " + " ".join(p.format_usage().removeprefix("usage: ").split())
        for p in subcommands(parser).values()
    )


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by its name."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    environment.hide_secrets_of(sys.argv[1:] if argv is None else argv)  # a data dir's password ...
    args = parser.parse_args(argv)  # its errors are redacted too (RedactingParser)
    if getattr(args, "data_dir", None):  # `S3://b/p` is `s3://b/p` for every check and store alike
        args.data_dir = normalized(args.data_dir)

    try:
        _check_outputs(subcommands(parser)[args.command], args)
        if args.command not in NO_SERVERS:  # each server the command may use, tried now, in bounded time
            data_dir = getattr(args, "data_dir", None) or environment.default_data_dir()
            reachability.check_all(
                is_remote(data_dir),
                runs_steps=args.command == "gate",
                tracking_uri=getattr(args, "tracking_uri", None),
            )
        return args.handler(args)
    except Exception as e:  # any failure, ours or a library's: one redacted line
        if isinstance(e, BrokenPipeError) or _interrupt(e):  # main's to handle
            raise
        return _failed(e, args)


def _run(args) -> int:
    """`rag-sweep run`: the sweep materialized (or an unchanged rerun answered from the last run's record)."""
    if args.output:
        _check_output(args.output)  # its suffix (the path is checked with every command's outputs)
    t0 = time.perf_counter()
    # an unchanged rerun: answered from the last run's record, without importing Dagster
    run = None if args.force else remembered(args.spec, args.data_dir, args.store)
    if run is not None:
        print("every partition is up to date: nothing to compute", file=sys.stderr)
    else:
        from rag_sweep.runner.sweep import run_sweep

        run = run_sweep(args.spec, args.data_dir, args.force, args.verbose, store=args.store)
    return _print_run(run, args, time.perf_counter() - t0)


def _check_outputs(command: argparse.ArgumentParser, args) -> None:
    """Every file the command writes (an option whose help says it writes a file there) checked before any
    work: a folder, a device, /proc or a read-only place is a one-line error, not a traceback after it."""
    for action in command._actions:
        value = getattr(args, action.dest, None)
        said = (action.help or "").lower()
        if action.option_strings and isinstance(value, str) and "write" in said and "folder" not in said:
            check_new_file(value, max(action.option_strings, key=len))


# commands that read local files only, and `run`, whose runner tries the servers once its settings are
# checked (rag_sweep/runner/sweep.py: the fleet's settings are said before an unreachable server)
NO_SERVERS = {"validate", "components", "run"}

# what the product raises for bad input or a server it cannot use: its message is the whole story
EXPECTED = (
    SpecError,
    DatasetError,
    DataDirError,
    environment.Unreachable,
    DeviceUnavailable,
    CheckFailed,
    StepFailed,
    PluginError,
    PlantedLink,
)
MAX_MESSAGE = 500  # an unexpected error's message past this is cut (a library's may hold a whole response)


def _failed(e: Exception, args) -> int:
    """A command's failure as one line on stderr, `error: ...`, with no secret in it (environment.redact),
    its traceback (redacted too) only where the command has --verbose and it was given; exit 2, but 1 for
    a run's failed step (the run's verdict "it did not complete") and 4 for a gate's (its 1 is "worse")."""
    verbose = getattr(args, "verbose", False)
    if verbose:
        lines = traceback.format_exception(e.__cause__ or e)
        print(environment.redact("".join(lines)), end="", file=sys.stderr)
    message = " ".join(environment.redact(str(e)).split())  # one line, whatever the message held
    if not isinstance(e, EXPECTED):  # a bug or a library's error: say what it was, bounded
        message = f"{type(e).__name__}: {message}" if message else type(e).__name__
        if len(message) > MAX_MESSAGE:  # cut once redacted: a URL cut short would keep its password
            message = message[: MAX_MESSAGE - 1] + "…"
    print(f"error: {message}", file=sys.stderr)
    if hasattr(args, "verbose") and not verbose and (args.command == "run" or not isinstance(e, EXPECTED)):
        print("(rerun with --verbose for the traceback)", file=sys.stderr)
    if isinstance(e, StepFailed):
        return 4 if args.command == "gate" else 1  # a gate's 1 is its verdict "fail"
    return 2


def _interrupted() -> None:
    print(
        "\ninterrupted: every complete artifact is kept; run the same command again to resume",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)  # now: LLM calls still in flight would hold the exit until they end or time out


def _validate(spec: str) -> int:
    from rag_assets.orchestration.plans import load_plan
    from rag_sweep.runner.estimate import load_data, require_extras

    plan = load_plan(spec)
    require_extras(plan)
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
    from rag_sweep.runner.estimate import bill

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
    if spend := search_spend_line(plan, estimate):
        print(spend)
    return 0


if __name__ == "__main__":
    console()
