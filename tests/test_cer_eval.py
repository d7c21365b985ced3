"""Cer-Eval radii and policies: exact formulas, snapshots, stopping, validity by simulation."""

import math
import pickle

import numpy as np
import pytest
from certsel.policies import (
    Base,
    CerEval,
    FixedPartition,
    NearestNeighborPartition,
    Seq,
    adaptive_hoeffding_radius,
    bernstein_eta,
    bernstein_radius,
    epsilon_star,
    hoeffding_radius,
    oracle,
    prpl_path,
)
from helpers.scenarios import make_scenario
from helpers.reference import prpl_eb_loop

# ---------------------------------------------------------------- radius formulas, by hand


def test_adaptive_hoeffding_radius_by_hand():
    # n = 100, delta = 0.05: log2(100) = 6.643856, ln(7.643856) = 2.033900,
    # u = 2 * 2.033900 + ln(80) = 4.067800 + 4.382027 = 8.449827, sqrt(u / 100) = 0.290686
    assert adaptive_hoeffding_radius(100, 0.05) == pytest.approx(0.2906859312061753, rel=1e-12)
    assert np.isinf(adaptive_hoeffding_radius(0, 0.05))
    # n = 1: log2(1) = 0, so the iterated-log term vanishes: sqrt(ln(4/delta))
    assert adaptive_hoeffding_radius(1, 0.05) == pytest.approx(math.sqrt(math.log(80)), rel=1e-12)


def test_bernstein_radius_by_hand_and_wrong_constant_is_caught():
    # v = 0.04, n_k = 200, K = 3, delta = 0.05:
    # log2(200) = 7.643856, 2 ln(8.643856) = 4.313454, ln(16 * 3 / 0.05) = ln(960) = 6.866933,
    # eta^2 = 11.180387 / 200 = 0.055902, eta = 0.236438
    # eps = 2 * 0.055902 / 3 + 2 sqrt((0.04 + 0.236438 + 0.055902) * 0.055902) = 0.309878
    assert bernstein_eta(200, 3, 0.05) == pytest.approx(0.236438479180896, rel=1e-12)
    got = bernstein_radius(0.04, 200, 3, 0.05)
    assert got == pytest.approx(0.30987798201607336, rel=1e-12)
    # the same formula with 8K instead of 16K inside eta_k gives 0.294611: the check above
    # (relative tolerance 1e-12) fails for it by a margin of 5%
    wrong = 0.294611419898217
    assert abs(wrong - got) / got > 0.04
    # and a radius computed with ln(log n + 1) in natural log (not log2) is caught as well
    e2 = (2 * math.log(math.log(200) + 1) + math.log(960)) / 200
    wrong_log = 2 * e2 / 3 + 2 * math.sqrt((0.04 + math.sqrt(e2) + e2) * e2)
    assert abs(wrong_log - got) / got > 1e-3


def test_static_radii_by_hand():
    assert epsilon_star(5000, 0.05) == pytest.approx(0.017308183826022852, rel=1e-12)
    assert hoeffding_radius(5000, 0.05) == pytest.approx(0.019206455826398416, rel=1e-12)


def test_bernstein_radius_floor_is_two_eta_to_three_halves():
    n = np.array([10, 100, 1000, 10000])
    eta = bernstein_eta(n, 2, 0.05)
    assert np.all(bernstein_radius(0.0, n, 2, 0.05) >= 2 * eta**1.5)


def test_prpl_path_agrees_with_literal_loop():
    rng = np.random.default_rng(3)
    x = rng.beta(0.4, 0.6, size=300)
    c_ref, r_ref = prpl_eb_loop(x, 0.05)
    c, r = prpl_path(x, 0.05)
    np.testing.assert_allclose(c, c_ref, rtol=1e-12)
    np.testing.assert_allclose(r, r_ref, rtol=1e-12)


# ---------------------------------------------------------------- validity by simulation


@pytest.mark.parametrize("dist", ["bern05", "bern002", "beta", "three_point"])
def test_time_uniform_coverage_of_seq_radii(dist):
    """Fraction of 2,000 runs whose interval ever misses the mean over 2,000 steps <= delta."""
    rng = np.random.default_rng(11)
    reps, n, delta = 2000, 2000, 0.1
    if dist == "bern05":
        x, mu = (rng.random((reps, n)) < 0.5).astype(float), 0.5
    elif dist == "bern002":
        x, mu = (rng.random((reps, n)) < 0.02).astype(float), 0.02
    elif dist == "beta":
        x, mu = rng.beta(0.3, 0.7, size=(reps, n)), 0.3
    else:
        x, mu = rng.choice([0.0, 0.5, 1.0], p=[0.7, 0.2, 0.1], size=(reps, n)), 0.2
    c, r = prpl_path(x, delta)
    miss_bet = np.mean(np.any(np.abs(c - mu) > r, axis=1))
    t = np.arange(1, n + 1)
    miss_hoef = np.mean(np.any(np.abs(np.cumsum(x, axis=1) / t - mu) > adaptive_hoeffding_radius(t, delta), axis=1))
    # binomial(2000, 0.1) exceeds 0.125 with probability < 1e-4
    assert miss_bet <= 0.125, miss_bet
    assert miss_hoef <= 0.125, miss_hoef


@pytest.mark.slow
def test_oracle_and_cer_eval_cover_the_test_set_mean_at_every_step():
    """Betting Seq, oracle and Cer-Eval on S2 test sets (n = 1000) cover the test-set mean at
    all times; the paper's radius with a fixed partition covers it too."""
    misses, runs = 0, 0
    for rep in range(6):
        sc = make_scenario("S2", n=1000, seed=100 + rep)
        mu = sc.losses.mean()
        policies = (Seq(1000, delta=0.1, seed=rep), oracle(1000, sc.groups, delta=0.1, seed=rep),
                    CerEval(1000, NearestNeighborPartition(sc.features), delta=0.1, seed=rep),
                    oracle(1000, sc.groups, delta=0.1, seed=rep, radius="paper"))
        for policy in policies:
            path = policy.run(sc.losses, record=True, batch=4).path
            misses += int(np.any((path[:, 2] > mu + 1e-12) | (path[:, 3] < mu - 1e-12)))
            runs += 1
    assert misses <= 3, (misses, runs)


# ---------------------------------------------------------------- policy behaviour


def test_seq_paper_stops_at_the_closed_form_time():
    sc = make_scenario("S1", n=3000, seed=1)
    eps, delta = 0.06, 0.05
    res = Seq(3000, epsilon=eps, delta=delta, radius="paper", seed=0).run(sc.losses)
    t = np.arange(1, 3001)
    expected = int(np.argmax(adaptive_hoeffding_radius(t, delta) <= eps)) + 1
    assert res.n_labeled == expected and res.certified
    assert res.radius <= eps


def test_paper_radius_is_line_13_when_no_clipping():
    sc = make_scenario("S2", n=3000, seed=2)
    p = oracle(3000, sc.groups, delta=0.05, radius="paper", seed=0)
    for _ in range(900):
        items = p.next_items(1)
        p.update(items, sc.losses[items])
    gs = p.group_stats()
    K = p.n_groups
    eps_k = bernstein_radius(gs["variance"], gs["labeled"], K, 0.05)
    w = gs["size"] / 3000
    assert np.all(gs["mean"] - eps_k > 0) and np.all(gs["mean"] + eps_k < 1)  # no clipping here
    assert p.radius == pytest.approx(float(np.dot(w, eps_k)), rel=1e-12)
    assert p.estimate == pytest.approx(float(np.dot(w, gs["mean"])), rel=1e-12)


def test_cer_eval_targets_the_most_uncertain_group():
    # group 0: constant losses (zero variance); group 1: 0/1 losses. Both engines favour 1.
    n = 2000
    groups = np.repeat([0, 1], n // 2)
    losses = np.where(groups == 0, 0.3, np.arange(n) % 2).astype(float)
    # the paper radius is dominated by its eta^(3/2) term, so it tilts less than the betting one
    for radius, tilt in (("paper", 1.05), ("betting", 1.5)):
        p = CerEval(n, FixedPartition(groups), delta=0.05, radius=radius, seed=0)
        for _ in range(600):
            items = p.next_items(1)
            p.update(items, losses[items])
        labeled = p.group_stats()["labeled"]
        assert labeled[1] > tilt * labeled[0], (radius, labeled)


def test_base_reports_hoeffding_only_after_all_items():
    z = np.linspace(0, 1, 500)
    p = Base(500, delta=0.05)
    items = p.next_items(100)
    p.update(items, z[items])
    assert p.ci == (0.0, 1.0) and not p.done
    res = p.run(z)
    assert res.n_labeled == 500
    assert res.radius == pytest.approx(hoeffding_radius(500, 0.05), rel=1e-12)
    gs = p.group_stats()
    assert gs["labeled"][0] == 500 and gs["mean"][0] == pytest.approx(0.5)


def test_threshold_decision():
    z = np.random.default_rng(0).beta(2, 8, size=4000)  # mean 0.2
    below = Seq(4000, delta=0.05, threshold=0.3, seed=1).run(z)
    assert below.decision == -1 and below.n_labeled < 1000
    above = Seq(4000, delta=0.05, threshold=0.1, seed=1).run(z)
    assert above.decision == 1
    # decisions use the one-sided bounds at the full delta, inside the two-sided interval
    p = Seq(4000, delta=0.05, threshold=0.3, seed=1)
    for _ in range(20):
        items = p.next_items(10)
        p.update(items, z[items])
        lo, hi = p.ci
        assert lo <= p.lower_bound <= p.upper_bound <= hi


def test_batches_never_repeat_items_and_policy_finishes():
    sc = make_scenario("S3", n=1500, seed=4)
    p = CerEval(1500, NearestNeighborPartition(sc.features), delta=0.05, seed=3)
    seen = []
    while not p.done:
        items = p.next_items(37)
        if items.size == 0:
            break
        seen.extend(items.tolist())
        p.update(items[::-1], sc.losses[items[::-1]])  # any order within a batch
    assert len(seen) == len(set(seen)) == p.n_labeled == 1500
    assert p.exhausted and p.n_partitions >= 5


@pytest.mark.parametrize("kind", ["seq", "seq-paper", "cer-eval", "cer-eval-paper", "oracle", "base"])
def test_snapshot_restore_gives_identical_future_choices(kind):
    sc = make_scenario("S2", n=1200, seed=5)
    part = NearestNeighborPartition(sc.features)

    def make():
        if kind.startswith("seq"):
            return Seq(1200, delta=0.05, seed=7, radius="paper" if kind.endswith("paper") else "betting")
        if kind.startswith("cer-eval"):
            return CerEval(1200, part, delta=0.05, seed=7, radius="paper" if kind.endswith("paper") else "betting")
        if kind == "oracle":
            return oracle(1200, sc.groups, delta=0.05, seed=7)
        return Base(1200, delta=0.05, seed=7)

    def drive(p, steps):
        out = []
        for _ in range(steps):
            items = p.next_items(5)
            p.update(items[:3], sc.losses[items[:3]])  # leave some pending across the snapshot
            p.update(items[3:], sc.losses[items[3:]])
            out.extend(items.tolist())
        return out

    a = make()
    drive(a, 40)
    items = a.next_items(4)  # pending at snapshot time
    state = pickle.loads(pickle.dumps(a.state_dict()))
    if kind.startswith("cer-eval") or kind == "oracle":
        b = CerEval.from_state_dict(state, part if kind.startswith("cer-eval") else a.partitioner)
    else:
        b = type(a).from_state_dict(state)
    for p in (a, b):
        p.update(items, sc.losses[items])
    assert drive(a, 60) == drive(b, 60)
    assert a.bounds() == b.bounds() and a.n_labeled == b.n_labeled


def test_run_records_the_path_independent_of_epsilon():
    sc = make_scenario("S2", n=2000, seed=6)
    part = NearestNeighborPartition(sc.features)
    full = CerEval(2000, part, delta=0.05, seed=1).run(sc.losses, record=True).path
    radius = (full[:, 3] - full[:, 2]) / 2
    eps = float(radius[700])
    stop = CerEval(2000, part, delta=0.05, epsilon=eps, seed=1).run(sc.losses)
    assert stop.n_labeled == int(full[np.argmax(radius <= eps), 0])


# ---------------------------------------------------------------- bad input


def test_policy_bad_input():
    from certsel.policies import score_partition

    feats = np.random.default_rng(0).normal(size=(50, 4))
    with pytest.raises(ValueError, match="epsilon"):
        Seq(50, delta=0.05, epsilon=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        Seq(50, delta=0.05, epsilon=-0.1)
    with pytest.raises(ValueError, match="delta"):
        Seq(50, delta=1.0)
    with pytest.raises(ValueError, match="delta"):
        CerEval(50, NearestNeighborPartition(feats), delta=0.0)
    with pytest.raises(ValueError, match="radius"):
        Seq(50, delta=0.05, radius="chebyshev")
    with pytest.raises(ValueError, match="threshold"):
        Seq(50, delta=0.05, threshold=1.0)
    with pytest.raises(ValueError, match="n_items"):
        Seq(0, delta=0.05)
    with pytest.raises(ValueError, match="outside"):
        Seq(50, delta=0.05).run(np.full(50, 1.2))
    with pytest.raises(ValueError, match="NaN"):
        Seq(50, delta=0.05).run(np.full(50, np.nan))
    with pytest.raises(ValueError, match="shape"):
        Seq(50, delta=0.05).run(np.zeros(49))
    with pytest.raises(ValueError, match="partitioner covers 50 items"):
        CerEval(49, NearestNeighborPartition(feats), delta=0.05)
    bad = feats.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        NearestNeighborPartition(bad)
    with pytest.raises(ValueError, match="2-D"):
        NearestNeighborPartition(np.zeros(50))
    with pytest.raises(ValueError, match="empty"):
        score_partition(np.r_[np.zeros(45), np.ones(5)], 4)
    with pytest.raises(ValueError, match="schedule"):
        CerEval(50, NearestNeighborPartition(feats), delta=0.05, schedule=(10, 1.0))
    p = Seq(50, delta=0.05, seed=0)
    items = p.next_items(3)
    with pytest.raises(ValueError, match="not requested"):
        p.update([int(np.setdiff1d(np.arange(50), items)[0])], [0.5])
    with pytest.raises(ValueError, match="outside"):
        p.update(items, [0.1, 0.2, -0.01])
    with pytest.raises(ValueError, match="losses"):
        p.update(items, [0.1, 0.2])
    p.update(items, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="not requested|already"):
        p.update(items[:1], [0.1])
    with pytest.raises(ValueError, match="snapshot"):
        Base.from_state_dict(p.state_dict())
