"""The pilot that picks where a fixed sequence starts (policies/pilot.py): the rule on hand-made
judge losses, and the pilot's draws independent of the tests' item order."""

import numpy as np
import pytest

from certsel.policies.pilot import checked_start, pilot_items, pilot_start, run_pilot
from certsel.workers.replay import item_order

pytestmark = pytest.mark.unit


def test_the_start_is_the_estimated_frontier_less_the_margin():
    # configs in testing order (heaviest first): the judge puts the first four within alpha = 0.1
    judge = np.array([[0.0, 0.1], [0.05, 0.05], [0.1, 0.1], [0.0, 0.2], [0.3, 0.1], [0.0, 0.0]])
    start, est = pilot_start(judge, 0.1, margin=0)
    assert start == 3 and np.allclose(est, [0.05, 0.05, 0.1, 0.1, 0.2, 0.0])
    assert pilot_start(judge, 0.1, margin=2)[0] == 1
    assert pilot_start(judge, 0.1, margin=10)[0] == 0  # never before the first config
    # a config after the first miss does not extend the frontier (the sixth, at 0.0)
    assert pilot_start(np.full((3, 4), 0.5), 0.1, margin=1)[0] == 0  # nothing within alpha: from the top
    with pytest.raises(ValueError, match="margin must be at least 0"):
        pilot_start(judge, 0.1, margin=-1)


def test_pilot_draws_are_their_own_stream():
    items = pilot_items(1000, 200, seed=7)
    assert items.size == 200 and np.unique(items).size == 200 and items.max() < 1000
    assert np.array_equal(items, pilot_items(1000, 200, seed=7))  # a job's pilot is reproducible
    assert pilot_items(50, 200, seed=7).size == 50  # at most the whole table
    # not the tests' first items: the pilot's draws do not follow the order the tests label in
    first = np.sort(item_order(1000, 7)[:200])
    assert not np.array_equal(items, first)
    # across seeds the overlap with the tests' first 200 items is what independent draws give
    # (hypergeometric mean 200 * 200 / 1000 = 40; sd about 5)
    overlaps = [np.intersect1d(pilot_items(1000, 200, s), item_order(1000, s)[:200]).size for s in range(200)]
    assert abs(np.mean(overlaps) - 40.0) < 2.0
    with pytest.raises(ValueError, match="at least 1"):
        pilot_items(10, 0, seed=0)


def test_people_move_a_start_past_the_frontier_back_toward_the_top():
    # mean human loss per config (testing order) on 4 check items: within alpha = 0.1 up to index 5
    means = np.array([0.0, 0.0, 0.05, 0.05, 0.1, 0.1, 0.5, 0.5, 0.6, 0.7, 0.7])
    human = np.repeat(means[:, None], 4, axis=1)
    assert checked_start(human, 4, 0.1) == (4, {4: 0.1})  # within alpha: the start stays
    # from 10 the start moves back by 1, 2, 4: 10 -> 9 -> 7 -> 3
    assert checked_start(human, 10, 0.1) == (3, {10: 0.7, 9: 0.7, 7: 0.5, 3: 0.05})
    assert checked_start(np.ones((3, 4)), 2, 0.1) == (0, {2: 1.0, 1: 1.0, 0: 1.0})  # at most back to the top


def test_the_check_uses_the_pilots_own_items_and_counts_its_labels():
    rng = np.random.default_rng(0)
    human = (rng.random((6, 500)) < np.array([0.0, 0.0, 0.0, 0.5, 0.6, 0.7])[:, None]).astype(float)
    judge = np.zeros_like(human)  # a judge that puts every config within alpha: the start is the last one
    plain = run_pilot(judge, 0.1, 100, 0, seed=3)
    assert plain.start == 5 and plain.human_labels == 0 and plain.judge_labels == 600
    run = run_pilot(judge, 0.1, 100, 0, seed=3, human=human, check=20)
    assert run.start <= 2 and run.check_items == 20 and run.human_labels == 20 * len(run.checked)
    on = pilot_items(500, 100, 3)[:20]
    assert all(np.isclose(m, human[k, on].mean()) for k, m in run.checked.items())
    with pytest.raises(ValueError, match="check must be at least 0"):
        run_pilot(judge, 0.1, 100, 0, seed=3, human=human, check=-1)
