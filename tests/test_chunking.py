import pytest

from rag_core.chunking.chunkers import chunk_corpus, chunk_text

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


MARKDOWN = """# Guide
Intro text here. More intro.

## Install
Run the installer. Then restart the machine and log in again.

```bash
pip install x
pip install y
pip install z
```

| a | b |
|---|---|
| 1 | 2 |

<h2>HTML part</h2>
Body of the html part.
"""


def test_markdown_keeps_structure():
    spans = chunk_text(MARKDOWN, "markdown", 40, 0)
    pieces = [(MARKDOWN[s.start : s.end], s.heading) for s in spans]
    code = next(p for p, _ in pieces if p.startswith("```"))
    assert code.endswith("```") and code.count("pip install") == 3  # never split, though over 40 chars
    table = next(p for p, _ in pieces if p.startswith("|"))
    assert table.count("\n") == 2  # the whole table
    assert ("# Guide\nIntro text here. More intro.", "Guide") in pieces  # heading kept with its content
    assert all(not (p.startswith("Run") and h != "Guide > Install") for p, h in pieces)
    assert pieces[-1] == ("Body of the html part.", "Guide > HTML part")  # HTML headings count too
    assert ("<h2>HTML part</h2>", "Guide > HTML part") in pieces  # heading + body exceed 40: own chunk
    # no chunk crosses a heading
    for p, _ in pieces:
        assert p.count("#") <= 2 and not ("Intro" in p and "Install" in p)
    covered = {i for s in spans for i in range(s.start, s.end)}
    assert all(i in covered for i, ch in enumerate(MARKDOWN) if not ch.isspace())


def test_token_sizes_use_token_offsets():
    text = "alpha beta gamma delta epsilon zeta eta theta"
    offsets = [(m.start(), m.end()) for m in __import__("re").finditer(r"\w+", text)]  # one token per word
    spans = chunk_text(text, "fixed", 3, 1, token_offsets=offsets)
    assert [text[s.start : s.end] for s in spans] == [
        "alpha beta gamma",
        "gamma delta epsilon",
        "epsilon zeta eta",
        "eta theta",
    ]
    spans = chunk_text(text, "recursive", 4, 0, token_offsets=offsets)
    assert all(len(text[s.start : s.end].split()) <= 4 for s in spans) and len(spans) == 2


def test_semantic_breaks_where_topics_change():
    import numpy as np

    from rag_core.chunking.chunkers import semantic_breakpoints, sentence_spans

    text = "Cats purr. Cats sleep a lot. Stocks fell today. Markets were down."
    spans = sentence_spans(text)
    vecs = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=float)
    (bps,) = semantic_breakpoints([spans], [vecs], percentile=60)
    assert bps == {spans[2].start}
    pieces = [text[s.start : s.end] for s in chunk_text(text, "semantic", 200, 0, breakpoints=bps)]
    assert pieces == ["Cats purr. Cats sleep a lot.", "Stocks fell today. Markets were down."]
