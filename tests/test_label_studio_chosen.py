"""Policies that choose their items (the judge-stratified test, Seq) labelled by people at
people's pace: through the annotation queue at replay speed (tests/helpers/annotation_queue.py)
they consume exactly what they consume when every label comes at once, decision for decision,
and a drawn batch waits whole (nothing of it reaches the policy before all of it is answered)."""

import math

import numpy as np
import pytest
from certsel.policies.betting import get_strategy
from certsel.policies.kinds import PolicySettings, get_policy_kind
from certsel.workers.candidate import policy_candidate
from certsel.workers.stacked_steps import guarded_step
from certsel.workers.contracts import JobArrays
from certsel.workers.label_studio_source import LabelStudioSource, LabelStudioSpec
from certsel.workers.python_source import PythonSource

from helpers.annotation_queue import PROJECT, SCALE, Scenario

pytestmark = pytest.mark.slow


def queued(sc: Scenario, pool: np.ndarray, judge: np.ndarray, seed: int) -> tuple:
    server = sc.queue_for(pool, seed)
    spec = LabelStudioSpec(candidate="c", url="http://replay.invalid", token_env="UNUSED", project=PROJECT, scale=SCALE,
                           per_item=1, combine="mean", queue=sc.queue, ordered=False,
                           payload=tuple({"question": f"q{i}", "answer": f"a{i}"} for i in range(sc.N)), keys=sc.keys(),
                           judge=tuple(judge.tolist()))
    return LabelStudioSource(spec, server), server


def at_once(pool: np.ndarray, judge: np.ndarray) -> PythonSource:
    table = {"human": pool, "judge": judge}
    return PythonSource(lambda c, items, role: table[role][items], "c", pool.size, judge=True)


def drive(kind: str, source, settings: PolicySettings, server=None, batch: int = 8, poll: float = 5.0):
    """Steps until decided or out of budget (the engine's loop); the labels consumed in order."""
    cand = policy_candidate("c", source, get_policy_kind(kind), settings, JobArrays())
    threshold = math.log(1.0 / settings.delta)
    consumed, waits = [], 0
    while True:
        before = cand.t
        snap = guarded_step(cand, batch)
        assert snap.error is None, snap.error
        if cand.t > before:
            consumed.append(cand.t)
        decided = snap.max_log_e >= threshold if kind == "judge-stratified" else snap.decision != 0
        if decided or snap.exhausted:
            break
        if cand.t == before:
            assert snap.waiting > 0 and server is not None  # waiting for people, whole batch
            assert source.human_labels == cand.t  # nothing of the drawn batch was given before it is all in
            server.advance(poll)
            waits += 1
    return cand, consumed, waits


@pytest.mark.parametrize("seed, queue", [(0, 8), (1, 8), (2, 8), (3, 3), (4, 3), (5, 3)])
def test_the_judge_stratified_test_at_peoples_pace_equals_it_with_every_label_at_once(seed, queue):
    """A queue smaller than the batch too: a drawn batch is imported whole, or it would wait forever."""
    sc = Scenario(N=300, wrong=45, alpha=0.25, n=200, batch=8, queue=queue)
    rng = np.random.default_rng(seed)
    pool = sc.pool(seed)
    judge = np.clip(pool + rng.normal(0, 0.3, sc.N), 0, 1)  # a noisy judge
    settings = PolicySettings(alpha=sc.alpha, delta=0.1, budget=sc.n, seed=(seed, 0), betting=get_strategy("up"),
                              ci_delta=0.1, futility=None)
    source, server = queued(sc, pool, judge, seed)
    slow, steps, waits = drive("judge-stratified", source, settings, server)
    fast, fast_steps, _ = drive("judge-stratified", at_once(pool, judge), settings)
    assert waits > 0  # people were slower than the policy
    # the same draws from the same states, each batch taken whole: the same test, step for step
    assert steps == fast_steps and slow.t == fast.t
    items_slow, h_slow = slow.test.labelled()
    items_fast, _ = fast.test.labelled()
    np.testing.assert_array_equal(items_slow, items_fast)
    np.testing.assert_array_equal(h_slow, pool[items_slow])  # each label the person's answer
    assert slow.test.max_log_evalue == fast.test.max_log_evalue
    report = source.withdraw()
    assert report.annotations_used == slow.t and source.human_labels == slow.t
    assert report.tasks_imported <= slow.t + sc.batch  # a drawn batch is imported whole, nothing ahead
