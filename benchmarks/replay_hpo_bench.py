"""Replay the search strategies on a published full grid of RAG configs (rag_hpo_bench, Orbach et al. 2025).

    .venv/bin/python benchmarks/replay_hpo_bench.py ../shared/benchmarks/rag_hpo_bench/rag_configurations_results.csv

For each dataset family (AIArxiv, BioASQ, MiniWiki), each strategy tunes on the `-Dev` split (the
objective is a lookup of that split's row: no pipeline runs), keeps the config with the best Dev score, and
is scored on the `-Test` split: regret = the best Test score of the grid − the kept config's Test score.
Cost is counted as this project pays it: index builds (a new chunk size, overlap or embedding model) and
evaluations. Strategies: random search, Optuna TPE (`bayesian`), TPE with the reuse-aware pool
(`bayesian-reuse`: pool 4, `bayesian-reuse-8`: pool 8), and the full grid (162 evaluations, 18 index
builds). Every one of the table's four scores is the objective in turn (`--metric` picks some). Each seed runs to the
largest budget once; the best-so-far at each smaller budget is the same run stopped earlier.

Successive halving needs per-question scores, which the published table does not hold, so it is not
replayed here (tests/test_search.py checks it on per-question data).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_core.search import Bayesian, RandomSearch, Space  # noqa: E402

DIMS = ["Chunk Size", "Chunk Overlap", "Embedding Model", "Top-K", "Generative Mode"]
EXPENSIVE = ("Chunk Size", "Chunk Overlap", "Embedding Model")  # they decide the index

STRATEGIES = {
    "random": lambda space, seed: RandomSearch(space, seed),
    "bayesian": lambda space, seed: Bayesian(space, seed),
    "bayesian-reuse": lambda space, seed: Bayesian(space, seed, pool=4),
    "bayesian-reuse-8": lambda space, seed: Bayesian(space, seed, pool=8),
}
METRICS = ["Context Correctness", "LLMaaJ-AC", "Lexical-AC", "Lexical-FF"]


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


def replay(name: str, dev: dict, test: dict, dims: dict, seed: int, budgets: list[int]) -> list[tuple]:
    """(budget, test regret, index builds) at each budget of one seeded run."""
    space = Space({d: list(v) for d, v in dims.items()}, expensive=EXPENSIVE)
    strategy = STRATEGIES[name](space, seed)
    best_test = max(test.values())
    out, done = [], 0
    for budget in budgets:
        while done < budget and (c := strategy.propose()) is not None:
            strategy.observe(c, dev[space.key(c)])
            done += 1
        kept = space.key(strategy.best())
        out.append((budget, best_test - test[kept], len(space.built)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("csv", type=Path, help="rag_configurations_results.csv of rag_hpo_bench")
    parser.add_argument("--metric", action="append", help=f"objective column(s) (default: all of {METRICS})")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--budgets", type=int, nargs="+", default=[10, 20, 30])
    parser.add_argument("--per-family", action="store_true", help="also print each family's table")
    args = parser.parse_args()
    rows = []
    t0 = time.perf_counter()
    for metric in args.metric or METRICS:
        for family, (dev, test, dims) in load(args.csv, metric).items():
            grid_pick = max(dev, key=dev.get)
            rows.append(
                {
                    "metric": metric,
                    "family": family,
                    "strategy": "grid (all 162)",
                    "budget": len(dev),
                    "seed": 0,
                    "regret": max(test.values()) - test[grid_pick],
                    "index_builds": 18,
                }
            )
            for name in STRATEGIES:
                for seed in range(args.seeds):
                    for budget, regret, builds in replay(name, dev, test, dims, seed, args.budgets):
                        rows.append(
                            {
                                "metric": metric,
                                "family": family,
                                "strategy": name,
                                "budget": budget,
                                "seed": seed,
                                "regret": regret,
                                "index_builds": builds,
                            }
                        )
            print(f"{metric} / {family}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    runs = pl.DataFrame(rows)
    summary = (
        runs.group_by("metric", "strategy", "budget")
        .agg(
            pl.col("regret").mean().alias("mean_test_regret"),
            (pl.col("regret").std() / pl.len().sqrt()).alias("sem"),
            pl.col("index_builds").mean().alias("mean_index_builds"),
        )
        .sort("metric", "budget", "strategy")
    )
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_fmt_str_lengths(40)
    print(
        f"\nTest regret of the config kept after tuning on Dev, {args.seeds} seeds x 3 families "
        "(grid: the Dev-best of all 162, one run per family):\n"
    )
    print(summary)
    if args.per_family:
        print(
            runs.group_by("metric", "family", "strategy", "budget")
            .agg(pl.col("regret").mean(), pl.col("index_builds").mean())
            .sort("metric", "family", "budget", "strategy")
        )
    at = {(r["metric"], r["strategy"], r["budget"]): r for r in summary.iter_rows(named=True)}
    print("\nAgainst random search at the same budget (ratio < 1: better / cheaper):")
    for metric in args.metric or METRICS:
        grid = at[(metric, "grid (all 162)", 162)]["mean_test_regret"]
        for budget in args.budgets:
            rnd = at[(metric, "random", budget)]
            for name in [n for n in STRATEGIES if n != "random"]:
                s = at[(metric, name, budget)]
                print(
                    f"{metric:20} budget {budget}: {name:17} regret {s['mean_test_regret']:.4f} vs "
                    f"{rnd['mean_test_regret']:.4f} (x{s['mean_test_regret'] / max(rnd['mean_test_regret'], 1e-12):.2f}),"
                    f" index builds {s['mean_index_builds']:.1f} vs {rnd['mean_index_builds']:.1f} "
                    f"(x{s['mean_index_builds'] / rnd['mean_index_builds']:.2f}); full grid regret {grid:.4f}"
                )


if __name__ == "__main__":
    main()
