"""Answers scored in their language: MLQA's normalization (rag_core/metrics/languages.py) equals the MLQA
script's own exact match and F1 on every reference question (tests/data/mlqa_reference.jsonl, constructed)
and on real answers to the XQuAD slice's questions (tests/data/xquad_mlqa_reference.jsonl); Japanese and
Thai are cut into words and Korean into characters; without a language the SQuAD scores are unchanged; the QA
set's language reaches the evaluation and its fingerprint (with the segmenter's version)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import unicodedata
import warnings
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import polars as pl
import pytest

from rag_core.data.datasets import DatasetError, DataWarning, load_qa
from rag_core.metrics import evaluate_queries
from rag_core.metrics.generation import bleu, exact_match, faithfulness, rouge_l, token_f1
from rag_core.metrics.languages import MLQA, answer_tokens

REFERENCE = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "mlqa_reference.jsonl").read_text("utf-8").splitlines()
]


@pytest.mark.parametrize("row", REFERENCE, ids=[f"{r['language']}-{i}" for i, r in enumerate(REFERENCE)])
def test_each_question_scores_as_the_mlqa_script_scores_it(row):
    lang = row["language"]
    assert exact_match(row["prediction"], row["answers"], lang) == row["exact_match"]
    assert token_f1(row["prediction"], row["answers"], lang) == row["f1"]


def test_the_reference_covers_every_language_mlqa_has_a_rule_for():
    assert {r["language"] for r in REFERENCE} == set(MLQA)
    # and both outcomes of each metric, partial F1s included
    assert {r["exact_match"] for r in REFERENCE} == {0.0, 1.0}
    assert any(0 < r["f1"] < 1 for r in REFERENCE if r["language"] == "zh")


XQUAD = Path(__file__).resolve().parents[1] / "examples" / "data" / "xquad_multilingual"
XQUAD_SCORED = Path(__file__).parent / "data" / "xquad_mlqa_reference.jsonl"
XQUAD_REFERENCE = [json.loads(line) for line in XQUAD_SCORED.read_text("utf-8").splitlines()]


def test_answers_to_real_questions_score_as_the_mlqa_script_scores_them():
    """The XQuAD slice's questions in MLQA's seven languages, answered by the multilingual example sweep's
    extractive reader and by near misses, scored by MLQA's script (tests/data/README.md): equal, row by row."""
    wrong = []
    for r in XQUAD_REFERENCE:
        em = exact_match(r["prediction"], r["answers"], r["language"])
        f1 = token_f1(r["prediction"], r["answers"], r["language"])
        if (em, f1) != (r["exact_match"], r["f1"]):
            wrong.append((r["query_id"], r["prediction"], (em, f1), (r["exact_match"], r["f1"])))
    assert not wrong, wrong[:5]
    assert len(XQUAD_REFERENCE) > 400


def test_the_xquad_reference_has_partial_scores_in_chinese_and_the_other_languages():
    qa = pl.read_parquet(XQUAD / "queries.parquet")
    assert {r["query_id"] for r in XQUAD_REFERENCE} <= set(qa["query_id"])
    assert {r["language"] for r in XQUAD_REFERENCE} == set(MLQA)
    assert {r["exact_match"] for r in XQUAD_REFERENCE} == {0.0, 1.0}
    partial = {r["language"] for r in XQUAD_REFERENCE if 0 < r["f1"] < 1}
    assert partial == set(MLQA)  # Chinese (per character) and every other language
    # the sweep's own answers are among them, not only constructed near misses
    assert any(0 < r["f1"] < 1 for r in XQUAD_REFERENCE if r["source"].startswith("extractive"))


def test_near_misses_to_the_xquad_thai_questions_earn_partial_credit():
    """MLQA has no Thai. Each Thai question's gold answer with the text touching it on each side in its gold
    paragraph (to the next space) is a near miss: cut into words, it earns part of the credit."""
    qa = pl.read_parquet(XQUAD / "queries.parquet").filter(pl.col("language") == "th")
    text = dict(pl.read_parquet(XQUAD / "corpus.parquet").select("doc_id", "text").iter_rows())
    near = [
        (re.search(rf"\S*\s*{re.escape(gold)}\s*\S*", text[docs[0]]).group(), gold)
        for gold, docs in zip(qa["answers"].list.first(), qa["relevant_doc_ids"], strict=True)
    ]
    assert len(near) == 24
    assert all(exact_match(pred, [gold], "th") == 0.0 for pred, gold in near)
    f1 = [token_f1(pred, [gold], "th") for pred, gold in near]
    assert sum(0 < x < 1 for x in f1) >= len(near) // 2
    # an answer written without spaces around it: whitespace tokens see no overlap, Thai words do
    assert any(token_f1(pred, [gold]) == 0.0 < x < 1 for (pred, gold), x in zip(near, f1, strict=True))


def test_the_multilingual_example_sweep_reads_a_language_per_question():
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import load_sweep

    sweep = load_sweep(Path(__file__).resolve().parents[1] / "examples" / "sweeps" / "multilingual.yaml")
    assert len(Plan.resolve(sweep).config_keys) == 2
    corpus = pl.read_parquet(sweep.corpus_path)
    qa = load_qa(sweep.qa_path, known_doc_ids=set(corpus["doc_id"]))
    counts = dict(qa.group_by("language").len().iter_rows())
    assert counts == {lang: 24 for lang in ("en", "de", "es", "zh", "th", "ar", "hi", "vi")}
    # the same questions (SQuAD ids) in every language, each with its own paragraph in its own language
    ids = qa.with_columns(pl.col("query_id").str.split("-").list.get(2).alias("squad"))
    assert ids.group_by("squad").len()["len"].to_list() == [8] * 24
    assert all(
        d.split("-")[1] == lang
        for docs, lang in zip(qa["relevant_doc_ids"], qa["language"], strict=True)
        for d in docs
    )


def test_without_a_language_the_squad_scores_are_unchanged():
    # SQuAD's script strips ASCII punctuation only: curly quotes stay part of the word
    assert exact_match("“Paris”", ["Paris"]) == 0.0 and exact_match("“Paris”", ["Paris"], "en") == 1.0
    # a Chinese near-miss is one whitespace token: F1 0 in SQuAD's terms, per character in MLQA's
    assert token_f1("北京", ["北京大学"]) == 0.0
    assert token_f1("北京", ["北京大学"], "zh") == pytest.approx(2 / 3)
    assert faithfulness("北京大学", ["他在北京工作"]) == 0.0
    assert faithfulness("北京大学", ["他在北京工作"], "zh") == 0.5


def test_a_language_mlqa_has_no_rule_for_is_normalized_without_articles_by_whitespace():
    assert answer_tokens("Le «Petit» Prince!", "fr") == ["le", "petit", "prince"]


def _qa_file(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), "utf-8")
    return path


def _row(qid: str, answers: list[str], **extra) -> dict:
    # a question of its own per row: rows asking the same question are folded into one
    return {"query_id": qid, "question": f"{qid}?", "answers": answers, "relevant_doc_ids": ["d1"], **extra}


def test_the_qa_set_keeps_a_language_per_question_and_refuses_a_bad_one(tmp_path):
    qa = load_qa(_qa_file(tmp_path, [_row("q1", ["北京"], language="zh-CN"), _row("q2", ["Paris"])]))
    assert qa["language"].to_list() == ["zh", None]
    assert "language" not in load_qa(_qa_file(tmp_path, [_row("q1", ["a b"])])).columns  # none: no column
    with pytest.raises(
        DatasetError, match=r"qa.jsonl: line 2: field 'language': 'chinese!' is not a language"
    ):
        load_qa(_qa_file(tmp_path, [_row("q1", ["x"]), _row("q2", ["y"], language="chinese!")]))


def test_a_gold_answer_empty_once_normalized_in_its_language_is_dropped_and_counted(tmp_path):
    rows = [_row("q1", ["。", "北京"], language="zh"), _row("q2", ["。"])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qa = load_qa(_qa_file(tmp_path, rows))
    # Chinese: MLQA strips the ideographic full stop, so "。" would match an empty answer; SQuAD keeps it
    assert qa["answers"].to_list() == [["北京"], ["。"]]
    assert any(issubclass(w.category, DataWarning) and "1 gold answer(s)" in str(w.message) for w in caught)


def test_the_evaluation_scores_each_question_in_its_language():
    qa = pl.DataFrame(
        {
            "query_id": ["zh", "default"],
            "question": ["?", "?"],
            "answers": [["北京大学"], ["北京大学"]],
            "relevant_doc_ids": [["d1"], ["d1"]],
            "language": ["zh", None],
        }
    )
    ret = pl.DataFrame(
        {
            "query_id": ["zh", "default"],
            "chunk_ids": [["d1#0"], ["d1#0"]],
            "doc_ids": [["d1"], ["d1"]],
            "texts": [["北京"], ["北京"]],
            "latency_ms": [1.0, 1.0],
        }
    )
    ans = pl.DataFrame(
        {
            "query_id": ["zh", "default"],
            "answer": ["北京", "北京"],
            "error": [None, None],
            "latency_ms": [1.0, 1.0],
        }
    )
    per = evaluate_queries(qa, ret, ans, 1).sort("query_id")
    assert per["token_f1"].to_list() == [0.0, pytest.approx(2 / 3)]  # "default" (SQuAD) first, then "zh"
    # the set's language scores the questions that name none
    per = evaluate_queries(qa, ret, ans, 1, language="zh").sort("query_id")
    assert per["token_f1"].to_list() == [pytest.approx(2 / 3), pytest.approx(2 / 3)]


def test_a_named_language_joins_the_evaluations_fingerprints_and_nothing_upstream(tmp_path):
    from rag_assets.orchestration.plans import load_plan

    data = {"corpus": tmp_path / "c.parquet", "qa": tmp_path / "q.parquet"}
    fps = {}
    for language in (None, "zh", "de", "ja"):
        spec = _one_config_sweep(tmp_path, data, language)
        fps[language] = load_plan(spec, "lancedb").fingerprints({"corpus": "c", "qa_set": "q"})
    for language in ("zh", "de", "ja"):
        changed = {stage for (stage, _), fp in fps[None].items() if fps[language][(stage, _)] != fp}
        assert changed == {"evaluations"}
    assert fps["zh"] != fps["de"]


def test_a_language_without_a_rule_of_its_own_is_a_counted_warning_and_a_bad_set_language_an_error(tmp_path):
    from rag_core.planning.spec import SpecError, load_sweep
    from tests.conftest import write_sweep

    # Swahili has no rule of its own: counted; Japanese, Thai and Korean have a segmenter: not
    with pytest.warns(
        DataWarning,
        match=r"2 question\(s\) in a language with no answer normalization of its own \(sw \(2\);",
    ):
        load_qa(
            _qa_file(
                tmp_path,
                [
                    _row("q1", ["東京"], language="ja"),
                    _row("q2", ["ประเทศไทย"], language="th"),
                    _row("q3", ["서울"], language="ko"),
                    _row("q4", ["Nairobi"], language="sw"),
                    _row("q5", ["Dodoma"], language="sw-TZ"),
                    _row("q6", ["y"]),
                ],
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a set in the segmented languages alone loads without a warning
        load_qa(
            _qa_file(tmp_path, [_row("q1", ["東京"], language="ja"), _row("q2", ["서울"], language="ko")])
        )
    spec = write_sweep(
        tmp_path / "s.yaml",
        {"corpus": tmp_path / "c.parquet", "qa": tmp_path / "q.parquet"},
        chunking={"method": "paragraph", "chunk_size": 512, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 2},
    )
    spec.write_text(spec.read_text().replace("data:\n", "data:\n  language: Chinese Simplified\n", 1))
    with pytest.raises(SpecError, match=r"data.language.*'Chinese Simplified' is not a language tag"):
        load_sweep(spec)


def test_a_qa_set_in_several_languages_gets_a_score_per_language():
    from rag_core.decision.leaderboard import terminal_columns, to_terminal
    from rag_core.evaluation.evaluate import language_slices

    qa = pl.DataFrame({"query_id": ["a", "b", "c"], "language": ["zh", "zh", None]})
    per = pl.DataFrame(
        {"query_id": ["a", "b", "c"], "token_f1": [1.0, 0.5, 0.25], "recall_at_k": [None, None, 1.0]}
    )
    weights = {"token_f1": 0.5, "recall_at_k": 0.5}
    slices = language_slices(per, qa, weights, language="en")
    # zh: recall undefined on both questions, so its weight is left out: the F1 mean alone
    assert slices == {
        "score_lang_en": 0.5 * 0.25 + 0.5 * 1.0,
        "n_questions_lang_en": 1.0,
        "score_lang_zh": 0.75,
        "n_questions_lang_zh": 2.0,
    }
    assert (
        language_slices(per, qa.with_columns(pl.lit("zh").alias("language")), weights) == {}
    )  # one language
    assert language_slices(per, qa.drop("language"), weights) == {}
    board = pl.DataFrame(
        {
            "rank": [1],
            "config_key": ["k"],
            "overall_score": [0.6],
            "overall_ci95": ["0.5–0.7"],
            **{k: [v] for k, v in slices.items()},
        }
    )
    cols = terminal_columns(board)
    assert cols[cols.index("overall_ci95") + 1 :][:2] == ["score_lang_en", "score_lang_zh"]
    assert "score zh" in to_terminal(board, cols)


def test_bleu_and_rouge_l_read_a_named_languages_tokens():
    # rouge-score keeps [a-z0-9] tokens only: a Chinese answer has none, ROUGE-L 0 whatever it says
    assert rouge_l("北京", ["北京大学"]) == 0.0
    assert rouge_l("北京", ["北京大学"], "zh") == pytest.approx(2 / 3)  # LCS 2 of 2 and 4 characters
    assert rouge_l("the cat sat", ["a cat sat"], "en") == 1.0  # the articles go, as for F1
    assert bleu("北京大学", ["北京大学"], "zh") == pytest.approx(1.0)
    assert bleu("北京大学", ["北京大学"]) == pytest.approx(1.0) and bleu("北京", ["北京大学"], "zh") < 1.0
    # without a language both are what they were (13a and rouge-score's own tokenizer)
    assert rouge_l("The cat sat.", ["a cat sat"]) == pytest.approx(2 / 3)  # LCS cat sat; articles kept


QUESTIONS = {
    "en": "what is the population of the city where the band was formed",
    "zh": "谁写了哈姆雷特？",
    "de": "Wer schrieb das Drama Hamlet?",
    "es": "¿Quién escribió Hamlet?",
    "ar": "من كتب هاملت؟",
    "hi": "हेमलेट किसने लिखा?",
    "vi": "Ai đã viết Hamlet?",
    "ja": "ハムレットを書いたのは誰ですか？",
}


def test_auto_detects_each_questions_language_and_scores_its_answers_so(tmp_path):
    rows = [
        {
            "query_id": f"q-{code}",
            "question": q,
            "answers": ["北京大学" if code == "zh" else "x"],
            "relevant_doc_ids": ["d1"],
        }
        for code, q in QUESTIONS.items()
    ]
    rows.append({**rows[0], "query_id": "q-given", "question": "When?", "language": "fr"})  # its own wins
    # the answer and the question say little (en at 0.09): unsure, not used
    rows.append({**rows[0], "query_id": "q-short", "question": "When?", "answers": ["x"]})
    file = _qa_file(tmp_path, rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qa = load_qa(file, detect=True)
    assert dict(zip(qa["query_id"], qa["language"], strict=True)) == {
        **{f"q-{code}": code for code in QUESTIONS},
        "q-given": "fr",
        "q-short": None,
    }
    said = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert any("else the question's) for 9 question(s): " in m and "unsure 1" in m for m in said), said
    # the Chinese question's answer is scored per character: a near miss earns partial credit
    zh = qa.filter(pl.col("query_id") == "q-zh").row(0, named=True)
    assert token_f1("北京", zh["answers"], zh["language"]) == pytest.approx(2 / 3)
    assert token_f1("北京", zh["answers"], None) == 0.0  # SQuAD's whitespace tokens: one token each


def test_auto_scores_a_cross_lingual_set_in_the_language_of_its_answers_and_context(tmp_path):
    """MLQA's cross-lingual sets ask in one language about a context in another, and score in the
    context's. The XQuAD slice is parallel: each English question, with the Chinese (and the German ...)
    gold answers and document of the same XQuAD id, is such a question. Detected from the question, an
    English question with Chinese answers was scored as English (F1 0.0 where MLQA gives 0.727)."""
    english = {
        r["query_id"].split("-", 2)[2]: r["question"]
        for r in pl.read_parquet(XQUAD / "queries.parquet").filter(pl.col("language") == "en").to_dicts()
    }
    corpus = pl.read_parquet(XQUAD / "corpus.parquet")
    qa = pl.read_parquet(XQUAD / "queries.parquet").filter(pl.col("language") != "en")
    rows = [
        {**r, "question": english[r["query_id"].split("-", 2)[2]], "language": None}
        for r in qa.drop("language").to_dicts()
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        loaded = load_qa(_qa_file(tmp_path, rows), corpus=corpus, detect=True)
    found = dict(zip(loaded["query_id"], loaded["language"], strict=True))
    want = dict(zip(qa["query_id"], qa["language"], strict=True))
    assert found == want  # every question: the language of its answers and context, not English
    # and scored as MLQA's script scores the answers in the context's language, row by row
    scored = [r for r in XQUAD_REFERENCE if r["query_id"] in found]
    assert {r["language"] for r in scored} == set(MLQA) - {"en"}
    for r in scored:
        assert token_f1(r["prediction"], r["answers"], found[r["query_id"]]) == r["f1"], r
        assert exact_match(r["prediction"], r["answers"], found[r["query_id"]]) == r["exact_match"], r


def test_auto_joins_the_qa_snapshots_fingerprint(tmp_path):
    from rag_assets.orchestration.plans import load_plan
    from rag_core.planning.inputs import snapshot_fingerprints

    data = {"corpus": tmp_path / "c.parquet", "qa": tmp_path / "q.parquet"}
    pl.DataFrame({"doc_id": ["d1"], "text": ["t"]}).write_parquet(data["corpus"])
    pl.DataFrame(
        {"query_id": ["q1"], "question": ["?"], "answers": [["a"]], "relevant_doc_ids": [["d1"]]}
    ).write_parquet(data["qa"])
    fps = {}
    for language in (None, "auto"):
        spec = _one_config_sweep(tmp_path, data, language)
        sweep = load_plan(spec, "lancedb").sweep
        fps[language] = snapshot_fingerprints(sweep)
    assert sweep.detect_language and sweep.language is None
    assert fps[None]["corpus"] == fps["auto"]["corpus"] and fps[None]["qa_set"] != fps["auto"]["qa_set"]


# ---- Japanese, Thai, Korean: a word segmenter (ja, th) or characters (ko, as KorQuAD) -------------------

SEGMENTATIONS = [
    # UniDic's short units (SudachiPy, mode A): the particles and the auxiliary verb apart, 「」、。 gone
    (
        "ja",
        "「ハムレット」を書いたのは、シェイクスピアです。",
        ["ハムレット", "を", "書い", "た", "の", "は", "シェイクスピア", "です"],
    ),
    ("ja", "徳川家康は江戸幕府を開いた", ["徳川", "家康", "は", "江戸", "幕府", "を", "開い", "た"]),
    # newmm: Bangkok's full name and "capital city" are words of its dictionary; a space or a zero-width
    # space is a break, "!" goes
    (
        "th",
        "กรุงเทพมหานคร เป็นเมืองหลวงของประเทศไทย!",
        ["กรุงเทพมหานคร", "เป็น", "เมืองหลวง", "ของ", "ประเทศ", "ไทย"],
    ),
    ("th", "วิลเลียม\u200bเชกสเปียร์", ["วิลเลียม", "เชกสเปียร์"]),
    # KorQuAD: syllables, spaces and punctuation dropped; Latin letters lowercased one by one
    ("ko", "서울 특별시.", ["서", "울", "특", "별", "시"]),
    ("ko", "K-POP 가수", ["k", "p", "o", "p", "가", "수"]),
]


@pytest.mark.parametrize("language, text, expected", SEGMENTATIONS)
def test_japanese_and_thai_are_cut_into_words_and_korean_into_characters(language, text, expected):
    got = answer_tokens(text, language)
    assert got == expected
    assert all(not ch.isspace() and not unicodedata.category(ch).startswith("P") for t in got for ch in t)
    assert answer_tokens(text, "sw") != expected  # what whitespace tokens made of it


@pytest.mark.parametrize(
    "language, answer, gold, f1",
    [
        ("ja", "東京大学", "東京大学医学部", 2 / 3),  # 東京 大学 of 東京 大学 医学 部
        ("th", "เมืองหลวง", "เมืองหลวงของประเทศไทย", 0.4),  # "capital" of capital|of|country|Thai
        ("ko", "서울", "서울특별시", 4 / 7),  # 2 of 5 syllables
    ],
)
def test_a_near_miss_earns_partial_credit_where_whitespace_tokens_gave_none(language, answer, gold, f1):
    assert token_f1(answer, [gold], language) == pytest.approx(f1)
    assert token_f1(answer, [gold], "sw") == 0.0  # one token each side, as before segmenters
    assert token_f1(answer, [gold]) == 0.0  # and as SQuAD's script
    assert rouge_l(answer, [gold], language) == pytest.approx(f1)  # the LCS is the answer, in order
    assert faithfulness(answer, [gold + "。"], language) == 1.0 and faithfulness(answer, [gold], "sw") == 0.0


@pytest.mark.parametrize(
    "language, answer, gold",
    [
        ("ja", "東京 大学", "「東京大学」。"),
        ("th", "ประเทศ ไทย", "ประเทศไทย!"),
        ("ko", "서울 특별시", "『서울특별시』."),
    ],
)
def test_exact_match_ignores_punctuation_and_spacing(language, answer, gold):
    assert exact_match(answer, [gold], language) == 1.0
    assert exact_match(answer, [gold], "sw") == 0.0  # two whitespace tokens against one


def test_a_different_answer_is_still_wrong_in_a_segmented_language():
    assert exact_match("京都大学", ["東京大学"], "ja") == 0.0
    assert token_f1("京都大学", ["東京大学"], "ja") == pytest.approx(0.5)  # 大学 alone in common
    assert exact_match("เชียงใหม่", ["กรุงเทพ"], "th") == 0.0 and token_f1("เชียงใหม่", ["กรุงเทพ"], "th") == 0.0
    assert exact_match("부산", ["서울"], "ko") == 0.0


def test_bleu_reads_japanese_and_thai_words():
    # intl's tokens: a sentence without spaces is one word, so a sentence one word off scored 0
    for language, answer, gold in [
        ("ja", "東京大学は日本の国立大学です", "東京大学は日本の私立大学です"),
        ("th", "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย", "กรุงเทพมหานครเป็นเมืองหลวงของประเทศลาว"),
    ]:
        assert bleu(answer, [gold], "sw") == 0.0
        assert 0.3 < bleu(answer, [gold], language) < 1.0
        assert bleu(gold, [gold], language) == pytest.approx(1.0)


def test_a_context_longer_than_sudachis_limit_is_cut_not_refused():
    # SudachiPy refuses one input over 49,149 bytes: a long context (faithfulness reads them all) is cut
    context = "東京大学は日本の国立大学です。" * 4000  # 180,000 bytes
    assert faithfulness("国立大学", [context], "ja") == 1.0
    assert answer_tokens("東" * 20_000, "ja")  # no sentence end at all: cut at a fixed length


def test_segmenting_gives_the_same_tokens_every_time_and_in_every_thread():
    # a SudachiPy tokenizer refuses a call while another thread's is under way: one per thread
    texts = [(text, language) for language, text, _ in SEGMENTATIONS]
    texts.append(("東京大学は日本の国立大学です。" * 50, "ja"))
    first = [answer_tokens(text, language) for text, language in texts]
    with ThreadPoolExecutor(4) as pool:
        again = list(pool.map(lambda tl: answer_tokens(*tl), texts * 25))
    assert again == first * 25


@pytest.mark.extra("japanese", "thai")
def test_importing_the_module_loads_no_segmenter():
    code = (
        "import sys, rag_core.metrics.languages as m; "
        "print(sorted({'sudachipy', 'pythainlp'} & set(sys.modules)), m.segment('東京', 'ja'), "
        "sorted({'sudachipy', 'pythainlp'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "['東京']", "['sudachipy']"]


def test_a_segmenter_joins_its_languages_evaluation_fingerprint_and_no_other(tmp_path, monkeypatch):
    from rag_assets.orchestration.plans import load_plan
    from rag_core.metrics import languages

    data = {"corpus": tmp_path / "c.parquet", "qa": tmp_path / "q.parquet"}

    def evaluation(language):
        spec = _one_config_sweep(tmp_path, data, language)
        plan = load_plan(spec, "lancedb")
        (partition,) = plan.partitions["evaluations"].values()
        fps = plan.fingerprints({"corpus": "c", "qa_set": "q"})
        return fps[("evaluations", partition.key)], partition.own

    codes = (None, "en", "zh", "ja", "th", "ko")
    before = {code: evaluation(code) for code in codes}
    assert before["ja"][1]["segmenter"] == (
        f"sudachipy=={version('sudachipy')} + sudachidict-small=={version('sudachidict-small')} (mode A)"
    )
    assert before["th"][1]["segmenter"] == f"pythainlp=={version('pythainlp')} (newmm)"
    assert "segmenter" in before["ko"][1] and "segmenter" not in before["en"][1]
    # another version of every package: the Japanese and Thai evaluations are made again, no other
    monkeypatch.setattr(languages, "version", lambda package: "0.0.1")
    languages.segmenter.cache_clear()
    try:
        after = {code: evaluation(code) for code in codes}
    finally:
        languages.segmenter.cache_clear()
    assert {code for code in codes if after[code][0] != before[code][0]} == {"ja", "th"}
    assert after["ja"][1]["segmenter"].startswith("sudachipy==0.0.1 ")


def test_the_extractive_reader_keeps_a_word_whole_with_its_vowel_signs():
    """Python's \\w leaves out combining marks: a Hindi or Thai word was cut at each vowel sign, so the reader
    answered with pieces of words (and scored 0 in those languages)."""
    from rag_core.generation.generate import extractive_answer

    hindi = "भारत की राजधानी नई दिल्ली है"
    assert extractive_answer("भारत की राजधानी क्या है?", [hindi]) == "नई दिल्ली"
    thai = "เมืองหลวง ของ ประเทศไทย คือ กรุงเทพมหานคร"
    assert extractive_answer("เมืองหลวง ของ ประเทศไทย คือ อะไร", [thai]) == "กรุงเทพมหานคร"
    # English unchanged
    assert (
        extractive_answer("Which city is the capital of France?", ["Paris is the capital of France."])
        == "Paris"
    )


def _one_config_sweep(tmp_path: Path, data: dict, language: str | None) -> Path:
    """A one-config sweep file over `data` naming `language` (data.language; None names none)."""
    from tests.conftest import write_sweep

    spec = write_sweep(
        tmp_path / f"{language}.yaml",
        data,
        chunking={"method": "paragraph", "chunk_size": 512, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 2},
    )
    if language:
        spec.write_text(spec.read_text().replace("data:\n", f"data:\n  language: {language}\n", 1))
    return spec
