"""Progress inside a step: concurrent work reports each finished item to whoever listens (the CLI's bars)."""

from rag_core.common.concurrency import map_concurrently
from rag_core.common.progress import listening, report
from rag_sweep.runner.progress_bars import WorkBars


def test_concurrent_work_reports_every_finished_item_once():
    seen = []
    with listening(lambda what, done, total: seen.append((what, done, total))):
        out = map_concurrently(lambda x: x * 2, range(5), 3, what="items doubled")
    assert out == [0, 2, 4, 6, 8]  # in the items' order
    assert seen[0] == ("items doubled", 0, 5)
    assert sorted(done for _, done, _ in seen[1:]) == [1, 2, 3, 4, 5]
    assert {total for _, _, total in seen} == {5}


def test_no_listener_no_report_and_unnamed_work_is_silent():
    assert map_concurrently(lambda x: x, [1, 2], 2, what="items") == [1, 2]  # nobody listening
    seen = []
    with listening(lambda *a: seen.append(a)):
        map_concurrently(lambda x: x, [1, 2], 2)
    assert seen == []


def test_the_cli_draws_a_bar_per_piece_of_work_and_closes_it(capsys):
    bars = WorkBars(enabled=True)
    with listening(bars):
        for done in range(0, 33, 8):
            report("texts embedded", done, 32)
        assert bars.bars == {}  # complete: closed
        report("questions answered", 3, 5)
        report("questions answered", 1, 5)  # the same work in the next step starts a new bar
        assert bars.bars["questions answered"].n == 1
    assert "texts embedded" in capsys.readouterr().err


def test_maps_of_one_kind_at_once_report_their_sum_and_the_next_starts_anew():
    """A batch's configs answered side by side: one bar over all their questions, counting up, not two
    maps' counts in turn; once they end, the next step's map counts from 0 again."""
    import threading

    seen = []
    gate = threading.Barrier(2)

    def slow(x):
        gate.wait(timeout=10) if x == 0 else None  # both maps are open before either finishes its first
        return x

    with listening(lambda what, done, total: seen.append((done, total))):
        maps = [threading.Thread(target=map_concurrently, args=(slow, range(3), 1, "answers")) for _ in "ab"]
        for t in maps:
            t.start()
        for t in maps:
            t.join()
        assert seen[-1] == (6, 6)
        assert [d for d, _ in seen if _ == 6] == sorted(d for d, _ in seen if _ == 6)  # counts up
        seen.clear()
        map_concurrently(lambda x: x, range(2), 1, what="answers")
    assert seen == [(0, 2), (1, 2), (2, 2)]
