"""`rag-sweep`: run a sweep end to end through the same Dagster assets, in process, no server needed.

    rag-sweep run SPEC [--data-dir DIR] [--output leaderboard.csv|.parquet] [--store NAME] [--force]
    rag-sweep validate SPEC
    rag-sweep plan SPEC [--data-dir DIR] [--store NAME]
    rag-sweep generate-qa CORPUS --model MODEL --out QA.jsonl
    rag-sweep export SPEC [--config KEY] --out DIR [--data-dir DIR]
    rag-sweep verify-model DIR --fingerprint FP | models:/NAME@ALIAS [--download DIR]

The input files are observed and snapshotted, then the plan's partitions run, each as a Dagster run as soon
as the partitions it reads are complete, into a persistent Dagster instance under `<data-dir>/dagster_home`
(so `dagster dev` can show them). A partition whose latest materialization already holds the artifact these
snapshots give is skipped, so re-running an unchanged spec recomputes nothing; a killed run resumes from
what is complete. The work is the runner's (runner/); this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
import time
import traceback
import warnings
from pathlib import Path

from dagster._core.errors import DagsterExecutionInterruptedError

from rag_assets.leaderboard import leaderboard_path, read_decision
from rag_assets.qa_generation import estimate_line, generate_qa_command
from rag_core.common.text import UNSEGMENTED_ADVICE, unsegmented_share
from rag_core.data.datasets import DatasetError, DataWarning
from rag_core.decision.holdout import holdout_share, unsupported_claim
from rag_core.decision.leaderboard import TERMINAL_LEGEND, terminal_columns, to_terminal
from rag_core.metrics import undefined_reasons
from rag_core.planning.spec import SpecError
from resources import environment  # first: the process defaults (rag_assets imports it first too)
from resources.storage import check_new_file, data_root, read_parquet
from runner import CheckFailed, DataDirError, StepFailed, bill, load_data, load_plan, run_sweep
from shipping import ExportWarning

LARGE_SWEEP = 500  # configs a grid evaluates one by one before validate suggests sampling them


def _of_them(plan) -> str:
    """How many of the sweep's configs a search evaluates, as it will be: never more than there are."""
    n = len(plan.config_keys)
    return f"all {n}" if plan.trial_budget >= n else f"{plan.trial_budget} of the {n}"


def _warn_size(plan) -> None:
    """A grid evaluates every config, each stage a Dagster run per partition: say what that means."""
    steps = sum(len(keys) for keys in plan.partitions.values())
    search = plan.sweep.search
    if search.adaptive:
        print(f"a {search.strategy} search evaluates {_of_them(plan)} configs, choosing as it goes")
        return
    print(f"a run evaluates all {len(plan.configs)} configs: up to {steps} steps, one Dagster run each")
    if len(plan.configs) > LARGE_SWEEP:
        print(
            f"warning: {len(plan.configs)} configs is a large grid; `rag-sweep plan` estimates its time. To "
            "evaluate a part of it, set search.strategy: bayesian or halving (they choose as they go) or "
            "random, with search.budget.max_configs",
            file=sys.stderr,
        )


def _warn_unsegmented(plan, corpus, qa) -> None:
    """Keyword search cannot split text written without spaces between words (rag_core/common/text.py)."""
    if all(c.retrieval.mode == "vector" for c in plan.configs):
        return
    docs = unsegmented_share(corpus["text"].to_list())
    questions = unsegmented_share(qa["question"].to_list()) if qa is not None else 0.0
    if docs or questions:
        print(
            f"warning: {docs:.0%} of the documents and {questions:.0%} of the questions are written without "
            f"spaces between words. {UNSEGMENTED_ADVICE}",
            file=sys.stderr,
        )


def _print_board(board, full_table: Path | None = None) -> None:
    """The leaderboard as a compact table (short labels; fits 120 columns) with a legend."""
    print(to_terminal(board, terminal_columns(board)))
    print("\n" + textwrap.fill(TERMINAL_LEGEND, width=118))
    if full_table is not None:
        print(f"every metric and the full config keys: {full_table}")


def _print_recommendation(data: Path, sweep: str) -> None:
    decision = read_decision(data, sweep)
    print(f"\nRecommended: {decision['recommended'] or 'none'}\n  {decision['why']}")
    if decision["advice"]:
        print(f"  {decision['advice']}")
    if held := decision.get("holdout"):
        print(
            f"  Holdout ({holdout_share(decision)}): "
            + ("pending" if held.get("pending") else held["verdict"])
        )
    if undefined := decision.get("undefined_metrics"):
        print(
            f"  Undefined for every config, left out of the overall score: {', '.join(undefined)} "
            f"(no question has what they need: {undefined_reasons(undefined)})"
        )
    print(f"  Ship report: {leaderboard_path(data, sweep).with_suffix('.report.html')}")


def _check_output(output: str) -> None:
    """--output must be a .csv or .parquet file this run can create: said before the sweep, not after it."""
    if Path(output).suffix not in (".csv", ".parquet"):
        raise SpecError(f"--output {output}: use a .csv or .parquet path")
    check_new_file(output, "--output")


def _write(board, output: str) -> None:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        board.write_csv(path)
    elif path.suffix == ".parquet":
        board.write_parquet(path)
    else:
        raise SystemExit(f"--output {output}: use a .csv or .parquet path")
    print(f"leaderboard written to {path}")


_default_show_warning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A loader's DataWarning (rows or values it dropped, counted) as one line, like the CLI's own warnings."""
    if issubclass(category, DataWarning | ExportWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    try:
        return _main(argv)
    except (KeyboardInterrupt, DagsterExecutionInterruptedError):  # after the run: printing its board
        _interrupted()
    except BrokenPipeError:  # `rag-sweep validate ... | head`: the reader left; no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        return 0


def _main(argv: list[str] | None) -> int:
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
    exp = sub.add_parser("export", help="write an evaluated config as an MLflow pyfunc model folder")
    exp.add_argument("spec", help="sweep YAML file")
    exp.add_argument("--config", help="a config key or label (default: the leaderboard's recommendation)")
    exp.add_argument("--out", required=True, help="the model folder to write (new or empty)")
    exp.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    exp.add_argument("--store", help="vector store of configs that name none")
    ver = sub.add_parser(
        "verify-model", help="check a model folder or a registered version without running any of its code"
    )
    ver.add_argument(
        "model",
        help="a model folder, or a registered version: models:/NAME@ALIAS or models:/NAME/N (the registry "
        "of $MLFLOW_TRACKING_URI)",
    )
    ver.add_argument("--fingerprint", help="a folder: the fingerprint `rag-sweep export` printed for it")
    ver.add_argument("--download", help="a registered version: the folder to download it to, checked")
    args = parser.parse_args(argv)

    try:
        if args.command == "generate-qa":
            return generate_qa_command(args)
        if args.command == "validate":
            return _validate(args.spec)
        if args.command == "plan":
            return _plan(args)
        if args.command == "export":
            return _export(args)
        if args.command == "verify-model":
            return _verify_model(args)
        if args.output:
            _check_output(args.output)  # before any work
        t0 = time.perf_counter()
        run = run_sweep(args.spec, args.data_dir, args.force, args.verbose, store=args.store)
    except (KeyboardInterrupt, DagsterExecutionInterruptedError):
        _interrupted()
    except (SpecError, DatasetError, DataDirError, environment.Unreachable, CheckFailed, StepFailed) as e:
        if getattr(args, "verbose", False):  # a server's URL in it keeps no password
            lines = traceback.format_exception(e.__cause__ or e)
            print(environment.redact("".join(lines)), end="", file=sys.stderr)
        print(f"error: {environment.redact(str(e))}", file=sys.stderr)
        if args.command == "run" and not args.verbose:
            print("(rerun with --verbose for the traceback)", file=sys.stderr)
        return 2 if not isinstance(e, StepFailed) else 1
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
    for key in plan.config_keys:
        print(f"  {key}")
    _warn_size(plan)
    return 0


def _plan(args) -> int:
    plan, estimate = bill(args.spec, args.data_dir, args.store)
    search = plan.sweep.search
    adaptive = (
        f"; search {search.strategy} evaluates {_of_them(plan)}"
        if search.strategy == "bayesian"
        else f"; search halving starts {_of_them(plan)} on "
        f"{min(search.start_questions, estimate.selection_questions)} questions"
        if search.strategy == "halving"
        else ""
    )
    print(f"{plan.sweep.name}: {len(plan.config_keys)} configs{adaptive}")
    print("\n".join(estimate.lines()))
    return 0


def _export(args) -> int:
    """The config as a model folder: the pipeline it was evaluated as, loadable and servable by MLflow."""
    from runner import local_instance
    from shipping.bundle import ExportError, collect, config_key_of, fingerprints, save

    data = data_root(args.data_dir or environment.default_data_dir())
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpecError(f"--out {out}: exists and is not an empty folder; name a new one")
    check_new_file(out / "MLmodel", "--out")
    plan = load_plan(args.spec, args.store)
    board_file = leaderboard_path(data, plan.sweep.name)
    if not board_file.exists():
        raise SpecError(f"sweep {plan.sweep.name} has no leaderboard in {data}: run it first")
    decision = read_decision(data, plan.sweep.name)
    try:
        key = config_key_of(plan, args.config, decision.get("recommended"))
        bundle = collect(plan, data, local_instance(data), read_parquet(board_file), decision, key)
    except ExportError as e:
        raise SpecError(str(e)) from e
    save(bundle, out)
    _print_export(bundle.label, key, out, fingerprints(out)["model_fingerprint"])
    return 0


def _verify_model(args) -> int:
    """A registered version: downloaded and checked against its registry tags. A folder: each bundled file
    against its manifest, and the whole folder against the fingerprint `rag-sweep export` printed (nothing
    else outside the folder says what it was). No code of the model runs."""
    import json

    from shipping.pipeline import BUNDLE, MANIFEST, TamperedModel, folder_files, folder_fingerprint, verify
    from shipping.registry import download_verified

    try:
        if args.model.startswith("models:/"):
            folder = download_verified(args.model, args.download)
            print(f"{args.model}: the registered model, as its registry tags record it, in {folder}")
            return 0
        if args.download:
            raise SpecError("--download: for a registered version (models:/...) only")
        folder = Path(args.model)
        if not (folder / "MLmodel").is_file():
            raise SpecError(f"{folder}: not a model folder (no MLmodel)")
        found = folder_fingerprint(folder_files(folder))
        if args.fingerprint and args.fingerprint != found:
            raise TamperedModel(
                f"{folder}: its fingerprint {found} is not the fingerprint {args.fingerprint} it was "
                "exported with: a file was changed, added or removed: refusing it"
            )
        verify(
            folder / "artifacts" / BUNDLE, json.loads((folder / "artifacts" / BUNDLE / MANIFEST).read_text())
        )
    except TamperedModel as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"{folder}: fingerprint {found}"
        + (
            " (the exported one)"
            if args.fingerprint
            else "\n  its files match its own manifest; compare the fingerprint with the one `rag-sweep "
            "export` printed (--fingerprint FP checks it)"
        )
    )
    return 0


def serve_command(model: str | Path, tracking_uri: str | None = None, from_env: bool = False) -> str:
    """The shell line that serves a model (a folder or a `models:/` URI), every value quoted for the shell
    (`shlex.quote` leaves a plain one as it is); the project's environment first on PATH. `from_env`: the
    tracking URI holds a password, so the line reads it from $MLFLOW_TRACKING_URI instead of printing it."""
    env = (
        'MLFLOW_TRACKING_URI="$MLFLOW_TRACKING_URI" '
        if from_env
        else f"MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)} "
        if tracking_uri
        else ""
    )
    return (
        f"PATH=$PWD/.venv/bin:$PATH {env}mlflow models serve -m {shlex.quote(str(model))} "
        "--env-manager local -p 5001"
    )


def _print_export(label: str, key: str, out: Path, fingerprint: str) -> None:
    """How to load (Python: a string literal) and serve (the shell: quoted) an exported model folder, its
    fingerprint and how to check a folder against it later."""
    print(
        f"wrote config {label} ({key}) as an MLflow model to {out}\n"
        f"  fingerprint: {fingerprint}  (keep it: nothing in the folder can vouch for the folder)\n"
        f"  check: .venv/bin/rag-sweep verify-model {shlex.quote(str(out))} --fingerprint {fingerprint}\n"
        f"  load:  mlflow.pyfunc.load_model({str(out)!r}).predict(pandas.DataFrame({{'question': [...]}}))\n"
        f"  serve: {serve_command(out)}"
    )


def _print_champion(tracking, sweep: str, unsupported: str | None) -> None:
    """How to load and serve the registered winner, when the registry holds one and this sweep's evidence
    supports it (`unsupported`: why it does not)."""
    from shipping.registry import ALIAS, current_champion

    if not tracking.enabled:
        return
    version = current_champion(tracking.client(), sweep)
    if unsupported:
        print(f"\nNo champion registered: {unsupported}")
        if version is not None:
            print(
                f"  models:/{sweep}@{ALIAS} is still version {version.version} "
                f"({version.tags.get('config_key')}), from an earlier leaderboard"
            )
        return
    if version is None:
        return
    uri, store = f"models:/{sweep}@{ALIAS}", tracking.resolved_uri()
    # a tracking URI with a password is never printed: the commands read it from $MLFLOW_TRACKING_URI, as
    # they do when pasted in the shell that ran the sweep
    secret = tracking.display_uri() != store
    load = "os.environ['MLFLOW_TRACKING_URI']" if secret else repr(store)
    print(
        f"\nShip the winner ({uri}, version {version.version}: {version.tags.get('config_key')}):\n"
        + (
            f"  (the tracking URI {tracking.display_uri()} holds a password: the commands read it from "
            "$MLFLOW_TRACKING_URI; set it in the shell they run in)\n"
            if secret
            else ""
        )
        + f"  Load it:  mlflow.set_tracking_uri({load}); from shipping.registry import load_champion; "
        f"load_champion({uri!r}).predict(pandas.DataFrame({{'question': ['...']}}))\n"
        f"  Serve it: {serve_command(uri, store, secret)}\n"
        "            curl -s 127.0.0.1:5001/invocations -H 'Content-Type: application/json' "
        '-d \'{"dataframe_records": [{"question": "..."}]}\''
    )


def _print_explore(tracking, sweep: str, spec: Path, data: Path, home: Path | str, store_name: str) -> None:
    """The shell lines that open the Dagster UI and the MLflow UI on this run, every value quoted."""
    q = shlex.quote
    runs_url = tracking.ranked_runs_url(sweep) or "http://127.0.0.1:5000"
    store = tracking.display_uri()  # a server's password is never printed (the browser asks for it)
    mlflow = (
        f"LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/mlflow ui --backend-store-uri {q(store)}   (then open "
        if store.startswith("sqlite:")
        else "open "  # the deployment's MLflow server
    )
    print(
        "\nExplore the results:\n"
        f"  Dagster UI: DAGSTER_HOME={q(str(home))} RAG_SWEEP={q(str(spec))} RAG_DATA_DIR={q(str(data))} "
        f"RAG_VECTOR_STORE={q(store_name)} .venv/bin/dagster dev   (then open http://127.0.0.1:3000)\n"
        f"  MLflow UI:  {mlflow}{runs_url}: experiment {sweep}, best first"
        + (")" if store.startswith("sqlite:") else "")
    )


def _print_run(run, args, seconds: float) -> int:
    board, plan, data, search = run.board, run.plan, run.data, run.search
    sweep = plan.sweep
    print(f"\nLeaderboard of sweep {sweep.name} ({board.height} configs, {seconds:.0f} s):\n")
    _print_board(board, leaderboard_path(data, sweep.name))
    if search is not None:
        print(
            f"\nSearch ({sweep.search.strategy}): {len(search.evaluated)} of {len(plan.config_keys)} configs "
            f"evaluated ({search.resumed} by an earlier run), {search.index_builds} index builds, "
            f"{search.llm_calls} LLM calls paid, ${search.llm_cost_usd:.4f}; stopped by {search.stopped_by}"
        )
        for key, n in (search.dropped or {}).items():
            print(f"  dropped after {n} questions: {key}")
    _print_recommendation(data, sweep.name)
    if args.output:
        _write(board, args.output)
    tracking = run.defs.resources["tracking"]
    home = environment.dagster_home() or data / "dagster_home"
    _print_explore(tracking, sweep.name, Path(args.spec).resolve(), data, home, plan.store)
    unsupported = unsupported_claim(read_decision(data, sweep.name))
    _print_champion(tracking, sweep.name, unsupported)
    if unsupported:
        print(f"error: the sweep recommends nothing it can support: {unsupported}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
