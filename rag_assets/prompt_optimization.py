"""Prompt optimization: GEPA evolves the text components of a config (rag_core/optimization), partitioned by
the config it starts from. It reads what the config's first optimized stage reads (`optimize.first_stage`:
the rerankings for answer-side prompts, the retrievals for the reranking prompt, the vector index for the
query transformation prompt) and the selection split of the QA set (never the holdout), runs the config's
stages from there with each candidate's texts, and writes the candidates it found.
The best prompts become a new config of the plan (rag_assets/orchestration/plans.py reads them from the data dir), whose
answers, evaluations, leaderboard rank, holdout confirmation and MLflow run are those of any config.

MLflow keeps one run per optimization with a child run per GEPA candidate (its prompts and validation
score) and the best prompts as artifacts. GEPA's state lives beside the data dir's other work, so a killed
optimization resumes from it; with the call cache, nothing already paid for is paid again."""

from __future__ import annotations

import difflib
import html
import json
import re
from pathlib import Path

import dagster as dg
import polars as pl

from rag_assets.retrievals import live_index
from rag_assets.stage_asset import asset_key, forced
from rag_core.common.fingerprint import fingerprint, short_hash
from rag_core.common.local_models import model_version
from rag_core.decision.holdout import SELECTION
from rag_core.metrics.languages import segmenter
from rag_core.optimization.contexts import Contexts
from rag_core.planning.plan import Plan
from rag_core.planning.stages import stage
from resources.artifacts import Artifact, QuestionSplit
from resources.environment import user_cache_dir
from resources.storage import atomic_write, data_root

OPTIMIZATION = "prompt_optimizations"
VERSION = 2  # bump when the optimization's code changes what it finds for the same inputs
# 2: at the smallest budget GEPA runs its one iteration (it ran none)


def optimized_dir(data_dir, prefix: str) -> Path:
    """Where a sweep's optimizations say what they found: one `<config key>.json` each."""
    return data_root(data_dir) / OPTIMIZATION / prefix


def optimized_prompts(data_dir, prefix: str) -> dict[str, dict]:
    """config key it started from -> what its latest optimization found (`best` prompts, scores ...)."""
    folder = optimized_dir(data_dir, prefix)
    if not folder.exists():
        return {}
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):  # a damaged pointer is not trusted; the optimization runs again
            continue
        out[found["config_key"]] = found
    return out


def identity(plan: Plan, key: str) -> dict:
    """What an optimization's result depends on beside its inputs: the config, the optimize section, and
    the version of a cross-encoder it reranks with again (a reranking it reruns is not among its inputs)."""
    c = plan.config(key)
    config = c.model_dump(mode="json")
    # settings added since the first optimizations: unset, they leave those optimizations' fingerprints be
    for section, name in (("retrieval", "query_prompt"), ("rerank", "prompt")):
        if config[section][name] is None:
            del config[section][name]
    out = {
        "version": VERSION,
        "config": config,
        "optimize": plan.sweep.optimize.model_dump(mode="json"),
        "weights": plan.sweep.weights,
    }
    if plan.sweep.optimize.first_stage != "answers" and c.rerank.method == "cross_encoder":
        out["reranker_version"] = model_version(c.rerank.model)
    return out


def upstream_stage(plan: Plan) -> str:
    """The stage whose artifact the optimization starts from: the one before its first optimized stage."""
    return stage(plan.sweep.optimize.first_stage).upstream


def optimization_fingerprint(plan: Plan, key: str, upstream_fp: str, questions_fp: str) -> str:
    """The fingerprint of config `key`'s optimization on this upstream artifact (upstream_stage) and these
    questions (the selection's)."""
    # (not a stage of the registry: its code version is in its identity); a named language scores its
    # candidates' answers (none: the fingerprints optimizations had before languages)
    identified = identity(plan, key)
    if plan.sweep.language:
        identified = {"identity": identified, "language": plan.sweep.language}
        if rule := segmenter(plan.sweep.language):  # ja, th, ko: the word segmenter too (none: as before)
            identified["segmenter"] = rule
    return fingerprint(OPTIMIZATION, identified, {"qa_set": questions_fp, upstream_stage(plan): upstream_fp})


def optimization_ref(plan: Plan, key: str, data, inputs: dict[str, str], fps: dict):
    """The artifact config `key`'s optimization makes from the inputs as last snapshotted (`{'corpus': fp,
    'qa_set': fp}`; `fps`: `plan.fingerprints(inputs)`, worked out once by the caller)."""
    from resources.artifacts import ArtifactRef

    up = upstream_stage(plan)
    upstream = fps[(up, plan.key_of(plan.config(key), up))]
    questions = plan.qa_fingerprint(inputs["qa_set"], SELECTION if plan.holdout else None)
    fp = optimization_fingerprint(plan, key, upstream, questions)
    return ArtifactRef(data_root(data), OPTIMIZATION, fp, key)


def optimization_due(plan: Plan, key: str, data, inputs: dict[str, str], fps: dict) -> bool:
    """Whether config `key`'s optimization has no complete artifact for these inputs (optimization_ref):
    what the runner and the deployment's sensor ask before requesting it."""
    return not optimization_ref(plan, key, data, inputs, fps).intact()


def _gepa_dir(data, fp: str) -> str:
    """GEPA's state (resumable), in this user's cache dir on this machine, one folder per data dir: GEPA
    saves and loads it as a pickle, so it is never kept where whoever can write the data dir (or bucket)
    could put one (loading it would run their code), nor in a temp dir another user can write."""
    root = user_cache_dir() / "gepa_state"
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    path = root / short_hash(str(data), 16) / fp
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _prompt_diff(seed: str, best: str) -> str:
    lines = difflib.unified_diff(seed.splitlines(), best.splitlines(), "seed", "optimized", lineterm="", n=1)
    return "\n".join(lines)


def _fenced(text: str, lang: str = "text") -> str:
    """A Markdown code block that keeps the text's line breaks as they are, whatever backticks it holds."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}{lang}\n{text}\n{fence}"


def side_by_side(found: dict, questions: pl.DataFrame) -> str:
    """The seed and the optimized prompts, one above the other with their line breaks and a diff, with the
    validation questions the optimized prompts now answer better and those they answer worse (Markdown;
    the questions' HTML escaped)."""
    esc = html.escape
    out = []
    for component, best in found["best"].items():
        seed = found["seed"][component]
        if best == seed:
            out += [f"### {component}", "(unchanged: the seed's text)", ""]
            continue
        diff = _prompt_diff(seed, best)
        out += [f"### {component}", "**seed**", _fenced(seed), "**optimized**", _fenced(best), "**diff**"]
        out += [_fenced(diff, "diff"), ""]
    text = dict(zip(questions["query_id"], questions["question"], strict=True))
    before, after = found["seed_val_scores"], found["best_val_scores"]
    won = sorted((q for q in after if after[q] > before.get(q, 0.0)), key=lambda q: before[q] - after[q])
    lost = sorted((q for q in after if after[q] < before.get(q, 0.0)), key=lambda q: after[q] - before[q])
    for title, ids in (("Now answered better", won), ("Now answered worse", lost)):
        out += ["", f"**{title}** ({len(ids)} of {len(after)} validation questions)"]
        out += [f"- {esc(text.get(q, q))} ({before.get(q, 0.0):.2f} → {after[q]:.2f})" for q in ids[:10]]
    return "\n".join(out)


def _log_to_mlflow(
    tracking, plan: Plan, key: str, fp: str, found: dict, candidates: pl.DataFrame
) -> str | None:
    """One run for the optimization, a child run per candidate, the best prompts as artifacts; logged
    once per optimization result (found by its fingerprint), so a rerun adds nothing."""
    if not tracking.enabled:
        return None
    client = tracking.client()
    exp = tracking.experiment_id(plan.sweep.name)
    done = client.search_runs(
        [exp], filter_string=f"tags.optimization_fingerprint = '{fp}' and tags.kind = 'prompt_optimization'"
    )
    if done:
        return done[0].info.run_id
    label = plan.labels.get(key, key)
    parent = client.create_run(
        exp,
        run_name=f"optimize: {label}",
        tags={
            "kind": "prompt_optimization",
            "sweep": plan.sweep.name,
            "optimization_fingerprint": fp,
            "started_from": key,
            "reflection_model": plan.sweep.optimize.reflection_model,
            "mlflow.note.content": (
                f"GEPA on {label}: validation score {found['seed_val_score']:.3f} (seed) -> "
                f"{found['best_val_score']:.3f} (candidate {found['best_index']}); {found['metric_calls']} "
                f"questions scored, {found['paid_calls']} calls paid (${found['cost_usd']:.4f}), stopped by "
                f"{found['stopped_by']}. Best prompts: artifacts best/, the seed's: seed/."
            ),
        },
    )
    pid = parent.info.run_id
    client.log_param(pid, "components", ",".join(plan.sweep.optimize.components))
    for name in ("seed_val_score", "best_val_score", "metric_calls", "paid_calls", "cost_usd"):
        client.log_metric(pid, name, float(found[name]))
    client.set_tag(pid, "stopped_by", found["stopped_by"])
    for component, text in found["best"].items():
        client.log_text(pid, text, f"best/{component}.txt")
        client.log_text(pid, found["seed"][component], f"seed/{component}.txt")
    for row in candidates.iter_rows(named=True):
        child = client.create_run(
            exp,
            run_name=f"candidate {row['index']}" + (" (seed)" if row["index"] == 0 else ""),
            tags={
                "mlflow.parentRunId": pid,
                "kind": "prompt_candidate",
                "optimization_fingerprint": fp,
                "parents": ",".join(map(str, row["parents"])),
                "best": str(row["index"] == found["best_index"]).lower(),
            },
        )
        client.log_metric(child.info.run_id, "val_score", row["val_score"])
        client.log_metric(child.info.run_id, "found_after_metric_calls", row["found_after_metric_calls"])
        for component, text in json.loads(row["prompts"]).items():
            client.log_text(child.info.run_id, text, f"{component}.txt")
        client.set_terminated(child.info.run_id)
    client.set_terminated(pid)
    return pid


# what the optimization reads, by its first optimized stage: what that stage's reruns need (beside the
# QA set), and the chunks and corpus a parent/child context expansion reads
READS = {
    "answers": ("rerankings",),
    "rerankings": ("retrievals", "embeddings"),
    "retrievals": ("vector_index", "embeddings"),
}
# the resources beside the LLM's it needs, likewise: a reranking or retrieval run again embeds (MMR, a
# query's vector) and searches the store
RESOURCES = {"answers": set(), "rerankings": {"embedder"}, "retrievals": {"embedder", "vector_stores"}}


def _contexts(context, plan: Plan, config, inputs: dict) -> Contexts:
    """The config's stages before the answers, as the optimization runs them (rag_core/optimization/contexts.py):
    bound to this deployment's embedder and vector store."""
    first = plan.sweep.optimize.first_stage
    if first == "answers":
        return Contexts(reranked=inputs["rerankings"].read())
    import functools

    from rag_core.retrieval.rerank import rerank
    from rag_core.retrieval.retrieve import retrieve
    from resources.embedders import chunk_vectors

    embed = context.resources.embedder.vectors_of(config.embedding.model)  # no component changes it
    vectors = functools.cache(lambda: chunk_vectors(inputs["embeddings"].read()))

    def rerank_(c, retrieved, qa, llm):
        device = (
            context.resources.embedder.local_device().name if c.rerank.method == "cross_encoder" else "cpu"
        )
        return rerank(c, retrieved, qa, llm, chunk_vectors=vectors, embed=embed, device=device)

    if first == "rerankings":
        return Contexts("rerankings", retrieved=inputs["retrievals"].read(), rerank=rerank_)
    store, collection = live_index(
        context.resources.vector_stores,
        config,
        inputs["vector_index"].read(),
        plan.key_of(config, "vector_index"),
    )
    chunks = inputs["chunksets"].read()

    def retrieve_(c, qa, llm):
        return retrieve(c, qa, chunks, store, collection, embed, llm)

    return Contexts("retrievals", retrieve=retrieve_, rerank=rerank_)


def optimization_asset(plan: Plan) -> dg.AssetsDefinition:
    keys = plan.optimizable_keys
    first = plan.sweep.optimize.first_stage
    ins = {
        "qa_set": dg.AssetIn(key=asset_key(plan, "qa_set")),
        "corpus": dg.AssetIn(key=asset_key(plan, "corpus")),
    }
    for name in (*READS[first], "chunksets"):
        mapping: dict[str, set[str]] = {}
        for key in keys:
            mapping.setdefault(plan.key_of(plan.config(key), name), set()).add(key)
        ins[name] = dg.AssetIn(
            key=asset_key(plan, name), partition_mapping=dg.StaticPartitionMapping(mapping)
        )
    stores = RESOURCES[first]

    @dg.asset(
        key=asset_key(plan, OPTIMIZATION),
        ins=ins,
        partitions_def=dg.StaticPartitionsDefinition(keys),
        io_manager_key="artifacts",
        required_resource_keys={"artifacts", "llm", "tracking", *stores},
        group_name=plan.prefix,
        kinds={"parquet", "mlflow"},
        pool="llm",
        automation_condition=None,  # started by the runner for the configs `optimize.configs` names
        description=(
            f"GEPA prompt optimization of {', '.join(plan.sweep.optimize.components)} with "
            f"{plan.sweep.optimize.reflection_model}, partitioned by the config it starts from; the best "
            "prompts become a new config (labelled ·optimized). Selection questions only."
        ),
    )
    def _optimize(context, **inputs):  # an AssetExecutionContext (string annotations are refused)
        import litellm

        from rag_core.optimization.evolve import optimize
        from resources.llm import Reasking

        key = context.partition_key
        config = plan.config(key)
        d = plan.sweep.decision
        qa_set = inputs["qa_set"]
        questions = QuestionSplit.of(qa_set, SELECTION, d.holdout, d.holdout_seed) if plan.holdout else qa_set
        fp = optimization_fingerprint(plan, key, inputs[upstream_stage(plan)].fp, questions.fp)
        artifacts, tracking = context.resources.artifacts, context.resources.tracking
        ref = artifacts.ref(OPTIMIZATION, fp, key)
        pointer = optimized_dir(artifacts.root, plan.prefix) / f"{fingerprint(key)[:16]}.json"
        qa = questions.read()
        if ref.intact() and not forced(context):
            frame, reused = ref.read(), True
            found = json.loads(ref.read("found")["json"][0])
        else:
            llm = Reasking(context.resources.llm) if forced(context) else context.resources.llm
            result = optimize(
                config,
                plan.sweep.optimize,
                qa,
                _contexts(context, plan, config, inputs),
                plan.sweep.weights,
                llm,
                lambda t: litellm.token_counter(model=config.generation.model, text=t),
                run_dir=_gepa_dir(artifacts.root, fp),
                parents=lambda: (inputs["chunksets"].read(), inputs["corpus"].read()),
                say=lambda m: context.log.debug(m),
                language=plan.sweep.language,
            )
            frame = pl.DataFrame(
                {
                    "index": [c.index for c in result.candidates],
                    "prompts": [json.dumps(c.prompts) for c in result.candidates],
                    "val_score": [c.val_score for c in result.candidates],
                    "parents": [c.parents for c in result.candidates],
                    "found_after_metric_calls": [c.found_after_metric_calls for c in result.candidates],
                },
                schema_overrides={"parents": pl.List(pl.Int64)},
            )
            found = {
                "config_key": key,
                "fingerprint": fp,
                "seed": result.seed,
                "best": result.best,
                "best_index": result.best_index,
                "improved": result.improved,
                "seed_val_score": result.candidates[0].val_score,
                "best_val_score": result.candidates[result.best_index].val_score,
                "seed_val_scores": result.candidates[0].val_scores,
                "best_val_scores": result.candidates[result.best_index].val_scores,
                "train_ids": result.train_ids,
                "val_ids": result.val_ids,
                "metric_calls": result.metric_calls,
                "paid_calls": result.paid_calls,
                "cost_usd": result.cost_usd,
                "stopped_by": result.stopped_by,
            }
            reused = False
        run_id = _log_to_mlflow(tracking, plan, key, fp, found, frame)
        # what the plan reads: the best prompts of this config's latest optimization (self-contained)
        atomic_write(pointer, lambda tmp: Path(tmp).write_text(json.dumps(found, indent=1)))
        parts = {"found": pl.DataFrame({"json": [json.dumps(found)]})}
        new_key = plan.key_of(config.with_texts(found["best"]))
        context.log.info(
            f"{plan.labels.get(key, key)}: validation score {found['seed_val_score']:.3f} -> "
            f"{found['best_val_score']:.3f} ({len(frame)} candidates, {found['metric_calls']} questions "
            f"scored, {found['paid_calls']} calls paid, ${found['cost_usd']:.4f}; stopped by {found['stopped_by']})"
        )
        return dg.Output(
            Artifact(ref) if reused else Artifact(ref, frame, parts),
            data_version=dg.DataVersion(fp),
            metadata={
                "fingerprint": dg.MetadataValue.text(fp),
                "reused": reused,
                "improved": found["improved"],
                "optimized_config": new_key if found["improved"] else "(none: the seed stayed best)",
                "seed_val_score": found["seed_val_score"],
                "best_val_score": found["best_val_score"],
                "candidates": len(frame),
                "metric_calls": found["metric_calls"],
                "paid_calls": found["paid_calls"],
                "cost_usd": found["cost_usd"],
                "stopped_by": found["stopped_by"],
                "validation_questions": len(found["val_ids"]),
                "prompts": dg.MetadataValue.md(side_by_side(found, qa)),
                **({"mlflow_run_id": run_id} if run_id else {}),
            },
        )

    return _optimize
