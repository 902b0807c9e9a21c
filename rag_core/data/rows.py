"""Rows of a data file, and the error that names a file, row and field: what every loader reads with
(rag_core/data/datasets.py, rag_core/data/qa/formats.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl


class DatasetError(ValueError):
    """Bad input data; the message names the file, the row and the field."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise DatasetError(f"{path}: file not found")
    if path.suffix == ".parquet":
        try:
            return pl.read_parquet(path).to_dicts()
        except Exception as e:  # polars raises several error types for a bad file
            raise DatasetError(f"{path}: not a readable Parquet file: {e}") from None
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}: line {lineno}: invalid JSON: {e.msg}") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}: line {lineno}: expected a JSON object")
            row["__row__"] = lineno
            rows.append(row)
        return rows
    raise DatasetError(f"{path}: unsupported format (use .parquet, .jsonl or a directory of .txt/.md)")


# a plain decimal number: digits, an optional fraction and exponent; not what float() alone also reads
# ('nan', 'inf', '1_0', non-ASCII digits)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def finite_grade(value: Any, place: str, field: str) -> float:
    """A relevance grade: a finite number, or text that spells one as a plain decimal ('2', '0.5', '1e-1';
    spaces around it aside). Anything else (NaN, infinity, a boolean, '1_0') is refused naming `place`
    (file and line) and `field`: a NaN grade dropped its query, an infinite one made nDCG NaN."""
    number = math.nan
    if (isinstance(value, int | float) and not isinstance(value, bool)) or (
        isinstance(value, str) and _DECIMAL.fullmatch(value.strip(" "))
    ):
        try:
            number = float(value)
        except OverflowError:  # an integer past the largest float
            pass
    if not math.isfinite(number):
        raise DatasetError(f"{place}: field '{field}': {value!r} is not a finite number")
    return number


def where(path: Path, row: dict, index: int) -> str:
    """The place of a row in errors: its file and line (JSONL) or row (Parquet), or where a format reader
    found it (`__where__`)."""
    if "__where__" in row:
        return row["__where__"]
    return f"{path}: line {row['__row__']}" if "__row__" in row else f"{path}: row {index + 1}"
