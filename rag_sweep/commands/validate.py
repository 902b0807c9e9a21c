"""`rag-sweep validate`: a sweep file and its data checked, and its configs listed, before any work."""

from __future__ import annotations

from rag_core.planning.extension_points import plugins_line
from rag_sweep.printing import _warn_size, _warn_unsegmented


def add_parser(sub) -> None:
    cmd = sub.add_parser("validate", help="validate a sweep file and its data, and list its configs")
    cmd.add_argument("spec", help="sweep YAML file")
    cmd.set_defaults(handler=run)


def run(args) -> int:
    from rag_assets.orchestration.plans import load_plan
    from rag_sweep.runner.inputs_check import load_data, qa_generation_line, require_extras

    plan = load_plan(args.spec)
    require_extras(plan)
    corpus, qa = load_data(plan.sweep)
    if qa is None:
        print(qa_generation_line(plan.sweep.qa_generation, corpus, plan.sweep.qa_path))
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
