"""A gate inside a test suite: ``assert_certified`` passes, fails or skips a pytest test.

    from certsel.testing import assert_certified

    def test_quantized_model_keeps_95_percent():
        assert_certified("gates/recovery.yaml", only=["w4a16"])

Pass: every gated candidate's claim is certified at delta (the :class:`~certsel.gates.GateResult` is returned).
Fail: some candidate's opposite is certified (an ``AssertionError`` naming each with its bound). Undecided: the budget
ran out first for some candidate and none failed (``pytest.skip``: raise the budget); outside pytest,
:class:`Undecided` is raised.
"""

from __future__ import annotations

from certsel.gates import GateResult, gate

__all__ = ["Undecided", "assert_certified"]


class Undecided(AssertionError):
    """A gate that neither passed nor failed within its budget (outside pytest)."""


def assert_certified(job, *, only=None, overrides=(), output=None, track: bool = False, fresh: bool = False,
                     **kw) -> GateResult:
    """Gate ``job`` (as :func:`certsel.gate`) and turn its outcome into the test's (module docstring)."""
    res = gate(job, only=only, overrides=overrides, output=output, track=track, fresh=fresh, **kw)
    lines = "\n".join(r.line() for r in res.rows if r.outcome != "pass")
    if res.exit_code == 1:
        raise AssertionError(f"certsel gate: {len(res.selection.gate.failed)} candidate(s) failed\n{lines}")
    if res.exit_code == 3:
        message = f"certsel gate: undecided within the budget\n{lines}"
        try:
            import pytest
        except ImportError:
            raise Undecided(message) from None
        pytest.skip(message)
    return res
