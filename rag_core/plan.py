"""The resolved plan of a sweep: for every stage, its partitions, each with its config, own settings and
the partition of every artifact it reads. Resolved once when a sweep loads, with the deployment's vector
store filled into every config that names none, so a partition key always names one content.

Assets, partition mappings, jobs, the CLI's order and the leaderboard all read the plan; nothing
re-derives it. Artifact fingerprints need the inputs' content (known when they are materialized):
`fingerprints` chains them through the plan in one pass.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from rag_core.labels import short_labels
from rag_core.local_models import model_version
from rag_core.spec import STORE_ANALYZERS, VECTOR_STORES, RagConfig, SpecError, Sweep
from rag_core.stages import CONFIG_STAGE, PARTITIONED, artifact_fingerprint, partition_key, stage


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


@dataclass(frozen=True)
class Plan:
    sweep: Sweep
    store: str  # the default vector store, for configs that name none
    configs: tuple[RagConfig, ...]  # the sweep's configs with their store resolved
    partitions: dict[str, dict[str, Partition]]  # stage -> key -> partition, in sweep order

    @classmethod
    def resolve(cls, sweep: Sweep, store: str = "lancedb", llm_api_base: str | None = None) -> Plan:
        """`store`: the vector store of configs that name none; `llm_api_base`: the deployment's LLM
        endpoint, part of the fingerprint of every partition that calls an LLM."""
        if store not in VECTOR_STORES:
            raise SpecError(f"unknown vector store {store!r}; choose one of {', '.join(VECTOR_STORES)}")
        configs = tuple(_with_store(c, store) for c in sweep.configs)
        for c in configs:
            if c.index.bm25_analyzer not in STORE_ANALYZERS[c.index.store]:
                able = [s for s, names in STORE_ANALYZERS.items() if c.index.bm25_analyzer in names]
                raise SpecError(
                    f"{sweep.path}: field 'index.bm25_analyzer': {c.index.store} cannot apply "
                    f"{c.index.bm25_analyzer!r} (it has no stemmer); stores that can: {', '.join(able)}"
                )
        partitions: dict[str, dict[str, Partition]] = {}
        version = functools.cache(model_version)  # each local model's folder is looked at once
        chains: dict[tuple[str, str], list] = {}
        for s in PARTITIONED:
            by_key: dict[str, Partition] = {}
            for c in configs:
                key = partition_key(s.name, c)
                own = s.own(c, sweep.judge_model, version, llm_api_base)
                up = chains.get((s.upstream, partition_key(s.upstream, c))) if s.upstream else []
                chain = [own, up]
                if chains.setdefault((s.name, key), chain) != chain:
                    raise SpecError(
                        f"{sweep.path}: two different settings map to the {s.name} partition key {key!r}; "
                        "rename a model so their last path components differ"
                    )
                if key not in by_key:
                    reads = {r: partition_key(r, c) if stage(r).partitioned else None for r in s.reads}
                    by_key[key] = Partition(s.name, key, c, own, reads)
            partitions[s.name] = by_key
        return cls(sweep=sweep, store=store, configs=configs, partitions=partitions)

    # ---- partitions ------------------------------------------------------------------------------

    def keys(self, stage_name: str) -> list[str]:
        return list(self.partitions[stage_name])

    def partition(self, stage_name: str, key: str) -> Partition:
        try:
            return self.partitions[stage_name][key]
        except KeyError:
            raise KeyError(f"sweep {self.sweep.name!r} has no {stage_name} partition {key!r}") from None

    def mapping(self, upstream: str, downstream: str) -> dict[str, set[str]]:
        """Upstream partition key -> the downstream partitions that read it."""
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
        """config key -> its short label (rag_core/labels.py), worked out once per plan: every evaluation
        and the leaderboard read it."""
        return short_labels(self.configs)

    @property
    def config_keys(self) -> list[str]:
        return self.keys(CONFIG_STAGE)

    @property
    def stores(self) -> list[str]:
        return list(dict.fromkeys(c.index.store for c in self.configs))

    def calls_llm(self, stage_name: str) -> bool:
        """Whether any partition of the stage calls an LLM (its asset then takes a slot of pool `llm`)."""
        s = stage(stage_name)
        return any(s.calls_llm(c, self.sweep.judge_model) for c in self.configs)

    # ---- fingerprints ----------------------------------------------------------------------------

    @property
    def board_identity(self) -> dict:
        """The leaderboard's own settings: what its fingerprint holds beside the evaluations it ranks."""
        return {"weights": self.sweep.weights, "decision": self.sweep.decision.model_dump()}

    def board_fingerprint(self, inputs: dict[str, str], fps: dict[tuple[str, str], str]) -> str:
        """The leaderboard's fingerprint once every config is evaluated on these input snapshots; `fps` is
        `fingerprints(inputs)`, which the caller has already worked out (a pass over every partition)."""
        evaluations = {k: fps[(CONFIG_STAGE, k)] for k in sorted(self.config_keys)}
        return artifact_fingerprint(
            "leaderboard", self.board_identity, {"evaluations": evaluations, "qa_set": inputs["qa_set"]}
        )

    def fingerprints(self, inputs: dict[str, str]) -> dict[tuple[str, str], str]:
        """(stage, key) -> the artifact fingerprint every partition gets from these input snapshots
        (`{'corpus': fp, 'qa_set': fp}`): what the assets compute one by one, in one pass."""
        fps: dict[tuple[str, str | None], str] = {(name, None): fp for name, fp in inputs.items()}
        for name, by_key in self.partitions.items():
            for key, p in by_key.items():
                fps[(name, key)] = artifact_fingerprint(
                    name, p.own, {r: fps[(r, k)] for r, k in p.reads.items()}
                )
        return {k: v for k, v in fps.items() if k[1] is not None}
