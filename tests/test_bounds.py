"""The one-sided upper bound that inverts the test: it agrees with certification, it is valid
(coverage by simulation), it is tighter than the two-sided interval; and statuses agree with
the final set of the procedure (Holm)."""

import numpy as np
import pytest
from certsel.orchestrator.procedures import get_procedure
from certsel.orchestrator.records import CandidateRecord, Status
from certsel.orchestrator.rounds import reconcile
from certsel.orchestrator.scheduling import Scheduler
from certsel.policies import confidence_interval, decision_upper_bound, log_evalue_paths, scheme_rhos
from scipy import stats
from simulate import bernoulli, resample

DELTA = 0.1


@pytest.mark.parametrize("betting", ["up", "wsr"])
def test_the_bound_agrees_with_the_test_and_the_evidence_is_monotone(betting, trivia_best):
    """Real TriviaQA resamples around alpha: U <= alpha exactly when max E(alpha) >= 1/level,
    and max E(a) is non-decreasing in a on a fine grid (the property bisection needs)."""
    rng = np.random.default_rng(3)
    k = 35  # R = 0.058: certified in some runs, not in others
    h, jl, ju = resample(rng, trivia_best.human[k], trivia_best.judge[k], 60, 200, 600)
    rhos = scheme_rhos("r-autoeval+")
    for level in (DELTA, DELTA / 48):
        U = decision_upper_bound(h, jl, ju, level=level, delta=DELTA, alpha=0.1, rhos=rhos, betting=betting)
        certified = log_evalue_paths(h, jl, ju, alpha=0.1, delta=DELTA, rhos=rhos, betting=betting).max(-1) >= np.log(1 / level)
        assert np.array_equal(U <= 0.1, certified)
        assert certified.any() and not certified.all()  # both sides occur on this data
    grid = np.linspace(0.02, 0.3, 57)
    ev = np.stack([log_evalue_paths(h[:10], jl[:10], ju[:10], alpha=a, delta=DELTA, rhos=rhos,
                                    betting=betting).max(-1) for a in grid], axis=-1)
    assert np.all(np.diff(ev, axis=-1) >= -1e-9)


@pytest.mark.parametrize("betting", ["up", "wsr"])
@pytest.mark.parametrize("scheme", ["r-eval", "r-autoeval+"])
def test_the_bound_covers_the_risk(scheme, betting):
    """2,000 Bernoulli runs with R = 0.3: P(R > U) <= delta within the 99% binomial ceiling,
    and U is below the upper end of the two-sided interval (one-sided at the full level)."""
    rng = np.random.default_rng(11 + len(scheme) + len(betting))
    R, reps = 0.3, 2000
    h, jl, ju = bernoulli(rng, reps, 150, 450, R, flip=0.1)
    rhos = scheme_rhos(scheme)
    U = decision_upper_bound(h, jl, ju, level=DELTA, delta=DELTA, rhos=rhos, betting=betting)
    assert (U < R).sum() <= stats.binom.ppf(0.99, reps, DELTA)
    _, hi = confidence_interval(h[:100], jl[:100], ju[:100], delta=DELTA, rhos=rhos, betting=betting)
    assert np.mean(U[:100] < hi) > 0.95


def test_an_ons_bound_comes_from_its_interval_strategy():
    rng = np.random.default_rng(0)
    h, jl, ju = bernoulli(rng, 20, 100, 300, 0.05, flip=0.1)
    a = decision_upper_bound(h, jl, ju, level=DELTA, delta=DELTA, betting="ons")
    b = decision_upper_bound(h, jl, ju, level=DELTA, delta=DELTA, betting="up")
    np.testing.assert_array_equal(a, b)


def _record(k, max_log_e, status):
    r = CandidateRecord(f"c{k}", k, float(k))
    r.max_log_e, r.status, r.t, r.exhausted = max_log_e, status, 100, True
    r.path = [0.0] * 99 + [max_log_e]
    return r


def test_holm_status_agrees_with_the_final_set():
    """K = 3, delta = 0.1: Holm's thresholds are E >= 30, then 15, then 10. Candidate 0 runs
    out of budget with E = 21 in the round in which candidate 1 reaches E = 40: at that
    moment it needed 30, but once candidate 1 is certified Holm's final set holds it."""
    records = [_record(0, np.log(21.0), Status.RUNNING), _record(1, np.log(40.0), Status.RUNNING),
               _record(2, np.log(2.0), Status.RUNNING)]
    sched = Scheduler(records, procedure="holm", delta=0.1, testing=True)
    sched.settle()
    assert [r.status for r in records] == [Status.CERTIFIED, Status.CERTIFIED, Status.NOT_CERTIFIED]

    # the same evidence arriving in an order where candidate 0 ended first, at the stricter level
    records = [_record(0, np.log(21.0), Status.NOT_CERTIFIED), _record(1, np.log(40.0), Status.CERTIFIED),
               _record(2, np.log(2.0), Status.NOT_CERTIFIED)]
    proc = get_procedure("holm")
    mask = proc.certified(np.array([r.max_log_e for r in records]), 0.1)
    assert mask.tolist() == [True, True, False]

    class Plan:
        testing = True
        procedure = proc
        cfg = type("Cfg", (), {"delta": 0.1})()

    reconcile(Plan, records, mask)
    assert [r.status for r in records] == [Status.CERTIFIED, Status.CERTIFIED, Status.NOT_CERTIFIED]
    assert records[0].certified_at == 100
    levels = proc.decision_deltas(0.1, np.array([r.max_log_e for r in records]))
    np.testing.assert_allclose(levels, [0.1 / 2, 0.1 / 3, 0.1 / 1])
