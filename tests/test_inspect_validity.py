"""Validity through inspect-ai: a task whose mean score is just below T, run many times with
different shuffles, concurrency 10, and wrong answers ten to a hundred times slower than right
ones. Fed in schedule order (certsel's ledger) the certificate is wrong in at most about delta
of the runs; fed in completion order the same runs certify far more often, which is why the
manager keeps the schedule order. benchmarks/inspect_stopping.py runs the same experiment 300
times per order for docs/inspect.md."""

import pytest
from scipy.stats import binomtest

from helpers.inspect_tasks import boundary_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPS = 32


def test_schedule_order_keeps_the_error_below_delta_and_completion_order_does_not(tmp_path):
    scheduled = boundary_runs(REPS, tmp_path / "schedule", slow=0.1)
    completed = boundary_runs(REPS, tmp_path / "completion", slow=0.1, order="completion")
    wrong_s = sum(c.certified for c in scheduled)  # the mean score is 0.69 < 0.7: every certificate is wrong
    wrong_c = sum(c.certified for c in completed)
    # schedule order: consistent with a rate <= delta = 0.1 (one-sided binomial test at 1%)
    assert binomtest(wrong_s, REPS, 0.1, alternative="greater").pvalue > 0.01, (wrong_s, REPS)
    # completion order sees the fast right answers first and certifies the false claim far more often
    assert wrong_c >= wrong_s + 5, (wrong_c, wrong_s)
    assert binomtest(wrong_c, REPS, 0.1, alternative="greater").pvalue < 0.01, (wrong_c, REPS)
    assert all(not c.exact for c in scheduled + completed if c.certified)
