"""Predicted round sizes (orchestrator.engine.selection.round_sizes): what each candidate's evidence
says it still needs, within [smallest, batch]; and the look-ahead the scheduler spends."""

import numpy as np

from certsel.orchestrator.results.records import CandidateRecord, Status
from certsel.orchestrator.engine.selection import recent_growth, round_sizes
from certsel.orchestrator.engine.session import SelectionSession
from certsel.policies.procedures import get_procedure


def _record(name, index, path):
    return CandidateRecord(name=name, index=index, objective=None, t=len(path),
                           log_e=float(path[-1]) if len(path) else 0.0, path=list(path))


def test_recent_growth_reads_the_later_half_of_the_path():
    assert recent_growth([]) == 0.0
    assert recent_growth([0.5]) == 0.5  # one label: its own gain
    linear = 0.1 * np.arange(1, 41)
    assert np.isclose(recent_growth(linear), 0.1)
    # a mixture's convex start: flat for 20 labels, then 0.2 per label
    convex = np.r_[np.zeros(20), 0.2 * np.arange(1, 21)]
    assert np.isclose(recent_growth(convex), 0.2)


def test_round_sizes_follow_the_predicted_need_within_bounds():
    thr = np.full(4, np.log(10.0))  # 2.303
    fresh = _record("fresh", 0, [])
    falling = _record("falling", 1, -0.01 * np.arange(1, 11))
    close = _record("close", 2, 0.1 * np.arange(1, 21))  # log E = 2.0: 3.03 labels to go
    slow = _record("slow", 3, 0.001 * np.arange(1, 21))  # far: capped at the batch
    got = round_sizes([fresh, falling, close, slow], thr, batch=25, smallest=5)
    assert got["fresh"] == 25 and got["falling"] == 25 and got["slow"] == 25
    assert got["close"] == 5  # ceil(1.25 * 3.03) = 4, raised to the smallest round
    got = round_sizes([close], thr, batch=25, smallest=1)
    assert got["close"] == int(np.ceil(1.25 * (np.log(10.0) - 2.0) / 0.1))
    assert round_sizes([close], thr, batch=3, smallest=5)["close"] == 3  # never above the batch


def test_look_ahead_waits_while_the_frontier_heads_for_failure():
    """Fixed-sequence look-ahead speculates on the next candidate only while the first unsettled
    one can reach its threshold within its budget at its recent growth: a candidate after a
    failure can never be certified, so its labels would be lost."""
    def job(frontier_path):
        records = [_record("a", 0, frontier_path), _record("b", 1, []), _record("c", 2, [])]
        for r in records:
            r.status = Status.RUNNING if r.t else Status.PENDING
        return SelectionSession(records, procedure=get_procedure("fst"), delta=0.1, testing=True, lookahead=1, budget=300)

    fresh = job([])
    assert [r.name for r in fresh.active()] == ["a", "b"]  # no evidence yet: speculate
    rising = job(0.02 * np.arange(1, 51))  # log E = 1.0 after 50 labels, 65 more to go at 0.02: on track
    assert rising.on_track(rising.records[0]) and [r.name for r in rising.active()] == ["a", "b"]
    slow = job(0.002 * np.arange(1, 251))  # 0.5 after 250: 900 more labels needed, 50 left
    assert not slow.on_track(slow.records[0]) and [r.name for r in slow.active()] == ["a"]
    falling = job(-0.01 * np.arange(1, 101))
    assert [r.name for r in falling.active()] == ["a"]
    # estimation policies (no log e-value) and jobs without a budget keep the look-ahead
    est = job(-0.01 * np.arange(1, 101))
    est.testing = False
    assert [r.name for r in est.active()] == ["a", "b"]
