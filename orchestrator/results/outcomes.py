"""A gated candidate's outcome and a gate's exit status: plain enums, no heavy imports."""

from __future__ import annotations

from enum import StrEnum

# the statuses (records.Status values) of a candidate whose claim's opposite was certified
FAIL_STATUSES = ("futile", "above alpha")
# a futility stop's reason, on the tested losses; a goal words it as its claim's opposite (Goal.reason)
FUTILE_WORDS = "R >= alpha certified"
# a budget stop's reason (policies/budget_stop.py): not certified, its remaining budget unlikely to certify it
BUDGET_STOP_WORDS = "budget stop"


def budget_stopped(status: str, reason: str | None) -> bool:
    """Whether a candidate with this status (records.Status, or its value in a certificate) and reason was ended by
    the budget stop: not certified, for the stop's reason."""
    return str(status) == "not certified" and (reason or "").startswith(BUDGET_STOP_WORDS)


class Outcome(StrEnum):
    """A gated candidate's outcome: ``pass`` (claim certified at delta), ``fail`` (the opposite certified: futility
    test, or an estimation policy's R > alpha), ``undecided`` (neither within budget, or the source failed)."""

    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"

    @classmethod
    def of(cls, status: str, certified: bool) -> Outcome:
        """The outcome of a candidate with this status (records.Status, or its value in a certificate)."""
        if certified:
            return cls.PASS
        return cls.FAIL if str(status) in FAIL_STATUSES else cls.UNDECIDED


def gate_exit_code(outcomes) -> int:
    """``certsel gate``'s exit status: 1 if any candidate failed, else 3 if any is undecided, else 0 (2: bad input)."""
    outcomes = [Outcome(o) for o in outcomes]
    return 1 if Outcome.FAIL in outcomes else 3 if Outcome.UNDECIDED in outcomes else 0
