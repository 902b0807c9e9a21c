"""What `rag-sweep run` and `rag-sweep export` print: the leaderboard, the recommendation and its
holdout, the commands that open the Dagster and MLflow UIs, and how to load and serve the champion or an
exported model, and what validate and plan say of a sweep's size (every value quoted for the shell; a tracking URI's password never printed)."""

from __future__ import annotations

import inspect
import shlex
import sys
import textwrap
from pathlib import Path

from rag_assets.board_files import leaderboard_path, read_decision
from rag_core.common.text import UNSEGMENTED_ADVICE, unsegmented_share
from rag_core.decision.config_names import in_labels, named, reason
from rag_core.decision.holdout import holdout_share, unsupported_claim
from rag_core.decision.leaderboard import TERMINAL_LEGEND, terminal_columns, to_terminal
from rag_core.metrics import undefined_reasons
from rag_core.search.strategies import STRATEGIES
from rag_sweep.runner.up_to_date import Remembered, Shipping, shipping_facts
from resources import environment
from resources.environment import batch_size

LARGE_SWEEP = 500  # configs a grid evaluates one by one before validate suggests sampling them


def _of_them(plan) -> str:
    """How many of the sweep's configs a search evaluates, as it will be: never more than there are."""
    n = len(plan.config_keys)
    return f"all {n}" if plan.trial_budget >= n else f"{plan.trial_budget} of the {n}"


def search_spend_line(plan, bill) -> str | None:
    """What a search that weighs costs (cost_aware) expects to spend at most, against its budget in cost
    units and what the whole space would cost."""
    from rag_core.search.cost import most_spent

    search = plan.sweep.search
    strategy = STRATEGIES.get(search.strategy)
    if bill.cost_model is None or strategy.factory is None:
        return None
    if "budget" not in inspect.signature(strategy.factory).parameters:
        return None
    budget = search.budget.in_cost_units()
    most, every = most_spent(bill.cost_model, budget, plan.trial_budget)

    def part(unit: str, what: str, fmt: str) -> str:
        cap = getattr(budget, unit)
        limit = f"budget {format(cap, fmt)}" if cap is not None else "no budget"
        return f"{format(getattr(most, unit), fmt)} {what} ({limit}; every config: {format(getattr(every, unit), fmt)})"

    return (
        f"  search {search.strategy} expects to spend at most: {part('index_builds', 'index builds', ',.0f')}, "
        f"{part('llm_calls', 'LLM calls', ',.0f')}, ${part('usd', 'USD', '.4f')}"
    )


def _warn_size(plan) -> None:
    """A grid evaluates every config, a stage's partitions in batches of Dagster runs: say what that means."""
    steps = sum(len(keys) for keys in plan.partitions.values())
    search = plan.sweep.search
    if search.adaptive:
        print(f"a {search.strategy} search evaluates {_of_them(plan)} configs, choosing as it goes")
        return
    runs = sum(-(-len(keys) // batch_size()) for keys in plan.partitions.values() if keys)
    print(
        f"a run evaluates all {len(plan.configs)} configs: up to {steps} steps in about {runs} Dagster runs "
        "(a stage's partitions per run)"
    )
    if len(plan.configs) > LARGE_SWEEP:
        print(
            f"warning: {len(plan.configs)} configs is a large grid; `rag-sweep plan` estimates its time. To "
            "evaluate a part of it, set search.strategy: bayesian or halving (they choose as they go) or "
            "random, with search.budget.max_configs",
            file=sys.stderr,
        )


def _warn_unsegmented(plan, corpus, qa) -> None:
    """Keyword search with plain or english cannot split text written without spaces between words
    (rag_core/common/text.py); a segmenting analyzer (chinese, japanese, thai) does."""
    from rag_core.retrieval.keywords import segments

    if not any(c.retrieval.reads_keywords and not segments(c.index.bm25_analyzer) for c in plan.configs):
        return
    docs = unsegmented_share(corpus["text"].to_list())
    questions = unsegmented_share(qa["question"].to_list()) if qa is not None else 0.0
    if docs or questions:
        print(
            f"warning: {docs:.0%} of the documents and {questions:.0%} of the questions are written without "
            f"spaces between words. {UNSEGMENTED_ADVICE}",
            file=sys.stderr,
        )


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


def _print_board(board, full_table: Path | None = None) -> None:
    """The leaderboard as a compact table (short labels; fits 120 columns) with a legend."""
    print(to_terminal(board, terminal_columns(board)))
    print("\n" + textwrap.fill(TERMINAL_LEGEND, width=118))
    if full_table is not None:
        print(f"every metric and the full config keys: {full_table}")


def _print_recommendation(data: Path, sweep: str, labels: dict[str, str] | None = None) -> None:
    """The recommendation by its label, with its config key once; what follows names configs by label."""
    labels = labels or {}
    decision = read_decision(data, sweep)
    key = decision["recommended"]
    print(f"\nRecommended: {named(key, labels)}\n  {in_labels(reason(decision), labels)}")
    if decision["advice"]:
        print(f"  {decision['advice']}")
    if held := decision.get("holdout"):
        print(
            f"  Holdout ({holdout_share(decision)}): "
            + ("pending" if held.get("pending") else in_labels(held["verdict"], labels))
        )
    if undefined := decision.get("undefined_metrics"):
        print(
            f"  Undefined for every config, left out of the overall score: {', '.join(undefined)} "
            f"(no question has what they need: {undefined_reasons(undefined)})"
        )
    if judge := decision.get("judge"):  # the judge against people's labels (evaluation.judge_labels)
        print(f"  Judge {judge['model']}, faithfulness_judge {judge['reason']}")
    print(f"  Ship report: {leaderboard_path(data, sweep).with_suffix('.report.html')}")


def serve_command(model: str | Path, tracking_uri: str | None = None, from_env: bool = False) -> str:
    """The shell line that serves a model (a folder: MLflow's; a `models:/` URI: `rag-sweep serve`, which
    serves a private copy it checked), every value quoted for the shell
    (`shlex.quote` leaves a plain one as it is); the project's environment first on PATH. `from_env`: the
    tracking URI holds a password, so the line reads it from $MLFLOW_TRACKING_URI instead of printing it."""
    env = (
        'MLFLOW_TRACKING_URI="$MLFLOW_TRACKING_URI" '
        if from_env
        else f"MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)} "
        if tracking_uri
        else ""
    )
    if str(model).startswith("models:/"):  # served from a private copy checked first, not the registry's
        return f"PATH=$PWD/.venv/bin:$PATH {env}rag-sweep serve {shlex.quote(str(model))} -p 5001"
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


def _print_champion(
    shipping: Shipping, sweep: str, unsupported: str | None, labels: dict[str, str] | None = None
) -> None:
    """How to load and serve the registered winner, when the registry holds one and this sweep's evidence
    supports it (`unsupported`: why it does not); the winner by its label where the board names it."""
    labels = labels or {}
    from resources.shipping.registry import ALIAS

    if not shipping.enabled:
        return
    if unsupported:
        print(f"\nNo champion registered: {unsupported}")
        if shipping.champion is not None:
            version, key = shipping.champion
            print(
                f"  models:/{sweep}@{ALIAS} is still version {version} ({labels.get(key) or key}), from an "
                "earlier leaderboard"
            )
        return
    if shipping.champion is None:
        return
    (version, key), uri, store = shipping.champion, f"models:/{sweep}@{ALIAS}", shipping.resolved_uri
    # a tracking URI with a password is never printed: the commands read it from $MLFLOW_TRACKING_URI, as
    # they do when pasted in the shell that ran the sweep
    secret = shipping.display_uri != store
    load = "os.environ['MLFLOW_TRACKING_URI']" if secret else repr(store)
    print(
        f"\nShip the winner ({uri}, version {version}: {labels.get(key) or key}):\n"
        + (
            f"  (the tracking URI {shipping.display_uri} holds a password: the commands read it from "
            "$MLFLOW_TRACKING_URI; set it in the shell they run in)\n"
            if secret
            else ""
        )
        + f"  Load it:  mlflow.set_tracking_uri({load}); from resources.shipping.registry import load_champion; "
        f"load_champion({uri!r}).predict(pandas.DataFrame({{'question': ['...']}}))\n"
        f"  Serve it: {serve_command(uri, store, secret)}\n"
        "            curl -s 127.0.0.1:5001/invocations -H 'Content-Type: application/json' "
        '-d \'{"dataframe_records": [{"question": "..."}]}\''
    )


def _print_explore(
    shipping: Shipping, sweep: str, spec: Path, data: Path, home: Path | str, store_name: str
) -> None:
    """The shell lines that open the Dagster UI and the MLflow UI on this run, every value quoted."""
    q = shlex.quote
    runs_url = shipping.runs_url or "http://127.0.0.1:5000"
    store = shipping.display_uri  # a server's password is never printed (the browser asks for it)
    mlflow = (
        f"LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/mlflow ui --backend-store-uri {q(store)}   (then open "
        if store.startswith("sqlite:")
        else "open "  # the deployment's MLflow server
    )
    print(
        "\nExplore the results:\n"
        f"  Dagster UI: DAGSTER_HOME={q(str(home))} RAG_SWEEP={q(str(spec))} RAG_DATA_DIR={q(str(data))} "
        f"RAG_VECTOR_STORE={q(store_name)} DAGSTER_GRPC_TIMEOUT_SECONDS=240 .venv/bin/dg dev   (then open "
        "http://127.0.0.1:3000)\n"
        f"  MLflow UI:  {mlflow}{runs_url}: experiment {sweep}, its configs best first"
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
    labels = dict(zip(board["config_key"], board["label"], strict=True)) if "label" in board.columns else {}
    _print_recommendation(data, sweep.name, labels)
    if args.output:
        _write(board, args.output)
    # an unchanged rerun answered from its record holds what the last run read from MLflow
    shipping = (
        run.shipping
        if isinstance(run, Remembered)
        else shipping_facts(run.defs.resources["tracking"], sweep.name)
    )
    home = environment.dagster_home() or data / "dagster_home"
    _print_explore(shipping, sweep.name, Path(args.spec).resolve(), data, home, plan.store)
    unsupported = unsupported_claim(read_decision(data, sweep.name))
    _print_champion(shipping, sweep.name, unsupported, labels)
    if run.champion_kept:
        print(f"error: the champion was not replaced: {run.champion_kept}", file=sys.stderr)
        return 1
    if unsupported:
        print(f"error: the sweep recommends nothing it can support: {unsupported}", file=sys.stderr)
        return 1
    return 0


def print_gate(gated) -> None:
    """Each candidate's verdict and figures, the notes, where the reports are, the gate's verdict last."""
    r, s = gated.result, gated.result.settings
    test = (
        f"within ±{s.margin:g} (equivalence)" if s.equivalence else f"margin {s.margin:g} (non-inferiority)"
    )
    extra = "".join(f", {m} {x:g}" for m, x in s.metric_margins.items())
    print(
        f"gate {gated.plan.sweep.name}: {len(r.candidates)} candidate(s) vs {r.baseline} on {r.questions} "
        f"questions; {test}{extra}; paired t-tests, {s.level:.0%} intervals, Holm at alpha {s.alpha:g}"
    )
    width = max(len(c.label) for c in r.candidates)
    for c in r.candidates:
        for t in c.tests:
            print(f"  {t.verdict:<12} {c.label:<{width}}  {t.metric:<14} {t.why}")
    for note in gated.notes:
        print(f"note: {note}")
    print(f"reports: {gated.folder}")
    print(f"verdict: {r.verdict} (exit {r.exit_code})")
