import pytest

from rag_core.chunking import chunk_corpus, chunk_text

TEXT = (
    "Paris is the capital of France. It has 2.1 million residents! Is it large? Yes.\n\n"
    "The Seine flows through it. Bridges cross the river in many places.\n"
    "A new line starts here without a full stop\n\n" + "Supercalifragilisticexpialidocious" * 3 + " end."
)
METHODS = ["fixed", "sentence", "paragraph", "recursive"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("size,overlap", [(40, 0), (60, 15), (200, 30), (1000, 0)])
def test_chunks_are_exact_slices_cover_everything_and_respect_size(method, size, overlap):
    spans = chunk_text(TEXT, method, size, overlap)
    assert spans
    covered = set()
    for s in spans:
        piece = TEXT[s.start : s.end]
        assert 0 < len(piece) <= size  # never over size
        assert piece == piece.strip()  # trimmed, still an exact slice (nothing invented)
        covered.update(range(s.start, s.end))
    # nothing lost: every non-whitespace character is inside some chunk
    assert all(i in covered for i, ch in enumerate(TEXT) if not ch.isspace())
    # document order
    assert [s.start for s in spans] == sorted(s.start for s in spans)


@pytest.mark.parametrize("method", METHODS)
def test_overlap_between_neighbours_is_bounded(method):
    for a, b in zip(chunk_text(TEXT, method, 60, 15), chunk_text(TEXT, method, 60, 15)[1:], strict=False):
        assert max(0, a.end - b.start) <= 15


def test_fixed_windows_overlap_exactly():
    text = "abcdefghij" * 5
    spans = chunk_text(text, "fixed", 20, 5)
    assert [(s.start, s.end) for s in spans] == [(0, 20), (15, 35), (30, 50)]


def test_sentence_chunker_keeps_sentences_whole_when_they_fit():
    spans = chunk_text("One two. Three four five. Six.", "sentence", 18, 0)
    assert ["One two.", "Three four five.", "Six."] == [
        "One two. Three four five. Six."[s.start : s.end] for s in spans
    ]


def test_sentence_overlap_carries_the_last_sentence():
    text = "Aa aa. Bb bb. Cc cc. Dd dd."
    pieces = [text[s.start : s.end] for s in chunk_text(text, "sentence", 13, 7)]
    assert pieces == ["Aa aa. Bb bb.", "Bb bb. Cc cc.", "Cc cc. Dd dd."]


def test_paragraph_chunker_splits_on_blank_lines():
    text = "First para line.\n\nSecond para.\n\nThird."
    pieces = [text[s.start : s.end] for s in chunk_text(text, "paragraph", 18, 0)]
    assert pieces == ["First para line.", "Second para.", "Third."]


def test_overlap_must_be_below_size():
    with pytest.raises(ValueError):
        chunk_text(TEXT, "fixed", 10, 10)


def test_chunk_corpus_ids_and_index_text():
    import polars as pl

    corpus = pl.DataFrame(
        {
            "doc_id": ["d1", "d2"],
            "title": ["T", ""],
            "text": ["Alpha beta. Gamma delta.", "Solo."],
            "metadata": ["{}", "{}"],
        }
    )
    chunks = chunk_corpus(corpus, "sentence", 12, 0)
    assert chunks["chunk_id"].to_list() == ["d1#0", "d1#1", "d2#0"]
    assert chunks["index_text"].to_list() == ["T\nAlpha beta.", "T\nGamma delta.", "Solo."]
