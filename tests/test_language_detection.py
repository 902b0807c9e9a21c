"""data.language: auto detects a text's language from the script that writes most of its words, over the
whole text (rag_core/metrics/languages.py, `detect`): an English head ("Source: Wikipedia", a name, a page's
navigation) does not make a Chinese answer or document English, a few Chinese characters do not make an
English text Chinese, and Japanese (kana with kanji), Korean, Thai, Arabic and Cyrillic texts carrying Latin
words keep their language. The expected scores are MLQA's rules for Chinese worked by hand."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import polars as pl
import pytest

from rag_core.data.datasets import DataWarning, load_qa
from rag_core.metrics.generation import exact_match, token_f1
from rag_core.metrics.languages import CONTEXT_CHARS, answer_tokens, detect, scoring_language


def _load(tmp_path: Path, rows: list[dict], corpus: pl.DataFrame | None = None) -> dict[str, dict]:
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), "utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        qa = load_qa(path, corpus=corpus, detect=True)
    return {r["query_id"]: r for r in qa.to_dicts()}


def test_a_chinese_answer_behind_english_boilerplate_is_scored_as_chinese(tmp_path):
    """Its gold answer starts with its source, in English, and the question is English (cross-lingual), so
    only the answer says the language. It was unsure (py3langid: 0.297, below 0.3), so the question decided:
    English, F1 0.0."""
    gold, prediction = "Source: Wikipedia 卡洛琳堡", "卡洛琳堡宫"
    row = {"query_id": "q1", "question": "Which castle is it?", "answers": [gold], "relevant_doc_ids": []}
    loaded = _load(tmp_path, [row])["q1"]
    # two Latin words ("Source", "Wikipedia") against four Han characters, a word each: Chinese
    assert loaded["language"] == "zh" and detect(gold)[0] == "zh"
    # MLQA's rules for Chinese: lowercased, punctuation (the colon) removed, no articles, each Han character a
    # token and the rest cut at whitespace:
    #   gold       -> source wikipedia 卡 洛 琳 堡   (6 tokens)
    #   prediction -> 卡 洛 琳 堡 宫                 (5 tokens)
    # 4 in common: precision 4/5, recall 4/6, F1 = 2 * 4 / (5 + 6) = 8/11 = 0.727
    assert answer_tokens(gold, "zh") == ["source", "wikipedia", "卡", "洛", "琳", "堡"]
    assert answer_tokens(prediction, "zh") == ["卡", "洛", "琳", "堡", "宫"]
    assert token_f1(prediction, loaded["answers"], loaded["language"]) == pytest.approx(8 / 11)
    assert exact_match(prediction, loaded["answers"], loaded["language"]) == 0.0
    # scored as English (whitespace tokens: "卡洛琳堡" and "卡洛琳堡宫" share none) it was 0
    assert token_f1(prediction, loaded["answers"], "en") == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "Source: Wikipedia 牛顿",
        "Isaac Newton 牛顿",
        "From Wikipedia: 长城",  # py3langid named Fulfulde
        "Source: Wikipedia, the free encyclopedia. 北京大学图书馆始建于1898年。",
        "Barack Obama 总统",  # a tie goes to the script that is not Latin
    ],
)
def test_an_english_head_before_chinese_is_chinese(text):
    assert detect(text)[0] == "zh"


def test_a_chinese_document_behind_a_long_english_head_is_chinese(tmp_path):
    """A scraped page: its English navigation and cookie notice run past the 2,000 characters the detector
    read of each gold document; the Chinese article after them writes most of its words."""
    head = (
        "Skip to main content. Home | News | Sport | Weather. We use cookies to improve your experience. "
        * 25
    )
    body = "卡洛琳堡是一座位于德国的城堡，始建于十八世纪，后来成为公爵的夏季行宫。" * 40
    assert 2000 < len(head) < CONTEXT_CHARS
    corpus = pl.DataFrame({"doc_id": ["d1"], "text": [head + body]})
    row = {"query_id": "q1", "question": "Which castle?", "answers": ["卡洛琳堡"], "relevant_doc_ids": ["d1"]}
    loaded = _load(tmp_path, [row], corpus)["q1"]
    assert loaded["language"] == "zh"
    # gold 卡 洛 琳 堡 (4 tokens), prediction 卡 洛 琳 堡 宫 (5): 4 in common, F1 = 2 * 4 / (4 + 5) = 8/9
    assert token_f1("卡洛琳堡宫", loaded["answers"], loaded["language"]) == pytest.approx(8 / 9)


@pytest.mark.parametrize(
    "text",
    [
        "The Great Wall (长城) was built over many centuries by several Chinese dynasties.",
        "Peking University (北京大学) is a public research university in Beijing.",
        "The Great Wall of China is a series of fortifications, 长城",
        "The Thai greeting สวัสดี is used to say both hello and goodbye in everyday conversation.",
    ],
)
def test_a_mostly_english_text_with_a_few_other_characters_stays_english(text):
    assert detect(text)[0] == "en"


def test_a_mostly_english_context_scores_its_answers_as_english():
    context = "The Great Wall (长城) was built over many centuries by several Chinese dynasties."
    language = scoring_language(["the Great Wall"], [context], "What was built?")
    assert language == "en"
    # English articles go: "great wall" against "great wall"
    assert exact_match("Great Wall", ["the Great Wall"], language) == 1.0


@pytest.mark.parametrize(
    ("text", "language"),
    [
        # kana with kanji: Japanese, an English head or not (py3langid read Chinese behind the head)
        ("Source: Wikipedia 東京大学の歴史", "ja"),
        ("Tokyo Tower 東京タワー", "ja"),
        ("東京タワーは東京都港区芝公園にある電波塔である。", "ja"),
        ("Wikipedia 日本国憲法第九条は戦争の放棄を定める", "ja"),
        # a Chinese sentence quoting a Japanese title: its few kana leave it Chinese
        (
            "宫崎骏执导的动画电影《となりのトトロ》于1988年在日本上映，讲述了两姐妹与森林精灵相遇的故事。",
            "zh",
        ),
        # Hangul with Hanja or an English head: Korean
        ("대한민국(大韓民國)", "ko"),
        ("Source: Wikipedia 대한민국의 수도는 서울이다", "ko"),
        # Thai (no spaces between its words) around English product names
        ("Apple เปิดตัว iPhone รุ่นใหม่ในวันนี้", "th"),
        ("iPhone 15 Pro Max ราคาในประเทศไทย", "th"),
        # scripts shared by several languages: py3langid reads their letters alone
        ("Source: Wikipedia القاهرة هي عاصمة جمهورية مصر العربية", "ar"),
        ("Source: Wikipedia Москва — столица России", "ru"),
    ],
)
def test_a_mixed_text_is_detected_by_its_dominant_script(text, language):
    assert detect(text)[0] == language


def test_a_pure_text_is_detected_as_before():
    """One script: py3langid reads the text as it is (Latin, Arabic, ...) or the script decides (Han)."""
    assert detect("Who wrote the play Hamlet, and in which year was it first performed?")[0] == "en"
    assert detect("¿Quién escribió la obra Hamlet y en qué año se representó por primera vez?")[0] == "es"
    assert detect("北京大学是中国第一所国立综合性大学。")[0] == "zh"
    # nothing to read: unsure, scored without a language
    assert detect("1998")[0] is None
    assert detect("When?")[0] is None
