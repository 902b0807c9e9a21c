"""Progress of a sweep run on the terminal: the steps bar, and one bar per long piece of work inside the
current step (rag_core/common/progress.py)."""

from __future__ import annotations

import sys

from tqdm import tqdm

STEPS_BAR = "{desc}step {n_fmt}/{total_fmt} [{elapsed}]"  # tqdm ends a desc with ": "


class WorkBars:
    """The progress listener of a run: one bar per long piece of work inside the current step (texts
    embedded, questions answered), under the steps bar, gone when it completes."""

    def __init__(self, enabled: bool):
        self.enabled, self.bars = enabled, {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        bar = self.bars.get(what)
        if bar is not None and done < bar.n:  # the same work in a next step
            bar.close()
            bar = None
        if bar is None:
            if done >= total:
                return
            bar = self.bars[what] = tqdm(  # under the steps bar; several when steps run at once
                total=total,
                desc=f"  {what}",
                position=1 + len(self.bars),
                leave=False,
                file=sys.stderr,
                dynamic_ncols=True,
            )
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self.bars[what]


def steps_bar(total: int | None, enabled: bool, **options) -> tqdm:
    return tqdm(total=total, bar_format=STEPS_BAR, disable=not enabled, file=sys.stderr, **options)
