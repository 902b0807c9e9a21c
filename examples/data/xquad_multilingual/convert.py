"""Draw the xquad_multilingual slice from XQuAD (Artetxe, Ruder and Yogatama 2020; CC BY-SA 4.0).

XQuAD is parallel: the same 48 SQuAD v1.1 dev articles (5 paragraphs each, 240 paragraphs) and 1,190
questions, professionally translated into 11 languages, one answer per question, the same SQuAD question ids
in every language. Its files are SQuAD v1.1 JSON (data[].title, data[].paragraphs[].context / qas[]).

The slice, the same in every language asked for (by position in the files, so the languages hold
translations of each other):

  * question i of N (i = 0 .. N-1) is the first question of paragraph i % 5 of article (i * 48) // N: the
    articles spread over all 48, the paragraph's place in its article varying;
  * its gold document is that paragraph, in the question's language;
  * a distractor: the next paragraph of the same article (the previous one for an article's last paragraph),
    same topic, never another question's gold paragraph (N <= 48 puts each question in its own article).

So the corpus holds 2N documents and the QA set N questions per language.

Output (into OUT_DIR):
  corpus.parquet  : doc_id, title, text   doc_id = xquad-<lang>-<article:02>-<paragraph>; title = the
                                          English SQuAD article title (XQuAD keeps it in every language)
  queries.parquet : query_id, question, answers (list), relevant_doc_ids (list), language
                    query_id = xquad-<lang>-<SQuAD question id>
  LICENSE         : the XQuAD repository's CC-BY-SA4.0.txt, byte for byte
and prints the provenance SOURCE.md records (commit, blob and sha256 of every file read).

Text changes: U+FEFF (byte-order marks some translated contexts carry) removed, surrounding whitespace
stripped; answer offsets dropped. Every answer is checked to occur in its gold paragraph.

Source: a bare git copy of github.com/google-deepmind/xquad (read at HEAD) or a checkout of it.

Usage: python convert.py [--src XQUAD_GIT_DIR] [--langs en,de,...] [--per-lang 24] OUT_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from pathlib import Path

import polars as pl

XQUAD_LANGS = ("ar", "de", "el", "en", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")
# MLQA's languages that XQuAD has (en de es zh ar hi vi), and Thai for its word segmenter
LANGS = ("en", "de", "es", "zh", "th", "ar", "hi", "vi")
PER_LANG = 24
LICENSE = "CC-BY-SA4.0.txt"


class Source:
    """Files of the XQuAD repository: from a git directory at HEAD (bare or not), else from a folder."""

    def __init__(self, src: Path):
        self.git_dir = src / ".git" if (src / ".git").exists() else src if (src / "HEAD").exists() else None
        self.src = src
        self.commit = self._git("rev-parse", "HEAD").decode().strip() if self.git_dir else None

    def _git(self, *args: str) -> bytes:
        cmd = ["git", f"--git-dir={self.git_dir}", *args]
        return subprocess.run(cmd, check=True, capture_output=True).stdout

    def read(self, name: str) -> tuple[bytes, str | None]:
        """The file's bytes and its git blob id (None when read from a plain folder)."""
        if self.git_dir:
            blob = self._git("rev-parse", f"HEAD:{name}").decode().strip()
            return self._git("cat-file", "blob", blob), blob
        return (self.src / name).read_bytes(), None


def clean(s: str) -> str:
    return s.replace("\ufeff", "").strip()


def positions(per_lang: int, n_articles: int, n_paragraphs: int) -> list[tuple[int, int, int]]:
    """(article, gold paragraph, distractor paragraph) of each question."""
    if not 1 <= per_lang <= n_articles:
        raise SystemExit(f"--per-lang must be 1..{n_articles} (one question per article)")
    out = []
    for i in range(per_lang):
        a, p = (i * n_articles) // per_lang, i % n_paragraphs
        out.append((a, p, p + 1 if p + 1 < n_paragraphs else p - 1))
    return out


def convert(src: Source, langs: list[str], per_lang: int) -> tuple[list[dict], list[dict], list[tuple]]:
    docs: list[dict] = []
    queries: list[dict] = []
    provenance = []
    picked = None
    for lang in langs:
        name = f"xquad.{lang}.json"
        raw, blob = src.read(name)
        provenance.append((name, blob, hashlib.sha256(raw).hexdigest()))
        articles = json.loads(raw.decode("utf-8-sig"))["data"]
        n_paragraphs = {len(a["paragraphs"]) for a in articles}
        if len(n_paragraphs) != 1:
            raise SystemExit(f"{name}: articles of {sorted(n_paragraphs)} paragraphs; expected one number")
        chosen = positions(per_lang, len(articles), n_paragraphs.pop())
        ids = [articles[a]["paragraphs"][p]["qas"][0]["id"] for a, p, _ in chosen]
        if picked is None:
            picked = ids
        elif ids != picked:  # XQuAD is parallel; a file that is not would break the slice's premise
            raise SystemExit(f"{name}: its questions at the chosen places differ from {langs[0]}'s")
        for a, p, d in chosen:
            article = articles[a]
            for k in sorted((p, d)):
                text = clean(article["paragraphs"][k]["context"])
                docs.append({"doc_id": f"xquad-{lang}-{a:02d}-{k}", "title": article["title"], "text": text})
            context = clean(article["paragraphs"][p]["context"])
            qa = article["paragraphs"][p]["qas"][0]
            answers = list(dict.fromkeys(clean(x["text"]) for x in qa["answers"]))
            if not answers or not all(x and x in context for x in answers):
                raise SystemExit(f"{name}: {qa['id']}: an answer is empty or not in its paragraph")
            queries.append(
                {
                    "query_id": f"xquad-{lang}-{qa['id']}",
                    "question": clean(qa["question"]),
                    "answers": answers,
                    "relevant_doc_ids": [f"xquad-{lang}-{a:02d}-{p}"],
                    "language": lang,
                }
            )
    return docs, queries, provenance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--src", type=Path, required=True, help="a clone (or git directory) of google-deepmind/xquad")
    ap.add_argument("--langs", default=",".join(LANGS))
    ap.add_argument("--per-lang", type=int, default=PER_LANG)
    args = ap.parse_args()
    langs = [x.strip() for x in args.langs.split(",") if x.strip()]
    if bad := [x for x in langs if x not in XQUAD_LANGS]:
        raise SystemExit(f"not in XQuAD: {bad}; it has {', '.join(XQUAD_LANGS)}")

    src = Source(args.src)
    docs, queries, provenance = convert(src, langs, args.per_lang)
    corpus = pl.DataFrame(docs, schema={"doc_id": pl.String, "title": pl.String, "text": pl.String})
    qa = pl.DataFrame(
        queries,
        schema={
            "query_id": pl.String,
            "question": pl.String,
            "answers": pl.List(pl.String),
            "relevant_doc_ids": pl.List(pl.String),
            "language": pl.String,
        },
    )
    assert corpus["doc_id"].is_unique().all() and qa["query_id"].is_unique().all()
    assert set(qa["relevant_doc_ids"].explode()) <= set(corpus["doc_id"])

    args.out.mkdir(parents=True, exist_ok=True)
    corpus.write_parquet(args.out / "corpus.parquet", compression="zstd", statistics=False)
    qa.write_parquet(args.out / "queries.parquet", compression="zstd", statistics=False)
    license_text, license_blob = src.read(LICENSE)
    (args.out / "LICENSE").write_bytes(license_text)
    provenance.append((LICENSE, license_blob, hashlib.sha256(license_text).hexdigest()))

    print(f"commit {src.commit}")
    for name, blob, sha in provenance:
        print(f"{name}  blob {blob}  sha256 {sha}")
    print(f"{corpus.height} documents, {qa.height} questions ({args.per_lang} in each of {', '.join(langs)})")


if __name__ == "__main__":
    main()
