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
mean LLM calls on that grid in this run (at the same number of evaluations at most).

Printed, per suite (rag_hpo_bench's 12 grids; the synthetic grids): mean regret against cumulative index
builds and against cumulative LLM calls; each strategy's final regret against random's, paired by seed;
then cost_aware-half on every grid and pooled over the grids: its final regret - random's final regret
(the same seed), its final regret - random's regret when random is stopped at the builds and LLM calls
cost_aware-half spent (a matched budget), the ratios of its mean builds and LLM calls to random's, and the
Test regret of the grid's Dev-best config (every config evaluated: what a search that finds the Dev
optimum keeps; where it is above random's regret, a better search on Dev is a worse one on Test).

Intervals: 95% percentile bootstrap over seeds (the seeds resampled within each grid, 10,000 resamples,
fixed seed); a pooled figure is the mean over grids of the per-grid means, so every grid weighs the same.

The goal, judged per suite on the pooled figures: cost_aware-half pays at most half of random's builds
and LLM calls (the ratios of the means; the budget makes this hold by construction, the interval shows how
much random's own mean varies) AND its regret is not worse than random's: the upper end of the interval of
(cost_aware-half's final regret - random's final regret) is at most the tolerance (`--tolerance`, 0.005:
half a point of the score). The goal line says "met" only then, and says too whether the upper end is at
most 0. Per grid: better (upper end < 0), not worse (upper end <= tolerance), worse by less than the
tolerance (lower end > 0, upper end <= tolerance), WORSE (lower end > 0, upper end > tolerance),
undecided (neither end decides). About 35 minutes at the default 30 seeds on a loaded 2-core machine
(Optuna's TPE is most of it; `--strategies random cost_aware-half` alone: about a minute).

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
# regret (in points of the score) by which cost_aware-half may trail random and still count as not worse:
# half a point, a sixth of random's regret on rag_hpo_bench
TOLERANCE = 0.005
LEVEL = 0.95
BOOTSTRAP = 10_000  # resamples of the seeds (within each grid), fixed seed
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


def final(run: list[tuple]) -> tuple[float, float, float]:
    """(index builds, LLM calls, regret) at the end of a run."""
    return run[-1]


def regret_within(run: list[tuple], builds: float, calls: float, worst: float) -> float:
    """Regret of a run stopped before it pays more than `builds` index builds or `calls` LLM calls: the
    Dev-best of what it evaluated within both; `worst` when it evaluated nothing within them."""
    within = [r for r in run if r[0] <= builds + 1e-9 and r[1] <= calls + 1e-9]
    return within[-1][2] if within else worst


def paired(a: list[list[tuple]], b: list[list[tuple]], worst: float) -> dict[str, np.ndarray]:
    """Per seed (a's run s against b's run s, one grid): a's final regret and costs, b's final ones, and
    b's regret stopped where a's run ended (the same spent builds and LLM calls: a matched budget)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} runs against {len(b)}: pair them by seed")
    fa = np.array([final(r) for r in a], dtype=float)
    fb = np.array([final(r) for r in b], dtype=float)
    matched = np.array([regret_within(rb, x[0], x[1], worst) for rb, x in zip(b, fa, strict=True)])
    return {
        "regret": fa[:, 2],
        "builds": fa[:, 0],
        "calls": fa[:, 1],
        "base_regret": fb[:, 2],
        "base_builds": fb[:, 0],
        "base_calls": fb[:, 1],
        "base_matched": matched,
    }


def bootstrap(
    groups: list[np.ndarray], stat, resamples: int = BOOTSTRAP, seed: int = 0, level: float = LEVEL
):
    """(estimate, low, high) of `stat` of the column means pooled over groups (the mean of each group's
    column means): a percentile interval from resampling the rows (seeds) within each group (grid)."""
    rng = np.random.default_rng(seed)
    point = np.mean([g.mean(axis=0) for g in groups], axis=0)
    pooled = np.zeros((resamples, groups[0].shape[1]))
    for g in groups:
        pooled += g[rng.integers(0, len(g), (resamples, len(g)))].mean(axis=1)
    values = stat(pooled / len(groups))
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(stat(point[None, :])[0]), float(lo), float(hi)


COLUMNS = ["regret", "builds", "calls", "base_regret", "base_builds", "base_calls", "base_matched"]
STATS = {
    "final": lambda m: m[:, 0] - m[:, 3],  # a's final regret - b's final regret
    "matched": lambda m: m[:, 0] - m[:, 6],  # a's final regret - b's regret at a's spent cost
    "builds": lambda m: m[:, 1] / np.maximum(m[:, 4], 1e-12),  # ratio of the mean costs
    "calls": lambda m: m[:, 2] / np.maximum(m[:, 5], 1e-12),
}


def compare(pairs: list[dict[str, np.ndarray]], **kw) -> dict[str, tuple[float, float, float]]:
    """Over one grid's pairs (a list of one) or several grids pooled: the mean regret difference against b's
    final regret and against b at a matched budget, and the ratios of the mean costs, each with its interval;
    also the mean regrets themselves."""
    groups = [np.column_stack([p[c] for c in COLUMNS]) for p in pairs]
    out = {name: bootstrap(groups, f, **kw) for name, f in STATS.items()}
    means = np.mean([g.mean(axis=0) for g in groups], axis=0)
    out["means"] = dict(zip(COLUMNS, map(float, means), strict=True))
    return out


def status(diff: tuple[float, float, float], tolerance: float = TOLERANCE) -> str:
    """What an interval of (a's regret - b's regret) shows, against the tolerance."""
    _, lo, hi = diff
    if hi < 0:
        return "better"
    if hi <= tolerance:
        return "worse by < tol" if lo > 0 else "not worse"
    return "WORSE" if lo > 0 else "undecided"


def verdict(c: dict, tolerance: float = TOLERANCE) -> str:
    """The goal on a comparison (`compare`): at most half of b's builds and LLM calls (the ratios of the
    means) and a regret not worse than b's final one (the interval's upper end at most `tolerance`)."""
    if c["builds"][0] > 0.5 + 1e-9 or c["calls"][0] > 0.5 + 1e-9:
        return "NOT met (costs more than half)"
    _, lo, hi = c["final"]
    if hi <= tolerance:
        return "met" + (
            " (upper end <= 0)" if hi <= 0 else f" (within the tolerance; upper end {hi:+.4f} > 0)"
        )
    return "NOT met (" + ("worse" if lo > 0 else "not shown: the interval reaches past the tolerance") + ")"


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


def _grid_runs(runs: list, label: str) -> list[list[tuple]]:
    return [r for lab, r in runs if lab == label]


def _iv(t: tuple[float, float, float], signed: bool = True) -> str:
    f = "+.4f" if signed else ".2f"
    return f"{t[0]:{f}} [{t[1]:{f}}, {t[2]:{f}}]"


def report(title: str, runs: dict, grids: list[tuple], evals: int, tolerance: float) -> dict:
    """Regret curves (mean over seeds, then over grids), then each strategy against random paired by seed,
    and cost_aware-half against random on every grid and pooled over the grids, with its goal line."""
    labels = [g[0] for g in grids]
    worst = {g[0]: max(g[2].values()) - min(g[2].values()) for g in grids}

    def per_grid(name, f):
        return float(np.mean([f(_grid_runs(runs[name], label), worst[label]) for label in labels]))

    seeds = len(runs["random"]) // len(labels)
    print(f"\n## {title}: {len(labels)} grids, {seeds} seeds each, up to {evals} evaluations")
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

    def pairs(name):
        return [paired(_grid_runs(runs[name], g), _grid_runs(runs["random"], g), worst[g]) for g in labels]

    base = compare(pairs("random"))["means"]
    print(
        f"final regrets, paired by seed with random's (random: {base['regret']:.4f} at {base['builds']:.2f} "
        f"index builds and {base['calls']:.0f} LLM calls); differences and cost ratios with {LEVEL:.0%} "
        f"intervals (bootstrap over seeds within each grid, {BOOTSTRAP:,} resamples), pooled over the grids:"
    )
    for n in runs:
        if n == "random":
            continue
        c = compare(pairs(n))
        print(
            f"  {n:16} regret {c['means']['regret']:.4f}, - random {_iv(c['final'])}; builds "
            f"x{_iv(c['builds'], False)}, LLM calls x{_iv(c['calls'], False)}"
        )
    print(
        "cost_aware-half on every grid: mean final regrets (random, cost_aware-half, the grid's Dev-best); "
        "cost_aware-half - random (paired by seed); cost_aware-half - random stopped at the builds and LLM "
        "calls cost_aware-half spent (matched budget); ratios of the mean builds and LLM calls:"
    )
    half = pairs("cost_aware-half")
    floor = {g[0]: dev_best_regret(g[1], g[2]) for g in grids}
    statuses = {}

    def line(name, c, dev_best):
        m = c["means"]
        return (
            f"  {name:30} {m['base_regret']:.4f} {m['regret']:.4f} {dev_best:.4f} | {_iv(c['final'])} "
            f"{status(c['final'], tolerance):14} | matched {_iv(c['matched'])} | builds "
            f"x{_iv(c['builds'], False)}, calls x{_iv(c['calls'], False)}"
        )

    for label, p in zip(labels, half, strict=True):
        c = compare([p])
        statuses[label] = status(c["final"], tolerance)
        print(line(label, c, floor[label]))
    pooled = compare(half)
    print(line("pooled", pooled, float(np.mean(list(floor.values())))))
    counts = ", ".join(
        f"{k} {list(statuses.values()).count(k)}"
        for k in ("better", "not worse", "worse by < tol", "undecided", "WORSE")
    )
    print(f"  grids ({len(labels)}): {counts}")
    goal = verdict(pooled, tolerance)
    print(
        f"goal (<= 1/2 random's builds and LLM calls, and the upper end of the {LEVEL:.0%} interval of "
        f"cost_aware-half's regret - random's <= {tolerance}, pooled over the grids): builds "
        f"x{pooled['builds'][0]:.2f}, LLM calls x{pooled['calls'][0]:.2f}, regret difference "
        f"{_iv(pooled['final'])}: {goal}"
    )
    return {"pooled": pooled, "statuses": statuses, "goal": goal}


def dev_best_regret(dev: dict, test: dict) -> float:
    """Test regret of the config with the best Dev score of the whole grid (ties as `Strategy.best`)."""
    key = max(dev, key=lambda k: (dev[k], tuple(map(str, k))))
    return max(test.values()) - test[key]


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
    parser.add_argument(
        "--tolerance", type=float, default=TOLERANCE, help="regret by which cost_aware-half may trail random"
    )
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
    goals = {
        "rag_hpo_bench": report(
            "rag_hpo_bench (162 configs, 18 indexes)", runs, grids, args.evals, args.tolerance
        )
    }
    if args.synthetic:
        print("synthetic", file=sys.stderr)
        syn = [(f"synthetic-{i}", *synthetic(i)) for i in range(args.synthetic)]
        runs = suite(syn, SYN_STAGES, ("chunking", "embedding"), names, args.seeds, args.evals)
        title = "synthetic grids (432 configs, 12 indexes, stage costs x10-x100)"
        goals["synthetic"] = report(title, runs, syn, args.evals, args.tolerance)
    met = all(g["goal"].startswith("met") for g in goals.values())
    worse = [
        label for g in goals.values() for label, st in g["statuses"].items() if st.lower().startswith("worse")
    ]
    grids_n = sum(len(g["statuses"]) for g in goals.values())
    print(
        f"\ngoal, every suite: {'met' if met else 'NOT met'} ("
        + "; ".join(f"{k}: {g['goal']}" for k, g in goals.items())
        + f"); cost_aware-half's interval lies above 0 on {len(worse)} of {grids_n} grids"
        + (f": {', '.join(worse)}" if worse else "")
    )
    print(f"\n{time.perf_counter() - t0:.0f} s (measured on a loaded 2-core machine)")


if __name__ == "__main__":
    main()
