"""The qualitative result of R-AutoEval+ (Fig. 4(a)) on the real TriviaQA table: FST
selection of the lightest MX configuration with at most 10% performance drop. The paper's
claims are checked with the paper's observation (eq. 10); the jobs' split observation is
checked not to select heavier models than it."""

import numpy as np
import pytest
from helpers.replicated import replicated_selection
from certsel.policies import certify, scheme_rhos
from certsel.workers.replay import sample_replications

pytestmark = pytest.mark.slow  # error-rate simulations

ALPHA = DELTA = 0.1
REPS = 200


def _run(table, n, scheme, betting="up", observation="paper"):
    return replicated_selection(table, n=n, r=3, reps=REPS, seed=2024, alpha=ALPHA, delta=DELTA, scheme=scheme,
                                betting=betting, observation=observation)


def _paired(a, b):
    """mean and standard error of the paired difference a - b over replications."""
    d = a - b
    return d.mean(), d.std(ddof=1) / np.sqrt(d.size)


@pytest.mark.parametrize("n", [100, 200])
def test_best_judge_selects_lighter_models(trivia_best, n):
    runs = {s: _run(trivia_best, n, s) for s in ("r-eval", "r-autoeval", "r-autoeval+")}
    bits = {s: o.selected_objective for s, o in runs.items()}
    for s, o in runs.items():
        # reliability: the selected model violates the target in at most delta of the runs
        assert np.mean(o.selected_risk > ALPHA) <= DELTA
        assert np.all(o.selected >= 0)
    for other in ("r-eval", "r-autoeval"):
        diff, se = _paired(bits["r-autoeval+"], bits[other])
        assert diff < -2 * se, (other, diff, se)
    # the jobs' split observation: reliable, and no heavier a selection beyond the paired noise
    # (measured with UP's default prior: 6.285 against 6.393 bits at n = 100, 6.152 against 6.151 at
    # n = 200, where both are at the 6.16-bit configurations nearly every time)
    split = _run(trivia_best, n, "r-autoeval+", observation="split")
    assert np.mean(split.selected_risk > ALPHA) <= DELTA
    diff, se = _paired(split.selected_objective, bits["r-autoeval+"])
    assert diff <= 2 * se, (diff, se)


def test_best_judge_needs_fewer_human_labels_at_the_frontier(trivia_best):
    """Human labels to certify the candidates that decide the selection (ranks 31-35,
    risks 0.037-0.058), with a budget of 600 labels (never certified counts as 601)."""
    h, jl, ju = sample_replications(trivia_best, REPS, 600, 1800, seed=2024)
    frontier = (slice(None), slice(31, 36))
    labels = {}
    for s in ("r-eval", "r-autoeval", "r-autoeval+"):
        res = certify(h[frontier], jl[frontier], ju[frontier], alpha=ALPHA, delta=DELTA, rhos=scheme_rhos(s), betting="up")
        labels[s] = np.where(res.certified, res.labels_to_certify, 601).mean(axis=1)
    for other in ("r-eval", "r-autoeval"):
        diff, se = _paired(labels["r-autoeval+"], labels[other])
        assert diff < -2 * se, (other, diff, se)


@pytest.mark.parametrize("observation", ["paper", "split"])
def test_bad_judge_no_worse_than_r_eval(trivia_bad, observation):
    for n in (100, 200):
        plus = _run(trivia_bad, n, "r-autoeval+", observation=observation).selected_objective
        reval = _run(trivia_bad, n, "r-eval").selected_objective
        diff, se = _paired(plus, reval)
        # within noise of R-Eval (a bigger bitwidth would be worse)
        assert diff < 3 * se + 0.02, (n, diff, se)
