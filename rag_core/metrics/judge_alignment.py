"""Aligning the faithfulness judge with people's labels (pure): the labels split into an alignment part and a
held-out part, the worked examples chosen from the alignment part, and the judge's prompt that carries them.

- `split`: seeded and stratified by the human label. Rows whose answer and context are the same once
  normalized (`_same`: case, Unicode forms and spacing aside; whatever their questions) stay in one part (a
  copy on both sides would show the judge a held-out answer), so the held-out part measures an aligned
  judge on answers it never saw.
- `choose_examples`: of the alignment rows, those the base judge got wrong first (then those it could not
  score, then those it got right), balanced between supported and unsupported, at most `max_examples`.
- `aligned_prompt`: the base prompt with the examples, each with the score people gave it, before its
  CONTEXT section; the fields the judge fills stay as they are.
- `leaked`: the held-out rows whose answer a prompt shows as an example's (none, or the alignment saw them).
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections import defaultdict

MIN_ALIGNMENT_LABELS = 10  # MLflow's advice for Judge.align(): at least 10 labelled traces, 50 to 100 better
MAX_EXAMPLES = 8
HEADER = "Answers people graded, as examples (they are not the answer to grade):"


def split(rows: list[dict], labels: list[bool], share: float, seed: int) -> tuple[list[int], list[int]]:
    """(alignment, held_out): row indices, each sorted. Rows with the same answer and context once normalized
    form one group (the judge grades the answer against the context: a question that differs, if only in
    its spacing, does not make it another example), labelled by its first row; within each label the groups are shuffled with `seed` and round(share x
    groups) go to the alignment part, at least one and never all when the label has two groups or more."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"the alignment share must be between 0 and 1, got {share}")
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[(_same(row["answer"]), _same(row.get("context") or ""))].append(i)
    by_label: dict[bool, list[list[int]]] = {True: [], False: []}
    for members in groups.values():
        by_label[labels[members[0]]].append(members)
    rng = random.Random(seed)
    alignment: list[int] = []
    for label in (True, False):  # a fixed order: the same seed draws the same split
        pool = by_label[label]
        rng.shuffle(pool)
        k = int(share * len(pool) + 0.5)
        if len(pool) >= 2:
            k = min(max(k, 1), len(pool) - 1)
        alignment += [i for members in pool[:k] for i in members]
    held_out = sorted(set(range(len(rows))) - set(alignment))
    return sorted(alignment), held_out


def choose_examples(
    labels: list[bool], scores: list[float | None], threshold: float, max_examples: int = MAX_EXAMPLES
) -> list[int]:
    """The indices of the worked examples: per label, the rows the judge disagreed with people on first,
    then those it could not score (None), then those it agreed on, each in row order; half of
    `max_examples` from each label (the other label's share where one has too few), alternating,
    unsupported first."""

    def rank(i: int) -> tuple[int, int]:
        if scores[i] is None:
            return 1, i
        return (0 if (scores[i] >= threshold) != labels[i] else 2), i

    sides = [sorted((i for i in range(len(labels)) if labels[i] == want), key=rank) for want in (False, True)]
    half = max_examples // 2
    take = [min(len(s), half) for s in sides]
    spare = max_examples - sum(take)
    for n, s in enumerate(sides):  # the other label's unused slots
        extra = min(spare, len(s) - take[n])
        take[n] += extra
        spare -= extra
    chosen = [s[:k] for s, k in zip(sides, take, strict=True)]
    out = []
    for j in range(max(take, default=0)):
        out += [c[j] for c in chosen if j < len(c)]
    return out


def _escaped(text: str) -> str:
    """Text placed in a template that is filled with str.format."""
    return text.replace("{", "{{").replace("}", "}}")


def _shown(question: str, answer: str) -> str:
    return _escaped(f"Question: {question}\nAnswer: {answer}\n")


def _example(n: int, row: dict, supported: bool) -> str:
    if supported:
        verdict = "1 (people found every claim in the passages)"
    else:
        verdict = "0 (people found a claim the passages do not state)"
    return (
        f"Example {n}\nPassages:\n{_escaped(row['context'])}\n"
        + _shown(row["question"], row["answer"])
        + f"Score: {verdict}\n"
    )


def aligned_prompt(template: str, examples: list[tuple[dict, bool]]) -> str:
    """`template` with the `examples` ((row, people's label) pairs) before its CONTEXT section (else before
    the line holding its `{context}` field); `template` itself without examples."""
    if not examples:
        return template
    at = template.find("CONTEXT:")
    if at < 0:
        field = template.find("{context}")
        if field < 0:
            raise ValueError("the judge's prompt has no {context} field")
        at = template.rfind("\n", 0, field) + 1
    block = HEADER + "\n\n" + "\n".join(_example(n, r, s) for n, (r, s) in enumerate(examples, 1)) + "\n"
    return template[:at] + block + template[at:]


def _same(text: str) -> str:
    """Text as compared for sameness: Unicode-normalized (NFKC), case-folded, without any whitespace."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).casefold())


_EXAMPLE_ANSWER = re.compile(r"^Answer: (.*?)\nScore: ", re.MULTILINE | re.DOTALL)


def leaked(prompt: str, rows: list[dict]) -> list[int]:
    """The indices of `rows` whose answer the prompt shows as an example's (normalized as `_same`), or
    whose question and answer it shows as they are."""
    shown = {_same(a.replace("{{", "{").replace("}}", "}")) for a in _EXAMPLE_ANSWER.findall(prompt)}
    return [
        i
        for i, r in enumerate(rows)
        if _same(r["answer"]) in shown or _shown(r["question"], r["answer"]) in prompt
    ]
