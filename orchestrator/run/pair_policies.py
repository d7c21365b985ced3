"""Moved to :mod:`certsel.orchestrator.engine.pair_policies` (this path goes in the next release)."""

from certsel.orchestrator._moved import alias

alias(__name__)
