"""The order several workers run a sweep's steps in (rag_core/planning/step_graph.py): a step starts only once the
steps it reads are done, stage limits and stages that run alone hold, and every step runs exactly once."""

from __future__ import annotations

import random

from rag_core.planning.step_graph import StepGraph

# two chunksets -> two embeddings -> two indexes -> four retrievals -> four evaluations -> leaderboard
READS = {
    ("chunksets", "a"): [],
    ("chunksets", "b"): [],
    ("embeddings", "a"): [("chunksets", "a")],
    ("embeddings", "b"): [("chunksets", "b")],
    ("indexes", "a"): [("embeddings", "a"), ("chunksets", "a")],
    ("indexes", "b"): [("embeddings", "b"), ("chunksets", "b")],
    **{("retrievals", f"{i}{k}"): [("indexes", i)] for i in "ab" for k in "12"},
    **{("evaluations", f"{i}{k}"): [("retrievals", f"{i}{k}")] for i in "ab" for k in "12"},
}
READS[("leaderboard", None)] = [s for s in READS if s[0] == "evaluations"]
ORDER = list(READS)


def drain(graph: StepGraph, workers: int, seed: int = 0) -> list[set]:
    """Run the graph with `workers` slots, finishing a random running step each turn; returns what ran
    together at each turn."""
    rng, together = random.Random(seed), []
    while not graph.finished:
        for step in graph.ready()[: workers - len(graph.running)]:
            graph.start(step)
        assert graph.running, "nothing runs, yet steps are left"
        together.append(set(graph.running))
        graph.finish(rng.choice(sorted(graph.running, key=str)))
    return together


def test_every_step_runs_once_after_what_it_reads():
    for seed in range(20):
        graph = StepGraph(ORDER, READS.__getitem__)
        finished: list = []
        rng = random.Random(seed)
        while not graph.finished:
            for step in graph.ready()[:3]:
                assert all(u in finished for u in READS[step]), step
                graph.start(step)
            step = rng.choice(sorted(graph.running, key=str))
            graph.finish(step)
            finished.append(step)
        assert sorted(finished, key=str) == sorted(ORDER, key=str)


def test_steps_whose_inputs_are_complete_wait_for_nothing():
    rest = [s for s in ORDER if s[0] in ("retrievals", "evaluations")]  # indexes already complete
    graph = StepGraph(rest, READS.__getitem__)
    assert graph.ready() == [s for s in rest if s[0] == "retrievals"]


def test_a_stage_limit_holds_and_independent_steps_run_together():
    graph = StepGraph(ORDER, READS.__getitem__, limits={"embeddings": 1})
    together = drain(graph, workers=4)
    assert max(sum(s[0] == "embeddings" for s in turn) for turn in together) == 1
    assert max(len(turn) for turn in together) >= 2


def test_a_stage_that_runs_alone_never_shares_the_machine():
    graph = StepGraph(ORDER, READS.__getitem__, alone=["retrievals"])
    together = drain(graph, workers=4, seed=3)
    for turn in together:
        if any(s[0] == "retrievals" for s in turn):
            assert len(turn) == 1, turn
    assert any(len(turn) > 1 for turn in together)  # the other stages still overlap


def test_width_counts_what_could_run_at_once():
    assert StepGraph(ORDER, READS.__getitem__).width() == 4  # the four retrievals (or evaluations)
    assert StepGraph(ORDER, READS.__getitem__, alone=["retrievals", "evaluations"]).width() == 2
    chain = [("chunksets", "a"), ("embeddings", "a"), ("indexes", "a")]
    assert StepGraph(chain, READS.__getitem__).width() == 1
    assert StepGraph([], READS.__getitem__).width() == 0
