import pytest

from rag_core.retrieval.fusion import fuse, min_max, rrf, weighted

VEC = [("a", 0.9), ("b", 0.8), ("c", 0.1)]
KW = [("c", 12.0), ("a", 6.0), ("d", 3.0)]


def test_rrf_hand_computed():
    out = dict(rrf(VEC, KW, alpha=0.5, k0=60))
    assert out["a"] == pytest.approx(0.5 / 61 + 0.5 / 62)
    assert out["c"] == pytest.approx(0.5 / 63 + 0.5 / 61)
    assert out["b"] == pytest.approx(0.5 / 62)
    assert out["d"] == pytest.approx(0.5 / 63)
    assert [d for d, _ in rrf(VEC, KW)] == ["a", "c", "b", "d"]


def test_weighted_hand_computed():
    # vector normalized: a 1, b 0.875, c 0; keyword: c 1, a 1/3, d 0
    out = dict(weighted(VEC, KW, alpha=0.25))
    assert out["a"] == pytest.approx(0.25 * 1 + 0.75 * (1 / 3))
    assert out["b"] == pytest.approx(0.25 * 0.875)
    assert out["c"] == pytest.approx(0.75)
    assert out["d"] == pytest.approx(0.0)


def test_alpha_extremes_reduce_to_one_side():
    assert [d for d, _ in fuse("weighted", VEC, KW, 1.0, 3)] == ["a", "b", "c"]
    assert [d for d, _ in fuse("rrf", VEC, KW, 0.0, 3)][:3] == ["c", "a", "d"]


def test_min_max_edge_cases_and_ties():
    assert min_max([]) == {}
    assert min_max([("x", 2.0), ("y", 2.0)]) == {"x": 1.0, "y": 1.0}
    assert [d for d, _ in rrf([("b", 1), ("a", 1)], [("a", 1), ("b", 1)])] == ["a", "b"]  # tie -> by id
    with pytest.raises(ValueError):
        fuse("max", VEC, KW, 0.5, 3)
