"""Predicted round sizes (orchestrator.run.selection.round_sizes): what each candidate's evidence
says it still needs, within [smallest, batch]."""

import numpy as np

from certsel.orchestrator.run.records import CandidateRecord
from certsel.orchestrator.run.selection import recent_growth, round_sizes


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
