"""FST, Bonferroni and Holm: hand-computed cases and family-wise error by simulation."""

import numpy as np
import pytest
from certsel.policies import (
    bonferroni,
    certify,
    fixed_sequence,
    holm,
    p_values,
    select,
)
from scipy import stats

CERTIFIED_SET = {"fst": fixed_sequence, "bonferroni": bonferroni, "holm": holm}

DELTA = 0.1


def test_fixed_sequence_longest_certified_prefix():
    e = np.array([50.0, 12.0, 3.0, 40.0])  # 1/delta = 10
    assert fixed_sequence(e, DELTA).tolist() == [True, True, False, False]
    # a different order: test candidate 3 first, then 0, then 2 (fails), then 1
    assert fixed_sequence(e, DELTA, order=[3, 0, 2, 1]).tolist() == [True, False, False, True]
    assert fixed_sequence(np.array([9.99, 100.0]), DELTA).tolist() == [False, False]


def test_bonferroni_threshold_is_k_over_delta():
    e = np.array([40.0, 39.9, 1000.0, 0.5])  # K / delta = 40
    assert bonferroni(e, DELTA).tolist() == [True, False, True, False]


def test_holm_hand_computed():
    # p = [0.02, 0.03, 0.04, 0.5]; thresholds delta/(K - j) = 0.025, 0.0333, 0.05, 0.1
    e = 1.0 / np.array([0.02, 0.03, 0.04, 0.5])
    assert holm(e, DELTA).tolist() == [True, True, True, False]
    assert bonferroni(e, DELTA).tolist() == [True, False, False, False]
    # step-down stops at the first failure even if later p-values are small enough
    e2 = 1.0 / np.array([0.02, 0.04, 0.026, 0.001])  # sorted: .001 .02 .026(>.0333? no) ...
    # sorted p: 0.001<=0.025, 0.02<=0.0333, 0.026<=0.05, 0.04<=0.1 -> all certified
    assert holm(e2, DELTA).all()
    e3 = 1.0 / np.array([0.03, 0.001, 0.04, 0.09])
    # sorted p: 0.001<=0.025, 0.03<=0.0333, 0.04<=0.05, 0.09<=0.1 -> all certified
    assert holm(e3, DELTA).all()
    e4 = 1.0 / np.array([0.03, 0.03, 0.001, 0.2])
    # sorted p: 0.001 ok, 0.03 <= 0.0333 ok, 0.03 <= 0.05 ok, 0.2 > 0.1 stop
    assert holm(e4, DELTA).tolist() == [True, True, True, False]
    e5 = 1.0 / np.array([0.026, 0.9, 0.9, 0.9])
    # 0.026 > 0.025: nothing certified
    assert not holm(e5, DELTA).any()


def test_holm_decision_levels_hand_computed_including_all_certified():
    from certsel.policies.procedures import get_procedure

    holm_proc = get_procedure("holm")
    # p = [0.02, 0.5, 0.04, 0.03]: the step-down certifies the three smallest at 0.025, 0.0333,
    # 0.05 and stops at 0.5 > 0.1, the level the fourth is decided at
    got = holm_proc.decision_deltas(DELTA, np.log(1.0 / np.array([0.02, 0.5, 0.04, 0.03])))
    np.testing.assert_allclose(got, [DELTA / 4, DELTA / 1, DELTA / 2, DELTA / 3])
    # every candidate certified: each at its own step, no failed step (this divided by zero)
    got = holm_proc.decision_deltas(DELTA, np.log(1.0 / np.array([0.001, 0.002])))
    np.testing.assert_allclose(got, [DELTA / 2, DELTA / 1])


def test_holm_dominates_bonferroni_on_random_evalues(rng):
    e = np.exp(rng.normal(2.0, 2.0, size=(5000, 12)))
    b, h = bonferroni(e, DELTA), holm(e, DELTA)
    assert np.all(h[b])
    assert h.sum() > b.sum()


def test_batched_procedures_and_selection():
    e = np.array([[50.0, 12.0, 3.0], [5.0, 500.0, 500.0]])
    c = fixed_sequence(e, DELTA)
    assert c.tolist() == [[True, True, False], [False, False, False]]
    assert select(c, objective=[8.0, 6.0, 4.0]).tolist() == [1, -1]
    c = holm(e, DELTA)
    assert select(c, objective=[8.0, 6.0, 4.0]).tolist() == [0, 2]


def test_p_values_from_evalues():
    assert p_values([0.5, 1.0, 20.0]).tolist() == [1.0, 1.0, 0.05]


@pytest.mark.parametrize("procedure", ["fst", "bonferroni", "holm"])
def test_fwer_with_exact_null_evalues(rng, procedure):
    """Null e-values E = 1/U with U uniform have P(E >= 1/a) = a exactly, the worst case
    the procedures must withstand; a threshold off by any factor would show."""
    reps, K = 40_000, 8
    e = 1.0 / rng.random((reps, K))
    # candidates 0..2 are good (huge evidence) and 3..7 null
    e[:, :3] = 1e6
    cert = CERTIFIED_SET[procedure](e, DELTA)
    fwer = cert[:, 3:].any(axis=1).mean()
    # exact FWER of each procedure here: FST tests the first null at delta; Bonferroni
    # tests five nulls at delta/8; Holm, after the three good ones, tests them at delta/5
    expected = {
        "fst": DELTA,
        "bonferroni": 1 - (1 - DELTA / K) ** 5,
        "holm": 1 - (1 - DELTA / 5) ** 5,
    }[procedure]
    se = np.sqrt(expected * (1 - expected) / reps)
    assert expected <= DELTA
    assert abs(fwer - expected) < 4 * se


@pytest.mark.parametrize("procedure", ["fst", "bonferroni", "holm"])
def test_fwer_with_real_e_processes(procedure):
    """Eight Bernoulli candidates ordered by risk, three of them null just above alpha,
    each tested by R-Eval (WSR) on 300 labels; FWER over 2,000 replications."""
    rng = np.random.default_rng(11)
    reps, n, alpha = 2000, 300, 0.1
    risks = np.array([0.02, 0.04, 0.06, 0.08, 0.09, 0.105, 0.11, 0.12])
    h = (rng.random((reps, risks.size, n)) < risks[:, None]).astype(float)
    res = certify(h, alpha=alpha, delta=DELTA, rhos=[0.0], betting="wsr")
    cert = CERTIFIED_SET[procedure](np.exp(res.max_log_evalue), DELTA)
    false = cert[:, risks > alpha].any(axis=1).sum()
    assert false <= stats.binom.ppf(0.99, reps, DELTA)
    assert cert[:, 0].mean() > 0.9  # and the procedure still has power
