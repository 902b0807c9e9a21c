"""The resolved plan of a sweep: for every stage, its partitions, each with its config, own settings and
the partition of every artifact it reads. Resolved once when a sweep loads, with the deployment's vector
store filled into every config that names none, so a partition key always names one content.

Assets, partition mappings, jobs, the CLI's order and the leaderboard all read the plan; nothing
re-derives it. Artifact fingerprints need the inputs' content (known when they are materialized):
`fingerprints` chains them through the plan in one pass.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from rag_core.common.local_models import is_local, model_version
from rag_core.components.stores import STORES, store_analyzers, store_ann_types
from rag_core.decision.holdout import (
    HOLDOUT,
    SELECTION,
    asset_name,
    holdout_key,
    split_fingerprint,
)
from rag_core.planning.labels import short_labels
from rag_core.planning.spec import (
    OPTIMIZABLE_STAGES,
    PROMPT_COMPONENTS,
    RagConfig,
    SpecError,
    Sweep,
    component_used,
)
from rag_core.planning.stages import CONFIG_STAGE, PARTITIONED, artifact_fingerprint, partition_key, stage


def prefix_of(sweep_name: str) -> str:
    """A sweep's asset-key prefix and group: its name with anything but [A-Za-z0-9_] as '_'."""
    return re.sub(r"[^A-Za-z0-9_]", "_", sweep_name)


def check_distinct_prefixes(sweeps: list[tuple[str, str]]) -> None:
    """Sweeps (name, where it is defined) that live side by side must not share a prefix: `a-b` and `a_b`
    would share asset keys, and each would show or overwrite the other's partitions. A SpecError naming both."""
    seen: dict[str, tuple[str, str]] = {}
    for name, where in sweeps:
        prefix = prefix_of(name)
        if prefix in seen and seen[prefix][0] != name:
            other, there = seen[prefix]
            raise SpecError(
                f"sweep {name!r} ({where}) and sweep {other!r} ({there}) share the Dagster prefix {prefix!r} "
                "(asset keys, group, jobs): rename one of them"
            )
        seen.setdefault(prefix, (name, where))


def _first_difference(stage_name: str, a: list, b: list) -> tuple[str, Any, Any]:
    """Where two chains of a stage (`[its own settings, its upstream stage's chain]`) first differ: (the
    setting, named with its stage, and its two values)."""
    while a[0] == b[0] and a[1] and b[1]:  # the same own settings: the difference is upstream
        stage_name, a, b = stage(stage_name).upstream, a[1], b[1]
    path, x, y = "", a[0], b[0]
    while isinstance(x, dict) and isinstance(y, dict) and x != y:
        name = next(n for n in sorted(set(x) | set(y), key=str) if x.get(n) != y.get(n))
        path = path if name == "settings" else f"{path}.{name}" if path else str(name)
        x, y = x.get(name), y.get(name)
    return f"the {stage_name} stage's setting {path or 'settings'!r}", x, y


def _with_store(c: RagConfig, store: str) -> RagConfig:
    """The config with `store` filled in when it names no vector store itself."""
    return c if c.index.store else c.model_copy(update={"index": c.index.model_copy(update={"store": store})})


@dataclass(frozen=True)
class Partition:
    stage: str
    key: str
    config: RagConfig  # the first config with this key: every config that shares it agrees up to here
    own: Any  # the settings this stage adds (part of its fingerprint)
    reads: dict[str, str | None]  # each artifact read -> its partition key (None: unpartitioned)
    # which split of the QA set the partition sees (rag_core/decision/holdout.py); None: the whole set (no holdout)
    split: str | None = None


@dataclass(frozen=True)
class Plan:
    sweep: Sweep
    store: str  # the default vector store, for configs that name none
    configs: tuple[RagConfig, ...]  # the sweep's configs with their store resolved
    partitions: dict[str, dict[str, Partition]]  # stage -> key -> partition, in sweep order
    # the holdout's partitions of the stages that read the QA set: each config's settings on the questions
    # the selection never sees, one per config (`<config key>~holdout`), in assets of their own whose
    # partitions are the finalists, added when a leaderboard names them (stage -> key -> partition)
    holdout_partitions: dict[str, dict[str, Partition]] = dataclasses.field(default_factory=dict)
    # configs whose prompts a prompt optimization evolved (`optimize:`): their key -> the config they started from
    optimized_from: dict[str, str] = dataclasses.field(default_factory=dict)
    llm_api_base: str | None = None  # the deployment's LLM endpoint it was resolved with
    # the version of every local model its fingerprints name, as resolved (local path -> version)
    model_versions: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        sweep: Sweep,
        store: str = "lancedb",
        llm_api_base: str | None = None,
        optimized: dict[str, dict[str, str]] | None = None,
        versions: dict[str, str | None] | None = None,
    ) -> Plan:
        """`store`: the vector store of configs that name none; `llm_api_base`: the deployment's LLM
        endpoint, part of the fingerprint of every partition that calls an LLM; `optimized`: the prompts
        prompt optimizations found (the config key they started from -> component -> text), each a new
        config after the sweep's own, sharing every partition up to its first optimized stage; `versions`:
        each local model's version as another machine read it (model_versions), instead of this one's."""
        try:
            STORES.get(store)
        except ValueError as e:  # an unknown store (the installed ones named) or a plug-in that fails to load
            raise SpecError(str(e)) from e
        configs = tuple(_with_store(c, store) for c in sweep.configs)
        optimized_from: dict[str, str] = {}
        if optimized and sweep.optimize is not None:
            by_key = {partition_key(CONFIG_STAGE, c): c for c in configs}
            extra = []
            for base_key, texts in optimized.items():
                # only the components the sweep optimizes now (a pointer left from an earlier `optimize:`
                # section may hold others: their stages would come before what the optimization reads)
                texts = {k: v for k, v in texts.items() if k in sweep.optimize.components}
                if base_key not in by_key or not texts:  # a config the sweep no longer has, or nothing
                    continue
                c = by_key[base_key].with_texts(texts)
                key = partition_key(CONFIG_STAGE, c)
                if key not in by_key and key not in optimized_from:
                    optimized_from[key] = base_key
                    extra.append(c)
            configs = configs + tuple(extra)
        for c in configs:
            if c.index.bm25_analyzer not in store_analyzers(c.index.store):
                able = [s for s in STORES.names() if c.index.bm25_analyzer in store_analyzers(s)]
                why = (
                    "it has no stemmer"
                    if c.index.bm25_analyzer == "english"
                    else "it does not index segmented keywords; a config that searches keywords follows "
                    "data.language unless it names its analyzer: name plain to keep it"
                )
                raise SpecError(
                    f"{sweep.path}: field 'index.bm25_analyzer': {c.index.store} cannot apply "
                    f"{c.index.bm25_analyzer!r} ({why}); stores that can: {', '.join(able)}"
                )
            if c.index.ann.type not in store_ann_types(c.index.store):
                able = [s for s in STORES.names() if c.index.ann.type in store_ann_types(s)]
                raise SpecError(
                    f"{sweep.path}: field 'index.ann': {c.index.store} has no {c.index.ann.type!r} index (it "
                    f"builds {', '.join(store_ann_types(c.index.store))}); stores that have: {', '.join(able)}"
                )
        partitions: dict[str, dict[str, Partition]] = {}
        found: dict[str | None, str | None] = {}  # each local model's folder is looked at once

        def version(model: str | None) -> str | None:
            if model not in found:
                found[model] = model_version(model) if versions is None else versions.get(model or "")
            return found[model]

        chains: dict[tuple[str, str], list] = {}
        for s in PARTITIONED:
            by_key: dict[str, Partition] = {}
            for c in configs:
                key = partition_key(s.name, c)
                own = s.own(c, sweep.judge, version, llm_api_base, sweep.language)
                up = chains.get((s.upstream, partition_key(s.upstream, c))) if s.upstream else []
                chain = [own, up]
                if (first := chains.setdefault((s.name, key), chain)) != chain:
                    setting, a, b = _first_difference(s.name, first, chain)
                    raise SpecError(
                        f"{sweep.path}: two configs differ in {setting} ({a!r} and {b!r}) but map to the "
                        f"same {s.name} partition key {key!r}: the key does not tell them apart; make them "
                        "differ where the key shows it (e.g. a model's last path component, a number's "
                        "first 6 significant digits)"
                    )
                if key not in by_key:
                    reads = {r: partition_key(r, c) if stage(r).partitioned else None for r in s.reads}
                    by_key[key] = Partition(s.name, key, c, own, reads)
            partitions[s.name] = by_key
        held: dict[str, dict[str, Partition]] = {}
        if sweep.decision.holdout > 0:
            asks = {s.name for s in PARTITIONED if "qa_set" in s.reads}
            for s in PARTITIONED:
                if s.name not in asks:
                    continue
                selection = {
                    k: dataclasses.replace(p, split=SELECTION) for k, p in partitions[s.name].items()
                }
                partitions[s.name] = selection
                # one partition per config at every holdout stage (the finalists' key in each holdout
                # asset): two finalists that share a stage's settings share its artifact, by content
                held[s.name] = {}
                for c in configs:
                    key = holdout_key(partition_key(CONFIG_STAGE, c))
                    p = selection[partition_key(s.name, c)]
                    reads = {r: (key if r in asks else rk) for r, rk in p.reads.items()}
                    held[s.name][key] = dataclasses.replace(p, key=key, config=c, split=HOLDOUT, reads=reads)
        plan = cls(
            sweep=sweep,
            store=store,
            configs=configs,
            partitions=partitions,
            holdout_partitions=held,
            optimized_from=optimized_from,
            llm_api_base=llm_api_base,
            model_versions={m: v for m, v in found.items() if m and v},
        )
        if sweep.optimize is not None and isinstance(sweep.optimize.configs, list):
            plan.named_optimization_starts()  # named configs exist and use every component: checked on load
        return plan

    @property
    def runs_local_models(self) -> bool:
        """Whether a config embeds with a local model or reranks with a cross-encoder (what $RAG_DEVICE
        places)."""
        return any(is_local(c.embedding.model) or c.rerank.method == "cross_encoder" for c in self.configs)

    # ---- prompt optimization -------------------------------------------------------------------------

    @property
    def optimizable_keys(self) -> list[str]:
        """The sweep's own configs an optimization can start from: those that use every component
        (the partitions of the prompt optimization asset)."""
        if self.sweep.optimize is None:
            return []
        return [
            self.key_of(c)
            for c in self.configs
            if self.key_of(c) not in self.optimized_from
            and all(component_used(c, name) for name in self.sweep.optimize.components)
        ]

    def first_changed_stage(self, key: str) -> str:
        """Optimized config `key`'s first stage whose partition is not the one of the config it started
        from: where its own work begins (a component GEPA left at the seed's text changes nothing, so this
        may come after `optimize.first_stage`)."""
        c, base = self.config(key), self.config(self.optimized_from[key])
        for name in OPTIMIZABLE_STAGES:
            if self.key_of(c, name) != self.key_of(base, name):
                return name
        raise ValueError(f"optimized config {key!r} shares every partition with the config it started from")

    def optimization_starts(self, decision: dict) -> list[str]:
        """The configs to optimize now: those `optimize.configs` names, or the leaderboard's recommendation
        (`decision`, the leaderboard's decision) or top tier, among the sweep's own configs that can be
        optimized (an optimized config is never optimized again)."""
        opt = self.sweep.optimize
        if opt is None:
            return []
        if isinstance(opt.configs, list):
            return self.named_optimization_starts()
        able = set(self.optimizable_keys)
        if opt.configs == "top_tier":
            wanted = decision.get("top_tier") or []
        else:
            wanted = [decision["recommended"]] if decision.get("recommended") else []
        # an optimized config that won stands for the config it started from
        wanted = [self.optimized_from.get(k, k) for k in wanted]
        return [k for k in dict.fromkeys(wanted) if k in able]

    def named_optimization_starts(self) -> list[str]:
        """The config keys `optimize.configs` names (keys or labels), each using every component to
        optimize; a SpecError naming the first that is unknown or does not."""
        opt = self.sweep.optimize
        by_label = {label: key for key, label in self.labels.items()}
        keys = []
        for wanted in opt.configs:
            key = wanted if wanted in self.labels else by_label.get(wanted)
            if key is None:
                raise SpecError(
                    f"{self.sweep.path}: field 'optimize.configs': no config {wanted!r} in this sweep "
                    "(a config key or label)"
                )
            for component in opt.components:
                if not component_used(self.config(key), component):
                    raise SpecError(
                        f"{self.sweep.path}: field 'optimize.configs': config {wanted!r} does not use "
                        f"{component} ({PROMPT_COMPONENTS[component]})"
                    )
            keys.append(key)
        return keys

    # ---- names ------------------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """The sweep's asset-key prefix, group and job-name prefix in a Dagster deployment."""
        return prefix_of(self.sweep.name)

    def asset_path(self, stage_name: str, key: str | None = None) -> list[str]:
        """The asset key (as its path) of a stage of this sweep, or of its input files (`corpus_file`,
        `qa_file`): prefixed by the sweep's name, so several sweeps live side by side. With a partition
        `key`: the asset that holds it (a holdout key's: the stage's holdout asset, `holdout_<stage>`)."""
        return [self.prefix, asset_name(stage_name, key)]

    @property
    def finalists_partitions(self) -> str:
        """The name of the dynamic partitions definition of the holdout's assets: the finalists' keys."""
        return f"{self.prefix}__holdout_finalists"

    # ---- partitions ------------------------------------------------------------------------------

    def keys(self, stage_name: str) -> list[str]:
        """The stage's partitions that selection runs (with the holdout's: `all_keys`)."""
        return list(self.partitions[stage_name])

    def all_keys(self, stage_name: str) -> list[str]:
        """Every partition of the stage, the holdout's (of its holdout asset) after the selection's: the
        order batches take them in."""
        return [*self.partitions[stage_name], *self.holdout_partitions.get(stage_name, {})]

    def partition(self, stage_name: str, key: str) -> Partition:
        try:
            if key in self.holdout_partitions.get(stage_name, {}):
                return self.holdout_partitions[stage_name][key]
            return self.partitions[stage_name][key]
        except KeyError:
            raise KeyError(f"sweep {self.sweep.name!r} has no {stage_name} partition {key!r}") from None

    def holdout_steps(self, config_key: str) -> list[tuple[str, str]]:
        """The (stage, key) steps that evaluate a config on the holdout, in dependency order."""
        key = holdout_key(config_key)
        return [(name, key) for name in self.holdout_partitions]

    def mapping(self, upstream: str, downstream: str) -> dict[str, set[str]]:
        """Upstream partition key -> the downstream partitions that read it (of the selection's assets; the
        holdout's read their own partition of each other)."""
        out: dict[str, set[str]] = defaultdict(set)
        for p in self.partitions[downstream].values():
            out[p.reads[upstream]].add(p.key)
        return dict(out)

    def key_of(self, c: RagConfig, stage_name: str = CONFIG_STAGE) -> str:
        """A config's partition key at a stage (its config key by default); `c` may name no store."""
        return partition_key(stage_name, _with_store(c, self.store))

    def config(self, key: str) -> RagConfig:
        return self.partition(CONFIG_STAGE, key).config

    @functools.cached_property
    def labels(self) -> dict[str, str]:
        """config key -> its short label (rag_core/planning/labels.py), worked out once per plan: every evaluation
        and the leaderboard read it."""
        own = [c for c in self.configs if self.key_of(c) not in self.optimized_from]
        labels = short_labels(own)
        for key, base in self.optimized_from.items():  # the config it started from, optimized
            labels[key] = f"{labels[base]}·optimized"
        return labels

    @property
    def config_keys(self) -> list[str]:
        return self.keys(CONFIG_STAGE)

    @property
    def trial_budget(self) -> int:
        """How many configs an adaptive search evaluates (halving: starts with)."""
        return min(self.sweep.search.budget.max_configs or len(self.config_keys), len(self.config_keys))

    @property
    def stores(self) -> list[str]:
        return list(dict.fromkeys(c.index.store for c in self.configs))

    def calls_llm(self, stage_name: str) -> bool:
        """Whether any partition of the stage calls an LLM (its asset then takes a slot of pool `llm`)."""
        s = stage(stage_name)
        return any(s.calls_llm(c, self.sweep.judge) for c in self.configs)

    # ---- fingerprints ----------------------------------------------------------------------------

    @property
    def board_identity(self) -> dict:
        """The leaderboard's own settings: what its fingerprint holds beside the evaluations it ranks (and,
        when the judge is measured against labels, the labels, the floor and the endpoint that judges them)."""
        identity = {"weights": self.sweep.weights, "decision": self.sweep.decision.model_dump()}
        if self.sweep.judge_labels_fp:
            ev = self.sweep.evaluation
            identity["judge"] = {
                "model": self.sweep.judge_model,
                "labels": self.sweep.judge_labels_fp,
                "min_kappa": ev.min_kappa,
                "threshold": ev.judge_threshold,
                "llm_api_base": self.llm_api_base,
            }
            if self.sweep.judge.custom:  # the prompt it is measured with (none: as before prompts were given)
                identity["judge"]["prompt"] = self.sweep.judge.prompt_version
        return identity

    @property
    def holdout(self) -> bool:
        return bool(self.holdout_partitions)

    def qa_fingerprint(self, qa_fp: str, split: str | None, rung: int | None = None) -> str:
        """The fingerprint of the questions a partition of `split` sees (halving `rung`: the first N of them)."""
        from rag_core.search.halving import subset_fingerprint

        d = self.sweep.decision
        fp = split_fingerprint(qa_fp, split, d.holdout, d.holdout_seed) if split else qa_fp
        return subset_fingerprint(fp, rung, self.sweep.search.seed) if rung is not None else fp

    def board_fingerprint(self, inputs: dict[str, str], fps: dict[tuple[str, str], str]) -> str:
        """The leaderboard's fingerprint once every config is evaluated on these input snapshots; `fps` is
        `fingerprints(inputs)`, which the caller has already worked out (a pass over every partition)."""
        evaluations = {k: fps[(CONFIG_STAGE, k)] for k in sorted(self.config_keys)}
        qa = self.qa_fingerprint(inputs["qa_set"], SELECTION if self.holdout else None)
        return artifact_fingerprint(
            "leaderboard", self.board_identity, {"evaluations": evaluations, "qa_set": qa}
        )

    @property
    def confirmation_identity(self) -> dict:
        """The holdout confirmation's own settings."""
        d = self.sweep.decision
        return {"holdout": d.holdout, "seed": d.holdout_seed, "alpha": d.alpha}

    def confirmation_fingerprint(
        self, inputs: dict[str, str], fps: dict[tuple[str, str], str], board_fp: str, finalists: list[str]
    ) -> str:
        """The holdout confirmation's fingerprint: the leaderboard it confirms and the finalists' holdout
        evaluations (their keys from `fps`, which `fingerprints(inputs)` gives)."""
        held = {holdout_key(k): fps[(CONFIG_STAGE, holdout_key(k))] for k in finalists}
        return artifact_fingerprint(
            "confirmation",
            self.confirmation_identity,
            {
                "leaderboard": board_fp,
                "evaluations": dict(sorted(held.items())),
                "qa_set": self.qa_fingerprint(inputs["qa_set"], HOLDOUT),
            },
        )

    def fingerprints(self, inputs: dict[str, str], rung: int | None = None) -> dict[tuple[str, str], str]:
        """(stage, key) -> the artifact fingerprint every partition gets from these input snapshots
        (`{'corpus': fp, 'qa_set': fp}`): what the assets compute one by one, in one pass. `rung`: as a
        halving rung of that many questions sees them."""
        fps: dict[tuple[str, str | None], str] = {(name, None): fp for name, fp in inputs.items()}
        for held in (False, True):
            for name, by_key in (self.holdout_partitions if held else self.partitions).items():
                for key, p in by_key.items():
                    reads = {r: fps[(r, k)] for r, k in p.reads.items()}
                    if "qa_set" in reads:
                        # a halving rung narrows the selection split only
                        n = rung if p.split != HOLDOUT else None
                        reads["qa_set"] = self.qa_fingerprint(inputs["qa_set"], p.split, n)
                    fps[(name, key)] = artifact_fingerprint(name, p.own, reads)
        return {k: v for k, v in fps.items() if k[1] is not None}
