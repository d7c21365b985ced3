"""Moved to :mod:`certsel.orchestrator.results.multitask` (this path goes in the next release)."""

from certsel.orchestrator._moved import alias

alias(__name__)
