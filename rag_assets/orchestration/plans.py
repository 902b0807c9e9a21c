"""A sweep's plan from its file and the deployment's environment, built in this one place, and as a document
another machine resolves the same plan from. Dagster-free: the CLI answers an unchanged rerun with it
without importing Dagster (rag_sweep/runner/up_to_date.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_core.planning.plan import Plan
from rag_core.planning.spec import RagConfig, Sweep, component_used, load_sweep
from resources.environment import default_data_dir, deployment_store, llm_api_base


def load_plan(
    spec: str | Path,
    store: str | None = None,
    data_dir: str | Path | None = None,
    extra: tuple[RagConfig, ...] = (),
) -> Plan:
    """The sweep file's plan; `store`: the vector store of configs that name none (default
    $RAG_VECTOR_STORE, else lancedb); the LLM endpoint ($RAG_LLM_API_BASE) is part of its fingerprints.
    A sweep that optimizes prompts also holds the configs its optimizations found, read from `data_dir`
    (default $RAG_DATA_DIR, else ./.rag_data). `extra`: configs evaluated beside the sweep's own (a gate's
    baseline), after them. A component name a plug-in gave when the sweep ran on that data dir, and none
    installed gives now, is a SpecError naming the package (rag_assets/orchestration/plugin_names.py)."""
    sweep = load_sweep(spec)
    if extra:
        sweep = sweep.model_copy(update={"configs": sweep.configs + tuple(extra)})
    optimized = None
    if sweep.optimize is not None:
        from rag_assets.prompt_optimization import optimized_prompts
        from rag_core.planning.plan import prefix_of

        found = optimized_prompts(data_dir or default_data_dir(), prefix_of(sweep.name))
        optimized = {key: f["best"] for key, f in found.items() if f.get("improved")}
    plan = Plan.resolve(sweep, store or deployment_store(), llm_api_base(), optimized)
    from rag_assets.orchestration.plugin_names import check_installed
    from resources.storage import data_root

    check_installed(data_root(data_dir or default_data_dir()), plan)  # a name a plug-in gave when it ran
    return plan


PLAN_FORMAT = "rag-sweep plan 1"


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as plain data (JSON): the loaded sweep and what the environment added when it was resolved
    (the default store, the LLM endpoint, the prompts optimizations found, the local models' versions);
    `plan_from_document` resolves the same plan from it on another machine."""
    components = plan.sweep.optimize.components if plan.sweep.optimize is not None else []
    optimized = {
        base: {n: plan.config(key).text(n) for n in components if component_used(plan.config(key), n)}
        for key, base in plan.optimized_from.items()
    }
    return {
        "format": PLAN_FORMAT,
        "sweep": plan.sweep.model_dump(mode="json"),
        "store": plan.store,
        "llm_api_base": plan.llm_api_base,
        "optimized": optimized,
        "model_versions": plan.model_versions,
        "plugins": _plugin_names(plan),
    }


def _plugin_names(plan: Plan) -> dict[str, dict[str, str]]:
    from rag_core.planning.extension_points import config_plugin_names

    names: dict[str, dict[str, str]] = {}
    for c in plan.sweep.configs:
        for field, named in config_plugin_names(c).items():
            names.setdefault(field, {}).update(named)
    return names


def plan_from_document(doc: Any) -> Plan:
    """The plan a `plan_document` describes, resolved by Plan.resolve (data only: nothing in it runs);
    ValueError when it is not such a document."""
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise ValueError(f"not a rag-sweep plan (format {PLAN_FORMAT!r})")
    from rag_core.planning.extension_points import not_installed

    if missing := not_installed(doc.get("plugins") or {}):  # else read here as another kind (a litellm model)
        raise ValueError(f"this machine cannot resolve the plan: {missing[0]}")
    try:
        sweep = Sweep.model_validate(doc["sweep"])
        return Plan.resolve(
            sweep, doc["store"], doc["llm_api_base"], doc["optimized"] or None, doc["model_versions"]
        )
    except (KeyError, TypeError, ValueError) as e:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"not a valid rag-sweep plan: {e}") from None


__all__ = ["load_plan", "plan_document", "plan_from_document"]
