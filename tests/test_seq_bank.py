"""SeqBank: many Seq runs on one shared order, checked number for number against Seq objects."""

import numpy as np
import pytest

from certsel.policies import BettingCS, Seq
from certsel.policies.seq_bank import SeqBank


def _seq_runs(values, *, delta, seed, batches, stop_at):
    """Row b: a literal Seq fed its values item by item batch after batch, stopping after
    stop_at[b] batches or once done; the bounds after every batch (NaN once stopped)."""
    B, N = values.shape
    out = np.full((B, len(batches), 4), np.nan)
    for b in range(B):
        p = Seq(N, delta=delta, threshold=0.5, seed=seed, strict=True)
        for k, size in enumerate(batches):
            if k >= stop_at[b] or p.done:
                break
            items = p.next_items(size)
            p.update(items, values[b, items])
            out[b, k] = p.bounds()
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_rows_equal_seq_objects_bit_for_bit(seed):
    """Runs with different values, batch sizes and stopping times (cohorts split as rows
    stop): the bank's bounds, decisions and items equal Seq's exactly."""
    rng = np.random.default_rng(seed)
    B, N = 12, 300
    centre = rng.uniform(0.3, 0.7, size=B)[:, None]
    values = np.clip(centre + 0.25 * rng.standard_normal((B, N)), 0.0, 1.0)
    values[0] = (rng.random(N) < 0.5) * 1.0  # a 0/1 row at the threshold: runs to the end
    batches = [25, 1, 40, 7, 25, 50, 60, 92]
    stop_at = rng.integers(1, len(batches) + 1, size=B)
    want = _seq_runs(values, delta=0.01, seed=seed, batches=batches, stop_at=stop_at)
    bank = SeqBank(N, B, delta=0.01, threshold=0.5, seed=seed, strict=True)
    got = np.full_like(want, np.nan)
    for k, size in enumerate(batches):
        rows = np.flatnonzero((k < stop_at) & ~bank.done)
        if rows.size == 0:
            break
        items = bank.next_items(int(rows[0]), size)
        assert all(np.array_equal(bank.next_items(int(r), size), items) for r in rows)
        bank.feed(rows, values[rows][:, items])
        got[rows, k] = bank.bounds()[rows]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
    assert len(bank._cohorts) > 1  # the rows parted ways


def test_state_round_trip_goes_on_identically():
    rng = np.random.default_rng(3)
    B, N = 5, 120
    values = rng.random((B, N))
    a = SeqBank(N, B, delta=0.05, threshold=0.5, seed=1)
    a.feed(np.arange(B), values[:, a.next_items(0, 30)])
    a.feed([1, 3], values[[1, 3]][:, a.next_items(1, 20)])  # a split cohort
    b = SeqBank.from_state_dict(a.state_dict())
    for bank in (a, b):
        bank.feed([1, 3], values[[1, 3]][:, bank.next_items(1, 50)])
        bank.feed([0, 2, 4], values[[0, 2, 4]][:, bank.next_items(0, 70)])
    assert np.array_equal(a.bounds(), b.bounds()) and np.array_equal(a.n_labeled, b.n_labeled)


def test_take_gives_the_rows_their_own_sequence():
    rng = np.random.default_rng(5)
    cs = BettingCS(6, delta=0.1, grid_size=64)
    y = rng.random((6, 200))
    cs.update(y[:, :100], np.zeros((6, 100)), np.ones((6, 100)), np.full((6, 100), 0.1))
    part = cs.take([4, 1])
    cs.update(y[:, 100:], np.zeros((6, 100)), np.ones((6, 100)), np.full((6, 100), 0.1))
    part.update(y[[4, 1], 100:], np.zeros((2, 100)), np.ones((2, 100)), np.full((2, 100), 0.1))
    assert np.array_equal(part.lower, cs.lower[[4, 1]]) and np.array_equal(part.upper, cs.upper[[4, 1]])
    assert cs.regrids > 0  # the rows' grids were rebuilt from their history after the cut


def test_bad_feeds_are_refused():
    bank = SeqBank(50, 3, delta=0.1, threshold=0.5, seed=0)
    bank.feed([0, 1], np.full((2, 10), 0.5))
    with pytest.raises(ValueError, match="equally far"):
        bank.feed([0, 2], np.full((2, 5), 0.5))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bank.feed([2], np.full((1, 5), 1.5))
    with pytest.raises(ValueError, match="left"):
        bank.feed([2], np.full((1, 51), 0.5))
    with pytest.raises(ValueError, match="shape"):
        bank.feed([2], np.full(5, 0.5))
    with pytest.raises(ValueError, match="distinct"):
        bank.feed([2, 2], np.full((2, 5), 0.5))
