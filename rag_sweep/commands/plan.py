"""`rag-sweep plan`: what a run would compute and cost for a sweep and data dir, before running it
(rag_sweep/runner/estimate.py): nothing is materialized."""

from __future__ import annotations

from rag_sweep.printing import _of_them, search_spend_line


def add_parser(sub) -> None:
    cmd = sub.add_parser("plan", help="what a run would compute and cost, before running it")
    cmd.add_argument("spec", help="sweep YAML file")
    cmd.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    cmd.add_argument("--store", help="vector store of configs that name none")
    cmd.set_defaults(handler=run)


def run(args) -> int:
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
