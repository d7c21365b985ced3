"""workers/candidate.py: testing candidates stepped and finalised together equal one at a time,
and a source that fails in a stacked step costs the others nothing (no label bought or held twice)."""

import numpy as np
import pytest
from certsel.policies import SequentialTest, confidence_interval
from certsel.workers.candidate import TestingCandidate
from certsel.workers.stacked_steps import guarded_step, intervals_together, step_together, upper_bounds_together
from certsel.workers.contracts import SourceError
from certsel.workers.replay import ReplaySource

pytestmark = pytest.mark.unit

N, R, ALPHA, DELTA = 60, 2, 0.3, 0.1


class FailingSource(ReplaySource):
    """Recorded losses until the ``after``-th human request, then a failure for good."""

    def __init__(self, human, judge, after: int):
        super().__init__(human, judge)
        self.calls, self.after = 0, after

    def human(self, items):
        self.calls += 1
        if self.calls > self.after:
            raise SourceError("server gone")
        return super().human(items)


def candidates(fail_after=None, k=3, seed=0, observation="split"):
    rng = np.random.default_rng(seed)
    order = rng.permutation(N * (1 + R))
    out = []
    for i in range(k):
        human = (rng.random(N * (1 + R)) < 0.15 + 0.05 * i).astype(float)
        judge = np.where(rng.random(human.size) < 0.8, human, 1 - human)
        source = FailingSource(human, judge, fail_after) if (fail_after is not None and i == 1) \
            else ReplaySource(human, judge)
        test = SequentialTest(alpha=ALPHA, delta=DELTA, horizon=N, rhos=[0.0, 0.5, 1.0], r=R, observation=observation)
        out.append(TestingCandidate(f"c{i}", source, test, human_items=order[:N], judge_items=order[N:],
                                    ci_delta=DELTA))
    return out


def test_a_failing_source_in_a_stacked_step_costs_the_others_nothing():
    together = candidates(fail_after=1)
    alone = candidates()
    for _ in range(3):
        snaps = step_together(together, 10)
        for c in alone:
            guarded_step(c, 10)
    failed = [s for s in snaps if s.error]
    assert [s.name for s in failed] == ["c1"]
    for c, ref in zip(together, alone, strict=True):
        if c.name == "c1":
            assert c.t == 10 and c.source.human_labels == 10  # its first batch only
            continue
        h, jl, ju = c._data()
        assert c.t == 30 and h.size == 30 and jl.size == 30 and ju.size == R * 30  # each label held once
        assert c.source.requests == ref.source.requests  # and bought once
        np.testing.assert_array_equal(h, ref._data()[0])
        # the same labels in the same order; a stacked update may round differently in the last bit
        # (BLAS summation order differs across machines), so equality is not the claim here
        assert c.test.max_log_evalue == pytest.approx(ref.test.max_log_evalue, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("observation", ["split", "paper"])
def test_stacked_intervals_and_bounds_equal_one_call_each(observation):
    """Final bounds of candidates at different label counts are searched in one padded call (the shorter ones' padding
    left out by ``n_used``), and equal one call each: the padding changes no step before it."""
    cands = candidates(k=5, observation=observation)
    step_together(cands, 25)
    step_together(cands[:3], 15)  # three at t = 40
    step_together(cands[:1], 7)   # one at t = 47, one at t = 40 left with two at t = 25
    assert sorted(c.t for c in cands) == [25, 25, 40, 40, 47]
    want_ci = []
    for c in cands:
        h, jl, ju = c._data()
        lo, hi = confidence_interval(h, jl, ju, delta=DELTA, rhos=c.rhos, betting=c.betting.interval_strategy(),
                                     horizon=N)
        want_ci.append((float(lo), float(hi)))
    levels = [DELTA, DELTA / 3, DELTA, DELTA / 3, DELTA / 3]
    want_bound = []
    for c, lv in zip(cands, levels, strict=True):
        c._bound.clear()
        want_bound.append(c.upper_bound(lv))
        c._bound.clear()
    intervals_together(cands)
    assert all(c._ci is not None for c in cands)  # every one in the stacked call, whatever its label count
    upper_bounds_together(cands, levels)
    assert all(lv in c._bound for c, lv in zip(cands, levels, strict=True) if levels.count(lv) > 1)
    # stacked arithmetic equals one call each up to rounding (the summation order of a stacked
    # reduction is the machine's BLAS's, so the last bit may differ between machines)
    close = dict(rel=1e-12, abs=1e-15)
    assert [c._ci for c in cands] == [pytest.approx(w, **close) for w in want_ci]
    got = [c._bound[lv] for c, lv in zip(cands, levels, strict=True)]
    assert got == pytest.approx(want_bound, **close)
    assert len({round(b, 6) for b in got}) > 1  # not one number for all
