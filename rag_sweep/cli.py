"""`rag-sweep`: run a sweep end to end through the same Dagster assets, in process, no server needed.

The input files are observed and snapshotted, then the plan's partitions run, a stage's due partitions in
one Dagster run once the partitions they read are complete, into a persistent Dagster instance under `<data-dir>/dagster_home`
(so `dg dev` can show them). A partition whose latest materialization already holds the artifact these
snapshots give is skipped, so re-running an unchanged spec recomputes nothing; a killed run resumes from
what is complete. The work is the runner's (rag_sweep/runner/); each command is a module of
rag_sweep/commands/ whose parser sets the `handler` that runs it (`set_defaults`). This module builds the
command line from them, checks the files a command writes and the servers it uses, and turns a failure into
one redacted line; `--help` lists every command's usage from its parser.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import traceback
import warnings

from rag_core.common.extras import MissingExtra
from rag_core.common.registry import PluginError
from rag_core.data.datasets import DatasetError, DataWarning
from rag_core.planning.spec import SpecError

# what a run and an export print (kept importable from here: the CLI's names)
from rag_sweep.commands import (
    calibrate_judge,
    components,
    gate,
    gc,
    generate_qa,
    import_labels,
    models,
    plan,
    run,
    validate,
)
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
from resources import (
    environment,  # first: the process defaults (rag_assets imports it first too)
    reachability,
)
from resources.devices import DeviceUnavailable
from resources.no_links import PlantedLink
from resources.shipping import ExportWarning
from resources.storage import check_new_file, is_remote, normalized


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


# every command, in the order --help lists them: a module of rag_sweep/commands/ whose `add_parser(sub)` adds
# its parser (models: three) with the `handler` that runs it
COMMANDS = (run, validate, plan, generate_qa, models, gate, gc, calibrate_judge, import_labels, components)


def build_parser() -> argparse.ArgumentParser:
    """The `rag-sweep` command line: one subcommand each (subcommands)."""
    parser = RedactingParser(prog="rag-sweep", formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
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
    MissingExtra,
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
    # the hint where a traceback says more than the line: a bug, a library's error, a step that raised; a
    # clean refusal of bad input (a file, a row, a field) is the whole story, in every command alike
    if (
        hasattr(args, "verbose")
        and not verbose
        and (isinstance(e, StepFailed) or not isinstance(e, EXPECTED))
    ):
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


if __name__ == "__main__":
    console()
