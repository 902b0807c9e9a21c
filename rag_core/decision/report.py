"""The ship report of a sweep: the recommendation and why, the top tier, Pareto plots, what each setting
did to quality, questions the recommended config misses that another answers, cost and latency per stage.
One self-contained HTML file (plots inlined) and the same content as Markdown (pure: frames in, text out).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np
import polars as pl

from rag_core.decision.ann_report import ann_sections
from rag_core.decision.config_names import in_labels, label_map, reason
from rag_core.decision.holdout import holdout_share
from rag_core.decision.qualification import qualified
from rag_core.decision.work import describe_work, work_per_question
from rag_core.metrics import undefined_reasons

STAGE_TIMES = ["query_transform", "retrieval", "rerank", "context", "generation"]
STAGE_COSTS = ["query_transform", "hops", "rerank", "context", "generation", "judge"]


def query_scores(per_query: pl.DataFrame, weights: dict[str, float]) -> pl.Series:
    """Each question's overall score: the weighted mean of the metrics defined for it."""
    m = per_query.select(list(weights)).fill_null(float("nan")).to_numpy().astype(float)
    w = np.array(list(weights.values()), dtype=float)
    present = ~np.isnan(m)
    total = (present * w).sum(axis=1)
    scores = np.divide(np.where(present, m, 0.0) @ w, total, out=np.full(len(m), np.nan), where=total > 0)
    return pl.Series("score", scores)


def _score_note(weights: dict[str, float], undefined: list[str]) -> str:
    note = "The weighted mean of " + ", ".join(f"{m} (weight {w:g})" for m, w in weights.items()) + "."
    if undefined:
        note += (
            f" Undefined for every config, so left out: {', '.join(undefined)} (no question has what they "
            f"need: {undefined_reasons(undefined)})."
        )
    return note


def missed_questions(
    per_query: dict[str, pl.DataFrame],
    qa: pl.DataFrame,
    weights: dict[str, float],
    recommended: str,
    limit: int = 10,
) -> pl.DataFrame:
    """Questions the recommended config scores below 0.5 on and another config at least 0.25 higher and
    0.5 or more, largest gap first: what switching would win, question by question."""
    mine = per_query[recommended].sort("query_id")
    base = mine.select("query_id", "answer").with_columns(query_scores(mine, weights).alias("score"))
    best = None
    for key, frame in per_query.items():
        if key == recommended:
            continue
        frame = frame.sort("query_id")
        other = frame.select(
            "query_id",
            pl.lit(key).alias("other_config"),
            pl.col("answer").alias("other_answer"),
            query_scores(frame, weights).alias("other_score"),
        )
        best = other if best is None else pl.concat([best, other])
    if best is None:
        return pl.DataFrame()
    best = best.sort("other_score", descending=True, nulls_last=True).unique("query_id", keep="first")
    out = (
        base.join(best, on="query_id")
        .filter(
            (pl.col("score") < 0.5)
            & (pl.col("other_score") >= 0.5)
            & (pl.col("other_score") - pl.col("score") >= 0.25)
        )
        .join(qa.select("query_id", "question", "answers"), on="query_id", how="left")
        .with_columns((pl.col("other_score") - pl.col("score")).alias("gap"))
        .sort(["gap", "query_id"], descending=[True, False])
    )
    return out.select(
        "query_id", "question", "answers", "answer", "score", "other_config", "other_answer", "other_score"
    ).head(limit)


def effects(board: pl.DataFrame) -> pl.DataFrame:
    """For every setting the sweep varies (a `stage.field` column with more than one value): the mean and
    best overall score of the configs with each value, i.e. its effect marginal over the other settings."""
    rows = []
    ok = qualified(board)
    for col in [c for c in ok.columns if "." in c]:
        values = ok[col].cast(pl.String).fill_null("—")
        if values.n_unique() < 2:
            continue
        grouped = (
            ok.with_columns(values.alias("_v"))
            .group_by("_v")
            .agg(
                pl.len().alias("configs"),
                pl.col("overall_score").mean().alias("mean_score"),
                pl.col("overall_score").max().alias("best_score"),
            )
            .sort("mean_score", descending=True)
        )
        for r in grouped.iter_rows(named=True):
            rows.append(
                {
                    "setting": col,
                    "value": r["_v"],
                    **{k: r[k] for k in ("configs", "mean_score", "best_score")},
                }
            )
    schema = {
        "setting": pl.String,
        "value": pl.String,
        "configs": pl.UInt32,
        "mean_score": pl.Float64,
        "best_score": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def stage_table(row: dict) -> pl.DataFrame:
    """p50/p95 latency, tokens and cost of each stage of one config (from its evaluation summary)."""
    rows = []
    for stage in dict.fromkeys(STAGE_TIMES + STAGE_COSTS):
        rows.append(
            {
                "stage": stage,
                "p50_ms": row.get(f"{stage}_p50_ms"),
                "p95_ms": row.get(f"{stage}_p95_ms"),
                "tokens": row.get(f"tokens_{stage}"),
                "cost_usd": row.get(f"cost_usd_{stage}"),
            }
        )
    frame = pl.DataFrame(
        rows,
        schema={
            "stage": pl.String,
            "p50_ms": pl.Float64,
            "p95_ms": pl.Float64,
            "tokens": pl.Float64,
            "cost_usd": pl.Float64,
        },
    )
    return frame.filter(
        pl.any_horizontal(pl.exclude("stage").fill_null(0) != 0) | pl.col("stage").is_in(["retrieval"])
    )


def pareto_plot_png(board: pl.DataFrame, x: str, xlabel: str, front: str) -> bytes:
    """Overall score (with its 95% interval) against a cost axis; the CI-aware front joined by a line,
    the recommended config starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = qualified(board)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=90)
    xs, ys = ok[x].to_numpy(), ok["overall_score"].to_numpy()
    # no bar where no interval is given (too few questions, no spread: overall_ci_withheld)
    low = ok["overall_ci_low"].fill_null(ok["overall_score"]).to_numpy()
    high = ok["overall_ci_high"].fill_null(ok["overall_score"]).to_numpy()
    err = np.vstack([ys - low, high - ys]).clip(min=0)
    on = ok[front].to_numpy()
    ax.errorbar(xs[~on], ys[~on], yerr=err[:, ~on], fmt="o", color="#9aa5b1", alpha=0.7, label="dominated")
    ax.errorbar(xs[on], ys[on], yerr=err[:, on], fmt="o", color="#3b6ea5", label="Pareto front")
    order = np.argsort(xs[on])
    ax.plot(xs[on][order], ys[on][order], color="#3b6ea5", lw=1)
    rec = ok["recommended"].to_numpy()
    if rec.any():
        ax.scatter(xs[rec], ys[rec], marker="*", s=260, color="#f2a65a", zorder=5, label="recommended")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("overall score (95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        if np.isnan(v):
            return "—"
        return f"{v:.4f}" if abs(v) < 10 else f"{v:,.0f}"
    if isinstance(v, list):
        return " | ".join(map(str, v))
    return str(v)


def _md_table(df: pl.DataFrame) -> str:
    if df.is_empty():
        return "_none_"
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    for row in df.iter_rows():
        # escaped as the HTML report is: answers and questions are the data's, and a Markdown viewer (MLflow's
        # artifact view) renders raw HTML
        lines.append(
            "| "
            + " | ".join(html.escape(_fmt(v), quote=False).replace("|", "/").replace("\n", " ") for v in row)
            + " |"
        )
    return "\n".join(lines)


# columns read as one phrase: not wrapped (the table scrolls instead)
ONE_LINE = {"config", "config_key", "overall_ci95", "work a question"}


def _html_table(df: pl.DataFrame, highlight: str | None = None) -> str:
    if df.is_empty():
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = []
    for row in df.iter_rows(named=True):
        config = row["config"] if "config" in row else row.get("config_key")
        cls = ' class="rec"' if highlight and config == highlight else ""
        cells = (
            ("<td class='one-line'>" if c in ONE_LINE else "<td>") + f"{html.escape(_fmt(v))}</td>"
            for c, v in row.items()
        )
        body.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    # a table wider than the page scrolls on its own, the page keeps its width
    return (
        f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def by_label(df: pl.DataFrame, labels: dict[str, str]) -> pl.DataFrame:
    """A table's configs by their labels: `config_key` becomes `config` (in its place; a `label` column
    beside it goes), and `other_config`'s keys become labels; the full keys are in the report's last
    section. Unchanged where the board has no labels."""
    if not labels or not {"config_key", "other_config"} & set(df.columns):
        return df
    if "config_key" in df.columns:
        df = df.drop("label", strict=False)
    to_label = {c: c for c in df.columns} | {"config_key": "config"}
    return df.select(
        pl.col(c).replace_strict(labels, default=pl.col(c)).alias(to_label[c])
        if c in ("config_key", "other_config")
        else pl.col(c)
        for c in df.columns
    )


TIER_COLUMNS = [
    "rank",
    "config_key",
    "overall_score",
    "overall_ci95",
    "tier",
    "p_holm_vs_tier_best",
    "cost_per_1k_queries",
    "p95_latency_ms",
    "meets_constraints",
    "violations",
]


HOLDOUT_COLUMNS = [
    "config_key",
    "selection_score",
    "holdout_overall_score",
    "holdout_ci_low",
    "holdout_ci_high",
    "holdout_ci_withheld",
    "winners_curse_drop",
    "holdout_p_holm_vs_best",
    "holdout_tied_with_best",
]


def _holdout_sections(decision: dict, holdout: pl.DataFrame | None, labels: dict[str, str]) -> list:
    """The holdout confirmation: its verdict, then selection and holdout scores side by side."""
    state = decision.get("holdout")
    if not state:
        return []
    if "verdict" in state and holdout is None:  # no holdout question: said why
        return [("Confirmed on unseen questions", in_labels(state["verdict"], labels), None)]
    if state.get("pending") or holdout is None:
        text = (
            f"Pending: {len(decision.get('finalists') or [])} finalists are to be scored on the holdout "
            f"({holdout_share(decision)}, set aside before anything was chosen)."
        )
        return [("Confirmed on unseen questions", text, None)]
    text = f"**{in_labels(state['verdict'], labels)}**"
    return [
        ("Confirmed on unseen questions", text, None),
        (
            "Selection against holdout (the finalists)",
            None,
            holdout.select([c for c in HOLDOUT_COLUMNS if c in holdout.columns]),
        ),
    ]


def prompt_sections(
    optimized: list[dict], per_query: dict[str, pl.DataFrame], qa: pl.DataFrame, weights: dict[str, float]
) -> list:
    """Per optimized config (`{"key", "label", "base_key", "base_label", "seed": {component: text},
    "best": {...}}`): the seed and the optimized prompts side by side, then the questions it now answers
    better than the config it started from and those it answers worse (selection questions)."""
    sections = []
    for o in optimized:
        texts = pl.DataFrame(
            {
                "component": list(o["best"]),
                f"seed ({o['base_label']})": [o["seed"][c] for c in o["best"]],
                f"optimized ({o['label']})": list(o["best"].values()),
            }
        )
        sections.append((f"Prompt optimization: {o['label']}", None, texts))
        if o["key"] not in per_query or o["base_key"] not in per_query:
            continue
        scores = {
            k: per_query[k].select("query_id").with_columns(query_scores(per_query[k], weights).alias(k))
            for k in (o["base_key"], o["key"])
        }
        both = (
            scores[o["base_key"]]
            .join(scores[o["key"]], on="query_id")
            .join(qa.select("query_id", "question"), on="query_id")
            .select(
                "question",
                pl.col(o["base_key"]).alias("seed score"),
                pl.col(o["key"]).alias("optimized score"),
            )
        )
        change = pl.col("optimized score") - pl.col("seed score")
        won = both.filter(change > 0).sort(change, descending=True)
        lost = both.filter(change < 0).sort(change)
        sections += [
            (
                f"Questions {o['label']} now answers better ({won.height} of {both.height})",
                None,
                won.head(10),
            ),
            (f"Questions {o['label']} lost ({lost.height} of {both.height})", None, lost.head(10)),
        ]
    return sections


def hop_sections(board: pl.DataFrame, per_query: dict[str, pl.DataFrame], qa: pl.DataFrame) -> list:
    """An iterative retrieval's figures (rag_core/metrics/hops.py), when a config iterates: recall after
    each hop, the hops made, stop accuracy, against latency and cost; and the questions a later hop
    rescued (a gold document the first hop missed), per config."""
    if "mean_hops" not in board.columns or board["mean_hops"].drop_nulls().is_empty():
        return []
    hops = sorted(
        (c for c in board.columns if c.startswith("recall_hop_")), key=lambda c: int(c.split("_")[-1])
    )
    name = "label" if "label" in board.columns else "config_key"
    labels = dict(zip(board["config_key"], board[name], strict=True))
    cols = [name, "overall_score", *hops, "mean_hops", "stop_accuracy", "mean_wasted_hops"]
    cols += ["p95_latency_ms", "cost_per_1k_queries"]
    table = board.select([c for c in cols if c in board.columns])
    rescued = []
    questions = dict(zip(qa["query_id"], qa["question"], strict=True))
    for key, frame in per_query.items():
        later = [c for c in frame.columns if c.startswith("recall_hop_") and c != "recall_hop_1"]
        if not later:
            continue
        last = max(later, key=lambda c: int(c.split("_")[-1]))
        for r in frame.filter(pl.col(last) > pl.col("recall_hop_1")).iter_rows(named=True):
            rescued.append(
                {
                    name: labels.get(key, key),
                    "question": questions.get(r["query_id"], r["query_id"]),
                    "recall after hop 1": r["recall_hop_1"],
                    "recall at the end": r[last],
                    "hops": r["hops"],
                }
            )
    text = (
        "Recall of the gold documents after each hop (a config that stopped keeps its last value), the mean "
        "hops made, and the share of questions where the loop stopped at the right time (when its documents "
        "completed the gold ones, or not before its last hop when they never did)."
    )
    out = [("Retrieval hop by hop", text, table)]
    if rescued:
        out.append(("Questions a later hop rescued", None, pl.DataFrame(rescued).head(30)))
    return out


def language_sections(board: pl.DataFrame) -> list[tuple[str, str | None, pl.DataFrame | None]]:
    """A QA set in several languages: each config's score per language (`score_lang_<code>`: the overall
    score's rule on that language's questions), with how many questions each language has."""
    codes = sorted(c.removeprefix("score_lang_") for c in board.columns if c.startswith("score_lang_"))
    if not codes:
        return []
    ids = [c for c in ("rank", "label", "config_key", "overall_score") if c in board.columns]
    table = board.select(*ids, *(pl.col(f"score_lang_{c}").round(4).alias(c) for c in codes))
    counts = ", ".join(
        f"{c} {int(board[f'n_questions_lang_{c}'].max())}"
        for c in codes
        if f"n_questions_lang_{c}" in board.columns
    )
    note = (
        "Each language's score is the overall score's rule on that language's questions alone"
        + (f" (questions: {counts})" if counts else "")
        + "; the tiers and the recommendation use the overall score."
    )
    return [("Scores per language", note, table)]


def ship_report(
    sweep: str,
    board: pl.DataFrame,
    decision: dict,
    per_query: dict[str, pl.DataFrame],
    qa: pl.DataFrame,
    weights: dict[str, float],
    constraints: dict,
    holdout: pl.DataFrame | None = None,
    optimized: list[dict] | None = None,
) -> tuple[str, str, dict[str, bytes]]:
    """(markdown, self-contained html, plots by file name). `holdout`: the finalists scored on the holdout
    (rag_core/decision/holdout.confirm), shown beside their selection scores; its verdict is `decision['holdout']`.
    `optimized`: the configs prompt optimization found (prompt_sections)."""
    rec = decision["recommended"]
    labels = label_map(board["config_key"], board["label"]) if "label" in board.columns else {}
    rec_name = labels.get(rec, rec) if rec else None
    plots = {
        "pareto_cost.png": pareto_plot_png(
            board, "cost_per_1k_queries", "cost per 1k queries (USD)", "pareto_cost"
        ),
        "pareto_latency.png": pareto_plot_png(
            board, "p95_latency_ms", "p95 latency per query (ms)", "pareto_latency"
        ),
    }
    tier1 = board.filter(pl.col("tier") == 1)
    top = tier1.select([c for c in TIER_COLUMNS if c in board.columns])
    if "retrieval.mode" in board.columns:  # what orders them by speed before their measured p95, beside it
        work = [describe_work(work_per_question(r)) for r in tier1.iter_rows(named=True)]
        at = top.columns.index("p95_latency_ms") + 1 if "p95_latency_ms" in top.columns else top.width
        top = top.insert_column(at, pl.Series("work a question", work, pl.String))
    # every config outside tier 1: lower tiers, and those not tiered at all (failed calls, no score)
    others = board.filter((pl.col("tier") != 1) | pl.col("tier").is_null()).select(
        [c for c in TIER_COLUMNS + ["vs_leader"] if c in board.columns]
    )
    effect = effects(board)
    missed = missed_questions(per_query, qa, weights, rec) if rec else pl.DataFrame()
    stages = (
        stage_table(board.filter(pl.col("config_key") == rec).row(0, named=True)) if rec else pl.DataFrame()
    )
    limits = {k: v for k, v in constraints.items() if v not in (None, {}, [])}
    n = decision["n_questions"]
    sections = [
        (
            "Recommendation",
            f"**{rec_name or 'none'}**"
            + (f" (config {rec})" if rec_name != rec else "")
            + f"\n\n{in_labels(reason(decision), labels)}",
            None,
        ),
        *_holdout_sections(decision, holdout, labels),
        ("How sure", in_labels(_how_sure(decision), labels), None),
        ("Constraints", ", ".join(f"{k}: {v}" for k, v in limits.items()) or "none (prefer: cheapest)", None),
        ("Overall score", _score_note(weights, decision.get("undefined_metrics") or []), None),
        *_judge_sections(decision.get("judge")),
        (
            "Top tier",
            "Speed between them is first the work a question costs, counted: a config doing at least as "
            "much of each kind as another and more of one is the slower; then their measured p95."
            if "work a question" in top.columns
            else None,
            top,
        ),
        (
            ("Quality against cost", "![cost](pareto_cost.png)", "pareto_cost.png")
            if board["cost_per_1k_queries"].n_unique() > 1 and qualified(board).height
            else (
                "Quality against cost",
                f"Every config costs ${board['cost_per_1k_queries'][0]:.4f} per 1k queries: cost does not separate them.",
                None,
            )
        ),
        ("Quality against latency", "![latency](pareto_latency.png)", "pareto_latency.png")
        if qualified(board).height
        else ("Quality against latency", "No config qualifies: nothing to plot.", None),
        *language_sections(board),
        ("What each setting did (mean and best overall score of the configs with each value)", None, effect),
        *(
            [
                (f"Questions {rec_name} misses that another config answers", None, missed),
                (f"Cost and latency per stage of {rec_name}", None, stages),
            ]
            if rec
            else []
        ),
        *hop_sections(board, per_query, qa),
        *ann_sections(board),
        ("The other configs", None, others),
        *prompt_sections(optimized or [], per_query, qa, weights),
    ]
    if sampling := _sampling_section(board):
        sections.insert(4, sampling)
    if dropped := decision.get("not_ranked"):  # a halving search: out on an early rung
        table = pl.DataFrame(
            {"config_key": list(dropped), "questions answered": list(dropped.values())}
        ).sort("questions answered", "config_key", descending=[True, False])
        sections.append(
            (
                f"Dropped by the search (worse than the leader on the first questions; not ranked on all "
                f"{decision.get('questions', n)})",
                None,
                table,
            )
        )
    if labels:  # the tables name configs by label: here is each one's full key
        keys = board.select(pl.col("label").alias("config"), "config_key")
        sections.append(("The configs by label: their full keys", None, keys))
    md, page = _render(sweep, sections, plots, rec_name, labels)
    return md, page, plots


def _judge_sections(judge: dict | None) -> list[tuple]:
    """Where the sweep measured its LLM judge against labels: what it found, and whether the judge's metric
    is in the overall score."""
    if not judge:
        return []
    text = f"{judge['model']} on the labels of {Path(judge['labels']).name}: {judge['reason']}."
    if judge.get("n"):
        unread = f" ({judge['failures']} more gave no verdict)" if judge.get("failures") else ""
        text += (
            f" On {judge['n']} labels{unread}: accuracy {judge['accuracy']:.2f} (95% {judge['accuracy_low']:.2f}"
            f"–{judge['accuracy_high']:.2f}); the labels call {judge['base_rate']:.0%} of the answers supported, "
            f"the judge {judge['judge_rate']:.0%}."
        )
    confusion = judge.get("confusion")
    table = (
        pl.DataFrame({"the judge says": ["supported", "not supported"],
                      "labels: supported": [confusion["both_supported"], confusion["human_only"]],
                      "labels: not supported": [confusion["judge_only"], confusion["both_unsupported"]]})
        if confusion
        else None
    )  # fmt: skip
    return [("The judge against the labels", text, table)]


def _how_sure(decision: dict) -> str:
    """How sure the recommendation is: the decision's advice, or what a lone top tier rests on."""
    n, mde = decision["n_questions"], decision["min_detectable_difference"]
    return (
        decision["advice"]
        or (not decision["top_tier"] and "No config qualifies: there is nothing to compare.")
        or f"The top tier is this one config: every other is significantly worse (Holm-corrected paired "
        f"bootstrap over {n} questions; "
        + (
            f"this QA set detects differences of about {mde:.3f} in overall score)."
            if mde is not None
            else f"no detectable difference is given: "
            f"{decision.get('min_detectable_difference_withheld') or 'no other config to compare'})."
        )
    )


def _sampling_section(board: pl.DataFrame) -> tuple | None:
    """Where a generator sampled several answers a question: each config's variance split."""
    if "sampling_share" not in board.columns or not board["sampling_share"].drop_nulls().len():
        return None
    sampled = board.filter(pl.col("sampling_share").is_not_null()).select(
        "config_key",
        "n_samples",
        "score_var_between_questions",
        "score_var_within_questions",
        "sampling_share",
    )
    return (
        "Sampling (a generator with temperature > 0 answered each question several times)",
        "Each question's scores are the mean over its samples; the tiers and the detectable difference "
        "use those means. The variance of a question's score is split into the part between questions "
        "and the part within a question (the generator's sampling): a large sampling share means "
        "more samples, not more questions, would sharpen the comparison.",
        sampled,
    )


def _render(
    sweep: str, sections: list, plots: dict[str, bytes], rec: str | None, labels: dict[str, str]
) -> tuple[str, str]:
    """The sections as Markdown and as one self-contained HTML page (plots inlined); `rec`: the
    recommended config as the tables name it, highlighted; the tables' configs by label but the last's."""
    md = [f"# Ship report: {html.escape(sweep)}", ""]
    body = []
    for title, text, extra in sections:
        md += [f"## {html.escape(title)}", ""]
        body.append(f"<h2>{html.escape(title)}</h2>")
        if text:
            md += [html.escape(text, quote=False), ""]
        if isinstance(extra, str):  # a plot (its text is the Markdown's image link)
            b64 = base64.b64encode(plots[extra]).decode()
            body.append(f'<img alt="{html.escape(title)}" src="data:image/png;base64,{b64}">')
            continue
        if text:  # a section's note, before its table where it has one
            body.append(f"<p>{_inline(text)}</p>")
        if isinstance(extra, pl.DataFrame):
            if "config" not in extra.columns:  # the key table names each config both ways
                extra = by_label(extra, labels)
            md += [_md_table(extra), ""]
            body.append(_html_table(extra, rec))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Ship report: {html.escape(sweep)}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #1f2933; }}
h1 {{ font-size: 1.6em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #e4e7eb; }}
table {{ border-collapse: collapse; font-size: 12px; }} td, th {{ border: 1px solid #e4e7eb; padding: 3px 6px; }}
.wide {{ overflow-x: auto; }} td {{ white-space: pre-wrap; }} td.one-line {{ white-space: nowrap; }} th {{ background: #f5f7fa; text-align: left; }} tr.rec td {{ background: #fff4e5; font-weight: 600; }}
</style></head>
<body><h1>Ship report: {html.escape(sweep)}</h1>
{"".join(body)}
</body></html>
"""
    return "\n".join(md), page


def _inline(text: str) -> str:
    """The little Markdown the report's prose uses: **bold** and paragraphs."""
    out = html.escape(text)
    parts = out.split("**")
    out = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))
    return out.replace("\n\n", "</p><p>")
