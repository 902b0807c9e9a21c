"""The vector index's search structure (`index.ann`): `exact` (every chunk compared, as always) or an
approximate index that trades recall for search time and memory.

- ivf_pq: LanceDB's IVF-PQ (num_partitions, num_sub_vectors; at search nprobes, refine_factor)
- ivf_sq: LanceDB's IVF partitions of scalar-quantized vectors (one byte a dimension; num_partitions; at
  search nprobes, refine_factor): no codebooks to train, so it builds several times faster than IVF-PQ
  (benchmarks/scale.py)
- ivf_rq: LanceDB's IVF partitions of RaBitQ-quantized vectors (num_bits a dimension after a random rotation;
  num_partitions, num_bits; at search nprobes, refine_factor): a few bits a dimension scan faster than
  ivf_sq's byte, and the refine step's full vectors restore the order (at 1M chunks, the same probes and
  recall: two thirds of ivf_sq's search time; at 100k its hybrid searches were the slower,
  benchmarks/HISTORY.md)
- ivf_hnsw_sq: LanceDB's IVF partitions each holding an HNSW graph of scalar-quantized vectors
  (num_partitions, m, ef_construction; at search nprobes, ef)
- hnsw: an HNSW graph (m, ef_construction; at search ef): Weaviate, Chroma, Milvus Lite

A graph search keeps at least as many candidates as it returns: its ef is raised to the search's depth
(k plus the tie margin) where it is smaller, on every store.

Which store offers which type is the store's fact (rag_core/components/stores.py `ann_types`). Every setting
is part of the index's key and fingerprint; an `exact` index keeps the key and fingerprint it always had.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

ANN_TYPES = ("exact", "ivf_pq", "ivf_sq", "ivf_rq", "ivf_hnsw_sq", "hnsw")

# the settings each type takes, with their defaults (None: the store chooses from the row count)
PARAMS: dict[str, dict[str, int | None]] = {
    "exact": {},
    "ivf_pq": {"num_partitions": None, "num_sub_vectors": None, "nprobes": 20, "refine_factor": None},
    # IVF-SQ re-ranks 10 x k candidates by their full vectors unless told: at 100k hashing vectors +1.5 points
    # of recall for ~4 ms (benchmarks/HISTORY.md, issue 71)
    "ivf_sq": {"num_partitions": None, "nprobes": 20, "refine_factor": 10},
    # RaBitQ at 4 bits a dimension (LanceDB's default is 1): at 1M hashing vectors, 30% probed and refine 10,
    # recall 0.973 against 1 bit's 0.842 for ~2 ms more at p95 (benchmarks/HISTORY.md, issue 71)
    "ivf_rq": {"num_partitions": None, "num_bits": 4, "nprobes": 20, "refine_factor": 10},
    "ivf_hnsw_sq": {"num_partitions": None, "m": 16, "ef_construction": 128, "ef": 64, "nprobes": 20},
    "hnsw": {"m": 16, "ef_construction": 128, "ef": 64},
}

# the key's short name of each setting
_SHORT = {
    "num_partitions": "p",
    "num_sub_vectors": "sv",
    "num_bits": "nb",
    "nprobes": "np",
    "refine_factor": "rf",
    "m": "m",
    "ef_construction": "efc",
    "ef": "ef",
}


class AnnIndex(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)

    type: Literal[ANN_TYPES] = "exact"
    """`exact` (every chunk compared), `ivf_pq`, `ivf_sq`, `ivf_rq`, `ivf_hnsw_sq` (LanceDB) or `hnsw` (Weaviate,
    Chroma, Milvus)."""
    num_partitions: int | None = Field(default=None, gt=0)
    """ivf_pq, ivf_sq, ivf_rq, ivf_hnsw_sq: IVF partitions (unset: the store's choice from the row count)."""
    num_sub_vectors: int | None = Field(default=None, gt=0)
    """ivf_pq: product-quantization sub-vectors (unset: the store's choice from the dimension)."""
    num_bits: int | None = Field(default=None, ge=1, le=9)
    """ivf_rq: RaBitQ bits a dimension, 1 to 9 (default 4): more recall more and scan slower."""
    nprobes: int | None = Field(default=None, gt=0)
    """ivf_pq, ivf_sq, ivf_rq, ivf_hnsw_sq: partitions searched per query (default 20): more is slower and recalls
    more."""
    refine_factor: int | None = Field(default=None, gt=0)
    """ivf_pq, ivf_sq, ivf_rq: candidates re-ranked by their exact distance, as a multiple of k (unset: none for
    ivf_pq, 10 for ivf_sq and ivf_rq)."""
    m: int | None = Field(default=None, gt=1, le=256)
    """ivf_hnsw_sq, hnsw: neighbours per graph node (default 16)."""
    ef_construction: int | None = Field(default=None, gt=0)
    """ivf_hnsw_sq, hnsw: candidate list while the graph is built (default 128)."""
    ef: int | None = Field(default=None, gt=0)
    """ivf_hnsw_sq, hnsw: candidate list at search (default 64; raised to the search depth where smaller)."""

    @model_validator(mode="after")
    def _settings_of_its_type(self) -> AnnIndex:
        takes = PARAMS[self.type]
        foreign = sorted(n for n in self.model_fields_set - {"type"} if n not in takes and getattr(self, n))
        if foreign:
            offered = ", ".join(takes) or "no settings"
            raise ValueError(f"{self.type} takes {offered}; not {', '.join(foreign)}")
        return self

    @model_serializer
    def _type_and_its_settings(self) -> dict[str, str | int]:
        return {"type": self.type, **self.settings()}

    @property
    def approximate(self) -> bool:
        return self.type != "exact"

    def effective(self) -> AnnIndex:
        """Every setting of its type given (its default where unset), the others unset: one key per index."""
        fields = {"type": self.type}
        for name, default in PARAMS[self.type].items():
            value = getattr(self, name)
            fields[name] = default if value is None else value
        return AnnIndex(**fields)

    def settings(self) -> dict[str, int]:
        """The settings of its type that are set (after `effective`, every one with a default)."""
        return {n: v for n in PARAMS[self.type] if (v := getattr(self, n)) is not None}

    @property
    def key(self) -> str:
        """e.g. `hnsw-m16-efc128-ef64`; `exact` for the exact index (which adds nothing to an index's key)."""
        return "-".join([self.type, *(f"{_SHORT[n]}{v}" for n, v in self.settings().items())])
