"""Replay the search strategies on a published full grid of RAG configs (rag_hpo_bench, Orbach et al. 2025)
and on synthetic grids with a known cost model, and count what each search pays.

    .venv/bin/python benchmarks/replay_hpo_bench.py ../shared/benchmarks/rag_hpo_bench/rag_configurations_results.csv

rag_hpo_bench: for each dataset family (AIArxiv, BioASQ, MiniWiki), each strategy tunes on the `-Dev` split
(the objective is a lookup of that split's row: no pipeline runs), keeps the config with the best Dev score,
and is scored on the `-Test` split: regret = the best Test score of the grid - the kept config's Test score.
Every one of the table's four scores is the objective in turn (`--metric` picks some).

Synthetic grids (`--synthetic N` of them, seeded): 4 chunkers x 3 embedders x 3 top-k x 3 rerankers x
4 generators (432 configs, 12 indexes); the score is a sum of per-setting effects, per-index and
top-k x generator interactions; Dev and Test add independent noise. Their stage costs differ x10-x100
(in seconds of a run: an index build ~100, an LLM stage ~10 per question set, a retrieval ~1), and in
dollars the generators differ x100.

Cost is counted as this project pays it, from the stage graph (rag_core/search/cost.py): a step already
built is free. An index build: a new (chunking, embedding) pair. LLM calls: `QUESTIONS` answers and as many
judge calls per config (rag_hpo_bench's answers are all LLM-generated); on the synthetic grids an LLM
reranker adds `QUESTIONS` calls.

Strategies: random search, Optuna TPE (`bayesian`), TPE with the reuse-aware pool (`bayesian-reuse`,
pool 4), and `cost_aware` (rag_core/search/cost_aware.py), all at the same seeds, each to `--evals`
evaluations; `cost_aware-half` is cost_aware given a budget of half random's mean index builds and half its
mean LLM calls (at the same number of evaluations at most). Printed: mean regret against cumulative index
builds and against cumulative LLM calls, and the cost each strategy needs to reach random's final regret.
About 35 minutes at the default 30 seeds on a loaded 2-core machine (Optuna's TPE is most of it).

Successive halving needs per-question scores, which the published table does not hold, so it is not
replayed here (tests/test_search.py checks it on per-question data).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_core.search import Bayesian, RandomSearch, Space  # noqa: E402
from rag_core.search.cost import Cost, CostBudget, chain_model  # noqa: E402
from rag_core.search.cost_aware import CostAware  # noqa: E402

QUESTIONS = 100  # questions per evaluation: an answer and a judge call each (ratios do not depend on it)
DIMS = ["Chunk Size", "Chunk Overlap", "Embedding Model", "Top-K", "Generative Mode"]
EXPENSIVE = ("Chunk Size", "Chunk Overlap", "Embedding Model")  # they decide the index
METRICS = ["Context Correctness", "LLMaaJ-AC", "Lexical-AC", "Lexical-FF"]
HPO_STAGES = [
    ("chunksets", ("Chunk Size", "Chunk Overlap"), Cost()),
    ("embeddings", ("Embedding Model",), Cost(index_builds=1)),
    ("retrievals", ("Top-K",), Cost()),
    ("answers", ("Generative Mode",), Cost(llm_calls=QUESTIONS)),
    ("evaluations", (), Cost(llm_calls=QUESTIONS)),  # the judge
]

SYN_DIMS = {
    "chunking": ["c0", "c1", "c2", "c3"],
    "embedding": ["e0", "e1", "e2"],
    "top_k": [3, 5, 10],
    "rerank": ["none", "cross", "llm"],
    "generator": ["g0", "g1", "g2", "g3"],
}
SYN_USD = {"g0": 0.0001, "g1": 0.001, "g2": 0.003, "g3": 0.01}  # per call: x100 between the ends
SYN_STAGES = [
    ("chunksets", ("chunking",), Cost()),
    ("embeddings", ("embedding",), Cost(index_builds=1)),
    ("retrievals", ("top_k",), Cost()),
    ("rerankings", ("rerank",), lambda c: Cost(llm_calls=QUESTIONS * (c["rerank"] == "llm"))),
    ("answers", ("generator",), lambda c: Cost(llm_calls=QUESTIONS, usd=QUESTIONS * SYN_USD[c["generator"]])),
    ("evaluations", (), Cost(llm_calls=QUESTIONS)),
]

STRATEGIES = {
    "random": lambda space, seed, budget: RandomSearch(space, seed),
    "bayesian": lambda space, seed, budget: Bayesian(space, seed),
    "bayesian-reuse": lambda space, seed, budget: Bayesian(space, seed, pool=4),
    "cost_aware": lambda space, seed, budget: CostAware(space, seed),
    "cost_aware-half": lambda space, seed, budget: CostAware(space, seed, budget=budget),
}


def load(path: Path, metric: str) -> dict[str, tuple[dict, dict, dict[str, list]]]:
    """family -> (dev lookup, test lookup, dimension values)."""
    df = pl.read_csv(path)
    if metric not in df.columns:
        raise SystemExit(f"{path}: no column {metric!r}; choose one of {df.columns[len(DIMS) + 1 :]}")
    out = {}
    for family in sorted({d.split("-")[0] for d in df["Dataset"]}):
        tables = []
        for split in ("Dev", "Test"):
            part = df.filter(pl.col("Dataset") == f"{family}-{split}")
            tables.append({tuple(r[d] for d in DIMS): r[metric] for r in part.iter_rows(named=True)})
        dims = {d: sorted(df[d].unique().to_list()) for d in DIMS}
        out[family] = (tables[0], tables[1], dims)
    return out


def synthetic(instance: int) -> tuple[dict, dict, dict[str, list]]:
    """A seeded grid: (dev lookup, test lookup, dimension values)."""
    rng = np.random.default_rng(1000 + instance)
    sd = {"chunking": 0.03, "embedding": 0.05, "top_k": 0.02, "rerank": 0.03, "generator": 0.06}
    effect = {d: dict(zip(v, rng.normal(0, sd[d], len(v)), strict=True)) for d, v in SYN_DIMS.items()}
    index = {(c, e): rng.normal(0, 0.02) for c in SYN_DIMS["chunking"] for e in SYN_DIMS["embedding"]}
    pair = {(k, g): rng.normal(0, 0.01) for k in SYN_DIMS["top_k"] for g in SYN_DIMS["generator"]}
    names = list(SYN_DIMS)
    dev, test = {}, {}
    for values in np.array(np.meshgrid(*[range(len(v)) for v in SYN_DIMS.values()])).T.reshape(-1, 5):
        c = {d: SYN_DIMS[d][i] for d, i in zip(names, values, strict=True)}
        true = 0.5 + sum(effect[d][c[d]] for d in names)
        true += index[(c["chunking"], c["embedding"])] + pair[(c["top_k"], c["generator"])]
        key = tuple(c[d] for d in names)
        dev[key], test[key] = true + rng.normal(0, 0.01), true + rng.normal(0, 0.01)
    return dev, test, {d: list(v) for d, v in SYN_DIMS.items()}


def replay(name, dev, test, dims, stages, expensive, seed, evals, budget) -> list[tuple[float, float, float]]:
    """(cumulative index builds, cumulative LLM calls, test regret of the Dev-best so far) after each
    evaluation of one seeded run."""
    space = Space({d: list(v) for d, v in dims.items()}, expensive=expensive)
    space.cost_model = chain_model(space.all(), stages, key=space.key)
    strategy = STRATEGIES[name](space, seed, budget)
    best_test, spent, out = max(test.values()), Cost(), []
    while len(out) < evals and (c := strategy.propose()) is not None:
        spent = spent + space.costs().new_cost(space.key(c))
        strategy.observe(c, dev[space.key(c)])
        out.append((spent.index_builds, spent.llm_calls, best_test - test[space.key(strategy.best())]))
    return out


def regret_at(runs: list[list[tuple]], unit: int, cap: float, worst: float) -> float:
    """Mean regret of runs stopped before they pay more than `cap` of a unit (0 builds, 1 LLM calls): the
    Dev-best of what they evaluated within it; a run that evaluated nothing within it counts `worst`."""
    out = []
    for run in runs:
        within = [r for r in run if r[unit] <= cap + 1e-9]
        out.append(within[-1][2] if within else worst)
    return float(np.mean(out))


def needed(runs: list[list[tuple]], unit: int, target: float, worst: float) -> float:
    """The least cost in a unit at which the mean regret reaches `target` (inf: never, in these runs)."""
    caps = sorted({r[unit] for run in runs for r in run})
    return next((c for c in caps if regret_at(runs, unit, c, worst) <= target + 1e-12), math.inf)


def suite(grids: list[tuple], stages, expensive, names, seeds, evals) -> dict:
    """strategy -> every (grid, seed) run; random runs first: its mean cost sets cost_aware-half's budget."""
    runs: dict[str, list] = {n: [] for n in names}
    worst = []
    for label, dev, test, dims in grids:
        worst.append(max(test.values()) - min(test.values()))
        rnd = [replay("random", dev, test, dims, stages, expensive, s, evals, None) for s in range(seeds)]
        budget = CostBudget(
            index_builds=math.floor(np.mean([r[-1][0] for r in rnd]) / 2),
            llm_calls=math.floor(np.mean([r[-1][1] for r in rnd]) / 2),
        )
        for n in names:
            got = (
                rnd
                if n == "random"
                else [replay(n, dev, test, dims, stages, expensive, s, evals, budget) for s in range(seeds)]
            )
            runs[n] += [(label, r) for r in got]
        print(f"  {label}: half of random's cost: {budget}", file=sys.stderr)
    return runs


def report(title: str, runs: dict, grids: list[tuple], evals: int) -> None:
    """Per grid, each strategy's regret curve is averaged over seeds; the curves are averaged over grids."""
    labels = [g[0] for g in grids]
    worst = {g[0]: max(g[2].values()) - min(g[2].values()) for g in grids}

    def per_grid(name, f):
        return float(
            np.mean([f([r for lab, r in runs[name] if lab == label], worst[label]) for label in labels])
        )

    print(
        f"\n## {title}: {len(labels)} grids, {len(runs['random']) // len(labels)} seeds each, up to {evals} evaluations"
    )
    final = {
        n: (
            per_grid(n, lambda rs, w: np.mean([r[-1][2] for r in rs])),
            per_grid(n, lambda rs, w: np.mean([r[-1][0] for r in rs])),
            per_grid(n, lambda rs, w: np.mean([r[-1][1] for r in rs])),
        )
        for n in runs
    }
    builds_axis = [1, 2, 3, 4, 6, 8, 10, 12]
    per_eval = 2 * QUESTIONS
    calls_axis = [per_eval * k for k in (2, 4, 6, 8, 10, 15, 20)]
    print("mean test regret against cumulative index builds:")
    print(f"  {'strategy':16}" + "".join(f"{b:>8}" for b in builds_axis))
    for n in runs:
        row = [per_grid(n, lambda rs, w, b=b: regret_at(rs, 0, b, w)) for b in builds_axis]
        print(f"  {n:16}" + "".join(f"{v:8.4f}" for v in row))
    print("mean test regret against cumulative LLM calls:")
    print(f"  {'strategy':16}" + "".join(f"{c:>8}" for c in calls_axis))
    for n in runs:
        row = [per_grid(n, lambda rs, w, c=c: regret_at(rs, 1, c, w)) for c in calls_axis]
        print(f"  {n:16}" + "".join(f"{v:8.4f}" for v in row))
    r_regret, r_builds, r_calls = final["random"]
    print(
        f"random's final regret {r_regret:.4f} at {r_builds:.2f} index builds and {r_calls:.0f} LLM calls; "
        "to reach it (per grid: the least cost at which the mean over seeds reaches random's final mean):"
    )
    for n in runs:
        regret, builds, calls = final[n]
        b = [
            needed([r for lab, r in runs[n] if lab == g], 0, _final(runs["random"], g), worst[g])
            for g in labels
        ]
        c = [
            needed([r for lab, r in runs[n] if lab == g], 1, _final(runs["random"], g), worst[g])
            for g in labels
        ]
        rb = [np.mean([r[-1][0] for lab, r in runs["random"] if lab == g]) for g in labels]
        rc = [np.mean([r[-1][1] for lab, r in runs["random"] if lab == g]) for g in labels]
        ok = [i for i in range(len(labels)) if math.isfinite(b[i]) and math.isfinite(c[i])]
        reached = len(ok)
        ratio_b = np.mean([b[i] / rb[i] for i in ok]) if ok else math.inf
        ratio_c = np.mean([c[i] / rc[i] for i in ok]) if ok else math.inf
        print(
            f"  {n:16} final regret {regret:.4f} (x{regret / max(r_regret, 1e-12):.2f}), builds {builds:.2f} "
            f"(x{builds / r_builds:.2f}), LLM calls {calls:.0f} (x{calls / r_calls:.2f}); reaches random's "
            f"final regret on {reached}/{len(labels)} grids, there with x{ratio_b:.2f} of its builds and "
            f"x{ratio_c:.2f} of its LLM calls (mean over those grids)"
        )
    h_regret, h_builds, h_calls = final["cost_aware-half"]
    sem = {
        n: float(np.std([r[-1][2] for _, r in runs[n]]) / math.sqrt(len(runs[n])))
        for n in ("random", "cost_aware-half")
    }
    print(
        f"standard errors of the final regrets: random {sem['random']:.4f}, cost_aware-half {sem['cost_aware-half']:.4f}"
    )
    met = h_regret <= r_regret and h_builds <= r_builds / 2 and h_calls <= r_calls / 2
    print(
        f"goal (at random's final regret, <= 1/2 its builds and <= 1/2 its LLM calls): cost_aware-half "
        f"regret {h_regret:.4f} vs {r_regret:.4f}, builds x{h_builds / r_builds:.2f}, LLM calls "
        f"x{h_calls / r_calls:.2f}: {'met' if met else 'NOT met'}"
    )


def _final(runs: list, label: str) -> float:
    return float(np.mean([r[-1][2] for lab, r in runs if lab == label]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("csv", type=Path, help="rag_configurations_results.csv of rag_hpo_bench")
    parser.add_argument("--metric", action="append", help=f"objective column(s) (default: all of {METRICS})")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--evals", type=int, default=20, help="evaluations per run (random's budget)")
    parser.add_argument("--synthetic", type=int, default=5, help="synthetic grids (0: none)")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    args = parser.parse_args()
    names = ["random", *[n for n in args.strategies if n != "random"]]
    if "cost_aware-half" not in names:
        names.append("cost_aware-half")
    t0 = time.perf_counter()
    grids = [
        (f"{metric}/{family}", dev, test, dims)
        for metric in args.metric or METRICS
        for family, (dev, test, dims) in load(args.csv, metric).items()
    ]
    print("rag_hpo_bench", file=sys.stderr)
    runs = suite(grids, HPO_STAGES, EXPENSIVE, names, args.seeds, args.evals)
    report("rag_hpo_bench (162 configs, 18 indexes)", runs, grids, args.evals)
    if args.synthetic:
        print("synthetic", file=sys.stderr)
        syn = [(f"synthetic-{i}", *synthetic(i)) for i in range(args.synthetic)]
        runs = suite(syn, SYN_STAGES, ("chunking", "embedding"), names, args.seeds, args.evals)
        report("synthetic grids (432 configs, 12 indexes, stage costs x10-x100)", runs, syn, args.evals)
    print(f"\n{time.perf_counter() - t0:.0f} s (measured on a loaded 2-core machine)")


if __name__ == "__main__":
    main()
