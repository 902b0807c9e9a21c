"""`rag-sweep gc`: list (and with --apply remove) what no given sweep needs in a data dir (rag_assets/orchestration/gc.py)."""

from __future__ import annotations

from resources import environment
from resources.storage import data_root, is_remote


def add_parser(sub) -> None:
    gc = sub.add_parser(
        "gc",
        help="list what none of the sweeps needs in the data dir (artifacts, vector collections, embedding-"
        "cache parts) and, with --apply, remove it",
    )
    gc.add_argument("specs", nargs="+", metavar="SPEC", help="every sweep file that ran on the data dir")
    gc.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    gc.add_argument("--store", help="vector store of configs that name none")
    gc.add_argument(
        "--older-than", default="30d", help="leave what was written more recently (default 30d; 0: any age)"
    )
    gc.add_argument("--apply", action="store_true", help="remove it (default: only list it)")
    gc.set_defaults(handler=run)


def run(args) -> int:
    from rag_assets.orchestration.gc import collect, parse_age, remove
    from rag_sweep.runner import load_plan, local_instance
    from rag_sweep.runner.lock import exclusive

    age = parse_age(args.older_than)  # before any work
    data = data_root(args.data_dir or environment.default_data_dir())
    plans = [load_plan(spec, args.store, data) for spec in args.specs]
    if not args.apply:  # a dry run only reads: it makes no folder, instance, store or lock file
        if not is_remote(data) and not data.is_dir():
            print(f"data dir {data} does not exist: nothing to remove")
            return 0
        garbage = collect(plans, data, _instance_to_read(data, local_instance), age)
    else:
        with exclusive(data):  # a run started meanwhile waits, then finds what it needs
            garbage = collect(plans, data, local_instance(data), age)
            remove(garbage, data)
    print("\n".join(garbage.lines(applied=args.apply)))
    return 0


def _instance_to_read(data, local_instance):
    """The Dagster instance whose history says what is needed; a local data dir that never held one is read
    as an empty instance (no runs: nothing needed) rather than made."""
    import dagster as dg

    if environment.dagster_home() or is_remote(data) or (data / "dagster_home").is_dir():
        return local_instance(data)
    return dg.DagsterInstance.ephemeral()
