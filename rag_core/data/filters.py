"""Metadata filters in the seeds' format (Mongo/Chroma style), parsed once and translated per store.

    {"doc_id": "d1"}                           equality (also {"doc_id": {"$eq": "d1"}})
    {"year": {"$gt": 2000}}                    $gt, $gte, $lt, $lte on numbers
    {"year": {"$gte": 2000, "$lt": 2010}}      a range: several operators on one field are ANDed
    {"lang": {"$in": ["en", "de"]}}            membership
    {"$and": [{...}, {...}]}                   conjunction; several fields in one mapping are ANDed too

Filterable fields are `doc_id` and the scalar values (str, int, float, bool) of a document's `metadata`
(see `filterable_attributes`). A record that lacks a field never matches a condition on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

RANGE_OPS = ("$gt", "$gte", "$lt", "$lte")
OPS = ("$eq", "$in", *RANGE_OPS)
# Names the stores use for their own columns; metadata keys with these names are not filterable.
RESERVED = frozenset({"chunk_id", "text", "metadata", "vector", "id", "pk", "dense", "sparse", "score"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class FilterError(ValueError):
    """A filter that cannot be applied; the message names the field and the operator."""


@dataclass(frozen=True)
class Condition:
    field: str
    op: str  # one of OPS
    value: Any  # a scalar, or a tuple of scalars for $in


def _scalar(v: Any) -> bool:
    return isinstance(v, str | int | float | bool)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def parse_filter(where: dict | None) -> tuple[Condition, ...]:
    """Validate a filter and flatten it into ANDed conditions; raise FilterError naming what is wrong."""
    if where is None:
        return ()
    if not isinstance(where, dict):
        raise FilterError(f"a filter is a mapping of field to value or operators, got {type(where).__name__}")
    out: list[Condition] = []
    for field, spec in where.items():
        if field == "$and":
            if not isinstance(spec, list) or not all(isinstance(x, dict) for x in spec):
                raise FilterError("'$and' takes a list of filters")
            for sub in spec:
                out += parse_filter(sub)
            continue
        if field.startswith("$"):
            raise FilterError(f"unknown filter operator {field!r} (supported at the top level: '$and')")
        if not isinstance(spec, dict):
            spec = {"$eq": spec}
        if not spec:
            raise FilterError(f"field {field!r}: empty operator mapping")
        for op, value in spec.items():
            out.append(_condition(field, op, value))
    return tuple(out)


def _condition(field: str, op: str, value: Any) -> Condition:
    if op not in OPS:
        raise FilterError(f"field {field!r}: unknown operator {op!r}; supported: {', '.join(OPS)}")
    if op == "$in":
        if not isinstance(value, list | tuple) or not value or not all(_scalar(v) for v in value):
            raise FilterError(f"field {field!r}: '$in' takes a non-empty list of str/int/float/bool values")
        return Condition(field, op, tuple(value))
    if op in RANGE_OPS and not _number(value):
        raise FilterError(f"field {field!r}: {op!r} compares numbers, got {value!r}")
    if not _scalar(value):
        raise FilterError(f"field {field!r}: {op!r} takes a str/int/float/bool value, got {value!r}")
    return Condition(field, op, value)


def check_fields(conditions: tuple[Condition, ...], fields: dict[str, str]) -> None:
    """Every condition must name a filterable field of the collection (`fields`: name -> type)."""
    for c in conditions:
        if c.field not in fields:
            raise FilterError(
                f"unknown filter field {c.field!r}; filterable fields of this index: {', '.join(sorted(fields))}"
            )
        kind = fields[c.field]
        if c.op in RANGE_OPS and kind not in ("int", "float"):
            raise FilterError(f"field {c.field!r} holds {kind} values; {c.op!r} needs a numeric field")


def matches(conditions: tuple[Condition, ...], record: dict[str, Any]) -> bool:
    """Reference semantics of a filter on one record (the tests' reference; Chroma's in-process BM25)."""
    return all(record.get(c.field) is not None and _holds(c, record[c.field]) for c in conditions)


def _holds(c: Condition, v: Any) -> bool:
    if c.op == "$eq":
        return _same(v, c.value)
    if c.op == "$in":
        return any(_same(v, x) for x in c.value)
    if not _number(v):
        return False
    return {"$gt": v > c.value, "$gte": v >= c.value, "$lt": v < c.value, "$lte": v <= c.value}[c.op]


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python; a filter on a bool field must not match the number 1, nor the reverse
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _kind(v: Any) -> str:
    return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else type(v).__name__


def filterable_attributes(
    rows: list[dict], reserved: frozenset[str] = frozenset()
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The filterable fields of index rows and each row's values.

    Rows carry `doc_id` and `metadata` (a JSON string). A metadata key is filterable when its name is an
    identifier that no store reserves (RESERVED, and `reserved`: the fields this build adds, such as a
    segmented keyword field) and every row that has it holds the same scalar kind (ints and floats mix as
    float). Other keys stay in the metadata JSON only. Returns ({name: "str"|"int"|"float"|"bool"}, per-row
    {name: value})."""
    metas = [json.loads(r.get("metadata") or "{}") for r in rows]
    kinds: dict[str, set[str]] = {}
    for m in metas:
        for key, v in m.items():
            kinds.setdefault(key, set()).add(_kind(v) if _scalar(v) else "other")
    fields = {"doc_id": "str"}
    for key, ks in kinds.items():
        if not _NAME.match(key) or key in RESERVED or key in reserved or key == "doc_id" or "other" in ks:
            continue
        if ks <= {"int", "float"}:
            fields[key] = "float" if "float" in ks else "int"
        elif len(ks) == 1:
            fields[key] = next(iter(ks))
    values = []
    for r, m in zip(rows, metas, strict=True):
        row = {"doc_id": r["doc_id"]}
        for key, kind in fields.items():
            if key in m:
                row[key] = float(m[key]) if kind == "float" else m[key]
        values.append(row)
    return fields, values
