"""The goals, registered by name, and the one place a job's goal is chosen.

A goal class says which jobs it serves (:meth:`~.base.Goal.asked`, on an :class:`~.base.Ask` read alike from a
configuration, a result or a certificate); where several say yes, the most derived class wins, so a goal that
refines another (a gate of a risk) needs no change to the one it refines. A new goal kind is one module with a
registered class, imported by the package.
"""

from __future__ import annotations

from .base import Ask, Goal

GOALS: dict[str, Goal] = {}


def register(cls: type[Goal]) -> type[Goal]:
    """Register a goal class under its ``name`` (one instance: goals hold no state)."""
    if not cls.name or cls.name in GOALS and type(GOALS[cls.name]) is not cls:
        raise ValueError(f"goal {cls.__name__}: its name {cls.name!r} is empty or taken")
    GOALS[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Remove a goal (a test's, or a plugin's own goal it replaces)."""
    GOALS.pop(name, None)


def choose(ask: Ask) -> Goal:
    """The one goal serving ``ask``: of those that say yes, the one whose class derives from all the others'."""
    yes = [g for g in GOALS.values() if g.asked(ask)]
    best = [g for g in yes if all(isinstance(g, type(o)) for o in yes)]
    if len(best) != 1:
        names = ", ".join(g.name for g in yes) or "none"
        raise ValueError(f"no single goal for this job ({ask}): goals that serve it: {names}")
    return best[0]


def goal_of(cert) -> Goal:
    """The goal a certificate states."""
    from ..tasks_schema import TasksCertificate

    if isinstance(cert, TasksCertificate):  # a multi-task job's certificate lists tasks, not one claim
        return choose(Ask(tasks=True, job=cert.job))
    kind = None if cert.claim is None else cert.claim.kind
    return choose(Ask(ranking=cert.ranking is not None, recovery=kind == "recovery", regression=kind == "regression",
                      stacked=cert.aggregate is not None, gates=cert.gate is not None, job=cert.job))


def goal_for_config(cfg, stacked: bool | None = None) -> Goal:
    """The goal a job's configuration asks for (``stacked``: whether its data was stacked, once known)."""
    return choose(Ask(ranking=cfg.proc.ranking, recovery=cfg.recovery is not None,
                      regression=cfg.regression is not None,
                      stacked=cfg.aggregate is not None if stacked is None else stacked, gates=cfg.proc.gates,
                      job=cfg.name))


def goal_for(result) -> Goal:
    """The goal a finished job's result states (its certificate is being built)."""
    return goal_for_config(result.cfg, stacked=result.data.aggregate is not None)
