"""How far an LLM judge can be trusted: its agreement with human labels (pure; rag_core/metrics/stats.py for the intervals).

A label says whether a person found the answer supported by its context (the judge's question, rag_core/
metrics/judge.py); the judge's score counts as "supported" at or above `threshold`. Reported:
- Cohen's kappa with its asymptotic 95% interval (`stats.cohens_kappa`, statsmodels' own, clipped to
  kappa's range, -1 to 1): agreement beyond what the two base rates give by chance. Undefined (None, with
  the reason) when the labels or the judge's verdicts hold one class only: no agreement beyond chance can
  be shown then.
- accuracy with its Wilson 95% interval (`stats.wilson_interval`);
- the confusion table and the base rates (the labels' share of "supported", the judge's);
- length bias: the judge's "supported" rate on the unsupported answers (false positives) and its
  "unsupported" rate on the supported ones (false negatives), in the longer and the shorter half of the
  answers. A judge that rewards length passes long unsupported answers more often than short ones.
Position bias does not apply: the judge scores one answer at a time, never a pair.
Calls that failed or whose verdict did not parse are counted and left out, never scored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

MIN_LABELS = 10  # below this an interval is as wide as the scale
TRUE, FALSE = {"true", "1", "yes", "y", "supported"}, {"false", "0", "no", "n", "unsupported"}
FIELDS = ("question", "answer", "context", "supported")


class LabelsError(ValueError):
    """A labels file that cannot be used; the message names the file, the row (1-based) and the field."""


def read_labels(path: str | Path) -> tuple[list[dict], list[bool]]:
    """The labelled rows (JSONL, CSV or Parquet: question, answer, context, supported) and their labels; a
    missing field or a label that is no yes/no is an error naming the file, the row and the field."""
    import polars as pl

    file = Path(path)
    if not file.is_file():
        raise LabelsError(f"{path}: no such file")
    try:
        frame = {
            ".jsonl": lambda: pl.read_ndjson(file),
            ".csv": lambda: pl.read_csv(file),
            ".parquet": lambda: pl.read_parquet(file),
        }[file.suffix.lower()]()
    except KeyError:
        raise LabelsError(f"{path}: expected a .jsonl, .csv or .parquet file") from None
    except Exception as e:  # a file its reader cannot parse
        raise LabelsError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    missing = [f for f in FIELDS if f not in frame.columns]
    if missing:
        raise LabelsError(f"{path}: no field {', '.join(missing)} (each row needs {', '.join(FIELDS)})")
    rows, labels = [], []
    seen: dict[tuple, tuple[int, bool]] = {}  # a labelled answer's text -> (its first row, its label)
    repeated: list[tuple[int, int]] = []
    for n, row in enumerate(frame.select(FIELDS).iter_rows(named=True), start=1):
        for f in ("question", "answer", "context"):
            if not isinstance(row[f], str) or (f != "answer" and not row[f].strip()):
                raise LabelsError(f"{path}: row {n}, field '{f}': expected text, got {row[f]!r}")
        value = str(row["supported"]).strip().lower()
        if value not in TRUE | FALSE:
            raise LabelsError(
                f"{path}: row {n}, field 'supported': expected true/false, 1/0 or yes/no, got {row['supported']!r}"
            )
        key = tuple(" ".join(str(row[f]).split()) for f in ("question", "answer", "context"))
        if key in seen:  # the same labelled answer again: one piece of evidence, counted once
            n0, label0 = seen[key]
            if label0 != (value in TRUE):
                raise LabelsError(
                    f"{path}: rows {n0} and {n}: the same question, answer and context labelled both supported "
                    "and not: settle the label (one row each), then run again"
                )
            repeated.append((n, n0))
            continue
        seen[key] = (n, value in TRUE)
        rows.append(row)
        labels.append(value in TRUE)
    if not rows:
        raise LabelsError(f"{path}: no rows")
    if repeated:
        import warnings

        from rag_core.data.datasets import DataWarning

        example = ", ".join(f"row {a} = row {b}" for a, b in repeated[:3]) + (
            ", …" if len(repeated) > 3 else ""
        )
        warnings.warn(
            DataWarning(
                f"{path}: {len(repeated)} duplicate label row(s) (the same question, answer and context, "
                f"labelled alike: {example}) counted once: {len(rows)} labels remain"
            ),
            stacklevel=2,
        )
    return rows, labels


@dataclass
class Agreement:
    n: int  # labelled answers the judge scored
    failures: int  # calls that failed or did not parse: left out
    kappa: float | None
    kappa_low: float | None
    kappa_high: float | None
    accuracy: float
    accuracy_low: float
    accuracy_high: float
    confusion: dict[str, int]  # both_supported, judge_only, human_only, both_unsupported
    base_rate: float  # the labels' share of supported answers
    judge_rate: float  # the judge's share
    length_bias: dict[str, float | None]
    undefined: str = ""  # why kappa is None

    def as_dict(self) -> dict:
        return asdict(self)

    def verdict(self, min_kappa: float) -> str:
        """'trusted', 'below the floor' or 'undefined' against a kappa floor."""
        if self.kappa is None:
            return "undefined"
        return "trusted" if self.kappa >= min_kappa else "below the floor"

    def lines(self, min_kappa: float) -> list[str]:
        c = self.confusion
        out = [
            f"{self.n} labelled answers scored ({self.failures} judge call(s) failed or did not parse: left out)",
            "kappa: "
            + (
                f"{self.kappa:.3f} (95% {self.kappa_low:.3f} to {self.kappa_high:.3f})"
                if self.kappa is not None
                else f"undefined ({self.undefined})"
            ),
            f"accuracy: {self.accuracy:.3f} (95% {self.accuracy_low:.3f} to {self.accuracy_high:.3f})",
            f"base rate: people {self.base_rate:.2f} supported, the judge {self.judge_rate:.2f}",
            "confusion (people x judge):",
            f"  supported:   judge supported {c['both_supported']:4d}, judge unsupported {c['human_only']:4d}",
            f"  unsupported: judge supported {c['judge_only']:4d}, judge unsupported {c['both_unsupported']:4d}",
        ]
        lb = self.length_bias
        if lb["fp_long"] is not None and lb["fp_short"] is not None:
            out.append(
                f"length: the judge passes {lb['fp_long']:.2f} of the longer unsupported answers, "
                f"{lb['fp_short']:.2f} of the shorter ones"
            )
        out.append("position bias: not applicable (the judge scores one answer at a time)")
        out.append(f"verdict: {self.verdict(min_kappa)} (kappa floor {min_kappa:g})")
        return out


def agreement(
    human: list[bool], scores: list[float | None], lengths: list[int], threshold: float = 0.5
) -> Agreement:
    """The judge's agreement with `human` labels (True: supported); `scores`: the judge's, None for a
    failed call; `lengths`: each answer's length in characters."""
    from rag_core.metrics.stats import cohens_kappa, wilson_interval

    kept = [i for i, s in enumerate(scores) if s is not None]
    h = np.array([human[i] for i in kept], dtype=bool)
    j = np.array([scores[i] >= threshold for i in kept], dtype=bool)
    size = np.array([lengths[i] for i in kept])
    n = len(kept)
    if n == 0:
        raise ValueError("no labelled answer was scored by the judge: every call failed")
    table = np.array([[np.sum(h & j), np.sum(h & ~j)], [np.sum(~h & j), np.sum(~h & ~j)]])
    correct = int(table[0, 0] + table[1, 1])
    acc_low, acc_high = wilson_interval(correct, n)
    kappa = low = high = None
    undefined = ""
    if h.all() or (~h).all():
        undefined = "the labels hold one class only"
    elif j.all() or (~j).all():
        undefined = "the judge gave one verdict only"
    else:
        kappa, raw_low, raw_high = cohens_kappa(table)
        # the asymptotic (Wald) interval is symmetric and can pass kappa's bounds; a kappa never does
        low, high = max(-1.0, raw_low), min(1.0, raw_high)
    long = size > np.median(size)

    def rate(mask) -> float | None:
        return float(mask.mean()) if mask.size else None

    return Agreement(
        n=n,
        failures=len(scores) - n,
        kappa=kappa,
        kappa_low=low,
        kappa_high=high,
        accuracy=correct / n,
        accuracy_low=float(acc_low),
        accuracy_high=float(acc_high),
        confusion={
            "both_supported": int(table[0, 0]),
            "human_only": int(table[0, 1]),
            "judge_only": int(table[1, 0]),
            "both_unsupported": int(table[1, 1]),
        },
        base_rate=float(h.mean()),
        judge_rate=float(j.mean()),
        length_bias={
            "fp_long": rate(j[~h & long]),
            "fp_short": rate(j[~h & ~long]),
            "fn_long": rate(~j[h & long]),
            "fn_short": rate(~j[h & ~long]),
        },
        undefined=undefined,
    )
