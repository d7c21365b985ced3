"""``certsel audit`` as the command runs it: the audit's repetitions joined with the engine's ranking replay (a
pairwise audit repeats the engine's rounds; the two layers do not import each other)."""

from __future__ import annotations

from certsel.orchestrator.audit.job_audit import audit as _audit
from certsel.orchestrator.engine.ranking_replay import replay_ranking


def audit(cfg, data, **kwargs):
    """:func:`certsel.orchestrator.audit.job_audit.audit` with the engine's ranking replay."""
    return _audit(cfg, data, ranking_replay=replay_ranking, **kwargs)
