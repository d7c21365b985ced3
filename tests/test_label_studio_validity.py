"""The label-studio source's queue and withdrawal logic keeps the test valid (issue 42, "What
must be shown"): a simulation with annotators of different speeds against a replay-speed
stand-in for Label Studio (tests/helpers/annotation_queue.py).

The data: a pool of N = 300 items, 60 of them wrong (loss 1): the pool's mean is alpha = 0.2
exactly, the boundary of H0: R > alpha. Each run draws its n = 200 items in the job's seeded
order, without replacement, and R-Eval tests the pool's mean with ``sampling=WithoutReplacement(N)`` (the
engine's ``policy.sampling: without-replacement``, whose guarantee is exact for a finite table
drawn in a uniformly random order; the default i.i.d. test's statement is about a
distribution the items were drawn from, which a fixed pool is not). A wrong answer takes six
times longer to grade than a correct one, and annotators differ four-fold in speed, so
answers arrive out of order and the early arrivals are mostly easy items.

* :func:`test_the_order_rule_keeps_type_one_error_at_the_boundary`: 1,000 runs through
  ``LabelStudioSource`` with delta = 0.1; every run's test consumed exactly the pool's losses
  in the seeded order, its decision is the one the same test makes on that order with no
  queue at all, and the false certificates are consistent with a rate <= delta.
* :func:`test_an_arrival_order_consumer_certifies_falsely`: the same annotators and queue,
  the answers taken in arrival order: far more false certificates (the simulation sees the
  bug the order rule prevents).
* late answers, the queue's bound, withdrawn tasks: the same runs (and 100 runs of a good
  candidate, certified early with tasks in flight).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from certsel.policies import SequentialTest
from certsel.policies.sampling import WithoutReplacement
from certsel.workers.label_studio_client import LabelStudioError
from scipy import stats

from helpers.annotation_queue import (PROJECT, Scenario, arrival_order_losses, journal_of, memoized_priors,
                                      run_source)

pytestmark = pytest.mark.slow  # 1,000 runs through the source (about a minute on 2 cores)

RUNS = 1000
SC = Scenario()  # the boundary: 60 of 300 wrong, alpha = 0.2
GOOD = dataclasses.replace(SC, wrong=20)  # R = 1/15: certified early, with tasks in flight
EARLY_RUNS = 100
THRESHOLD = math.log(1.0 / SC.delta)


def batched_path(sc: Scenario, losses: np.ndarray) -> np.ndarray:
    """log E after each label, the candidates' test on (runs, labels) losses in one stacked call."""
    test = SequentialTest((losses.shape[0],), alpha=sc.alpha, delta=sc.delta, horizon=sc.n, rhos=[0.0],
                          betting="up", observation="split", sampling=WithoutReplacement(sc.N))
    return test.update(losses)


def simulate(sc: Scenario, runs: int, *, keep):
    pool = sc.pool()
    out = []
    with memoized_priors():
        for seed in range(runs):
            r = run_source(sc, pool, seed, keep=True)
            if not keep(r):
                r.server = r.source = None  # only what a test looks at later stays in memory
            out.append(r)
    return pool, out


@pytest.fixture(scope="module")
def boundary():
    pool, runs = simulate(SC, RUNS, keep=lambda r: r.certified or r.deleted or r.refused)
    assert pool.mean() == SC.alpha  # exactly at the boundary
    return pool, runs


@pytest.fixture(scope="module")
def early():
    return simulate(GOOD, EARLY_RUNS, keep=lambda r: True)[1]


def test_memoized_priors_change_nothing():
    pool = SC.pool()
    plain = [run_source(SC, pool, seed) for seed in (3, 4)]
    with memoized_priors() as memo:
        fast = [run_source(SC, pool, seed) for seed in (3, 4)]
    assert len(memo) == 1
    for a, b in zip(plain, fast, strict=True):
        assert (a.t, a.steps, a.waits, a.max_log_e) == (b.t, b.steps, b.waits, b.max_log_e)
        np.testing.assert_array_equal(a.labels, b.labels)


def test_the_order_rule_keeps_type_one_error_at_the_boundary(boundary):
    pool, runs = boundary
    orders = np.stack([SC.order(seed) for seed in range(RUNS)])
    for seed, r in enumerate(runs):  # the labels in the order asked, never in the order answered
        np.testing.assert_array_equal(r.labels, pool[orders[seed, : r.t]], err_msg=f"seed {seed}")
        assert r.t == SC.n or r.certified
    # the same test on the seeded order, no queue at all: the same evidence and the same decisions
    path = batched_path(SC, pool[orders])
    running = np.maximum(np.maximum.accumulate(path, axis=1), 0.0)
    at_stop = running[np.arange(RUNS), [r.t - 1 for r in runs]]
    np.testing.assert_allclose([r.max_log_e for r in runs], at_stop, rtol=1e-9, atol=1e-12)
    certified = np.array([r.certified for r in runs])
    np.testing.assert_array_equal(certified, running[:, -1] >= THRESHOLD)
    false = int(certified.sum())
    test = stats.binomtest(false, RUNS, SC.delta, alternative="greater")
    print(f"\norder-respecting source: {false}/{RUNS} false certificates (delta = {SC.delta}); "
          f"mean steps {np.mean([r.steps for r in runs]):.1f}, polls {np.mean([r.waits for r in runs]):.1f}")
    assert test.pvalue >= 0.01, f"{false}/{RUNS} false certificates: more than delta = {SC.delta}"


def test_an_arrival_order_consumer_certifies_falsely(boundary):
    pool, runs = boundary
    losses = np.stack([arrival_order_losses(SC, pool, seed) for seed in range(RUNS)])
    path = batched_path(SC, losses)
    wrong = int((path.max(axis=1) >= THRESHOLD).sum())
    right = sum(r.certified for r in runs)
    first = losses[:, :30].mean()
    print(f"\narrival-order consumer: {wrong}/{RUNS} false certificates (the source: {right}/{RUNS}); "
          f"mean loss of its first 30 labels {first:.3f} (pool {pool.mean():.3f})")
    assert first < SC.alpha  # the early arrivals are the easy items
    assert stats.binomtest(wrong, RUNS, SC.delta, alternative="greater").pvalue < 0.01
    assert wrong >= 2 * right


def test_late_annotations_are_recorded_unused_and_change_no_evidence(boundary, early):
    runs = boundary[1] + early
    for r in runs:
        assert r.max_log_e_after == r.max_log_e  # the evidence at the decision, to the bit
        assert r.late_used == 0 and r.arrived_late_used == 0  # no late answer reached the test
        assert r.final.annotations_used == r.report.annotations_used == r.t  # one annotator per item
        assert r.final.annotations_unused == r.valid_seen - r.t
        assert r.final.annotations_unused >= r.late
        assert r.final.answers_awaited == 0
        if r.server is not None:  # every answer the server holds is recorded (none lost, none twice)
            held = sum(len(task["annotations"]) for task in r.server.live.values())
            assert held == r.valid_seen
    late = [r for r in runs if r.late]
    print(f"\nlate answers: {len(late)} of {len(runs)} runs ({sum(r.late for r in runs)} annotations, all unused); "
          f"answers refused by the server: {sum(r.refused for r in runs)}; "
          f"tasks withdrawn: {sum(r.deleted for r in runs)}")
    assert sum(1 for r in early if r.late) >= EARLY_RUNS // 10
    assert sum(1 for r in boundary[1] if r.late) > 0  # false certificates leave tasks in flight too
    assert all(r.final.annotations_unused > 0 for r in late)
    assert sum(r.arrived_late for r in runs) > 0


def test_the_queue_never_holds_more_than_queue_unanswered_tasks(boundary, early):
    for r in boundary[1] + early:
        assert r.most_unanswered <= SC.queue
        assert r.final.tasks_imported == r.imported
        assert r.imported <= SC.n
        # what the source holds today: the answered tasks past the first unanswered one of a
        # batch free their room, so a batch may run up to batch - 1 tasks past used + queue
        assert r.overshoot <= SC.batch - 1


def test_imports_never_exceed_labels_used_plus_queue(boundary, early):
    worst = max(r.overshoot for r in boundary[1] + early)
    assert worst <= 0, f"tasks imported exceeded labels used + queue by {worst}"


def test_withdrawn_tasks_are_gone_and_refuse_annotations(boundary, early):
    kept = [r for r in boundary[1] + early if r.server is not None]
    assert sum(r.deleted for r in kept) > 0
    assert sum(r.refused for r in kept) > 0  # annotators were grading tasks when they were withdrawn
    for r in kept:
        server = r.server
        recs = r.source.journal.records()
        withdrawn = {b["task"] for k, b in recs.items() if k.startswith("task/") and b.get("withdrawn")}
        assert withdrawn == set(server.deleted)
        assert r.final.tasks_withdrawn == len(withdrawn) == r.deleted
        assert r.final.annotations_saved == SC.per_item * len(withdrawn)
        listed = {t["id"] for t in server.tasks(PROJECT)}
        for t in withdrawn:
            assert server.task(t) is None and server.annotations(t) is None and t not in listed
            refused = len(server.refused)
            with pytest.raises(LabelStudioError) as err:
                server.post_annotation(t, 0, "Correct")
            assert err.value.status == 404 and len(server.refused) == refused + 1
        # nothing withdrawn was ever answered, and every task that stayed was answered in the end
        anns, _ = journal_of(r.source)
        assert not withdrawn & {b["task"] for k, b in recs.items() if k.startswith("task/")
                                and any(a["seq"] == b["seq"] for a in anns)}
        assert server.unanswered == 0
