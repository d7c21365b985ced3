"""Every realistic mistake of tests/helpers/mistakes.py (the table in docs/reliability.md),
run for real: a one-line error naming the problem, exit status 2, in seconds, and nothing
left behind (no job folder, no MLflow run)."""

import pytest

from helpers.mistakes import MISTAKES, attempt

pytestmark = pytest.mark.integration  # the CLI, MLflow, Ray


def test_there_are_forty_or_more():
    assert len(MISTAKES) >= 40 and len({m.what for m in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.what for m in MISTAKES])
def test_mistake(tmp_path, mistake):
    out = attempt(mistake, tmp_path)
    assert out.status == mistake.status, out
    if mistake.expect:  # `certsel` alone prints its usage instead
        assert out.lines == 1 and out.message.startswith("certsel: error: "), out
        assert mistake.expect in out.message, out
    assert out.left == [], out
    assert out.seconds < 60, out
