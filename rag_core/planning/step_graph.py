"""Which steps of a sweep may run now, when several run at once.

A step (stage, partition key) waits for the steps that write what it reads; a step whose inputs are
already complete (not in the graph) waits for nothing. A stage may cap how many of its steps run at once
(embedding uses every core by itself, and two embeddings at once could embed a text they share twice), and
a stage may have to run alone: one that times its queries would otherwise report the latency of a machine
busy with other steps. Pure bookkeeping: the caller starts the steps it is handed and reports each one finished.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

Step = tuple[str, str | None]


class StepGraph:
    def __init__(
        self,
        steps: Iterable[Step],
        reads: Callable[[Step], Iterable[Step]],
        limits: Mapping[str, int] | None = None,
        alone: Iterable[str] = (),
    ):
        """`steps` in a dependency order (the order a single worker runs them in); `reads(step)`: the steps
        whose artifacts it reads, in the graph or not; `limits`: stage -> most of its steps at once;
        `alone`: stages whose steps run with no other step running."""
        self.order = list(steps)
        todo = set(self.order)
        self.waits = {s: {u for u in reads(s) if u in todo} for s in self.order}
        self.limits = dict(limits or {})
        self.alone = set(alone)
        self.running: set[Step] = set()
        self.done: set[Step] = set()

    def ready(self) -> list[Step]:
        """Steps that may start now, in the graph's order."""
        out: list[Step] = []
        busy = Counter(stage for stage, _ in self.running)
        for step in self.order:
            if any(stage in self.alone for stage, _ in [*self.running, *out]):
                break
            if step in self.running or step in self.done or not self.waits[step] <= self.done:
                continue
            if busy[step[0]] >= self.limits.get(step[0], len(self.order)):
                continue
            if step[0] in self.alone and (self.running or out):
                break  # nothing more starts: the running steps end, then it runs alone
            busy[step[0]] += 1
            out.append(step)
        return out

    def start(self, step: Step) -> None:
        self.running.add(step)

    def finish(self, step: Step) -> None:
        self.running.discard(step)
        self.done.add(step)

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.order)

    def width(self) -> int:
        """About the most steps that can run at once: steps grouped by their depth (the longest chain of
        waits above them), the largest group, each stage in it counted up to its limit."""
        depth: dict[Step, int] = {}
        for step in self.order:  # a dependency order: every wait has its depth already
            depth[step] = 1 + max((depth[u] for u in self.waits[step]), default=-1)
        layers = Counter((d, step[0]) for step, d in depth.items())
        width = Counter[int]()
        for (d, stage), n in layers.items():
            width[d] += 1 if stage in self.alone else min(n, self.limits.get(stage, n))
        return max(width.values(), default=0)
