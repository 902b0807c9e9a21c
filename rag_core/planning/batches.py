"""Steps grouped into batches: one Dagster run materializes many partitions of a stage.

A run costs bookkeeping whatever it computes (a run worker, events, a sensor tick on a deployment), so a
sweep runs a stage's partitions together: every step of a stage that is due in one run (or a few, `size`
at most each), the stages in the registry's order, which is a dependency order. A batch is a range of the
stage's partitions (Dagster's partition key range) that names the keys it wants when it wants only some.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rag_core.decision.holdout import is_holdout_key
from rag_core.planning.stages import STAGES

Step = tuple[str, str | None]
# (stage, partition keys in the stage's order; () for an unpartitioned stage)
Batch = tuple[str, tuple[str, ...]]

_ORDER = {s.name: i for i, s in enumerate(STAGES)}


def batches(
    steps: Iterable[Step], order: Callable[[str], Sequence[str]], size: int, parts: int = 1
) -> list[Batch]:
    """The steps as batches: a stage's keys together, in `order(stage)` (its partitions definition's
    order), split into `parts` about equal batches (a fleet's workers each take one) of `size` at most;
    stages in the registry's order (others, such as the champion, where they first appear after those)."""
    if size < 1:
        raise ValueError(f"a batch holds at least one partition, not {size}")
    # a stage's selection keys and its holdout keys are two assets' partitions: never one batch
    keys: dict[tuple[str, bool], list[str]] = {}
    for stage, key in steps:
        group = keys.setdefault((stage, is_holdout_key(key)), [])
        if key is not None and key not in group:
            group.append(key)
    out: list[Batch] = []
    first = {group: i for i, group in enumerate(keys)}
    for group in sorted(keys, key=lambda g: (_ORDER.get(g[0], len(_ORDER)), g[1], first[g])):
        stage = group[0]
        if not keys[group]:
            out.append((stage, ()))
            continue
        index = {k: i for i, k in enumerate(order(stage))}
        ranked = sorted(keys[group], key=lambda k: index.get(k, len(index)))
        step = min(size, -(-len(ranked) // max(1, parts)))
        out.extend((stage, tuple(ranked[i : i + step])) for i in range(0, len(ranked), step))
    return out


def batch_reads(
    units: list[Batch], reads: Callable[[Step], Iterable[Step]]
) -> Callable[[Batch], list[Batch]]:
    """`reads` for batches: the batches holding a step that one of the batch's steps reads."""
    owner: dict[Step, Batch] = {}
    for unit in units:
        stage, keys = unit
        for key in keys or (None,):
            owner[(stage, key)] = unit

    def of(unit: Batch) -> list[Batch]:
        stage, keys = unit
        found = {owner[s] for key in keys or (None,) for s in reads((stage, key)) if s in owner}
        found.discard(unit)
        return sorted(found, key=units.index)

    return of


def steps_in(unit: Batch) -> int:
    return max(1, len(unit[1]))
