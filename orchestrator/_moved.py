"""The module paths of release 0.1 that moved when ``orchestrator/`` was split into layers.

``certsel.orchestrator.run`` held the commands, the engine and the result model at once, and
``certsel.orchestrator.runtimes`` the engine's hosts; they now live in ``commands/``,
``engine/`` and ``results/``. A plugin that imports an old path gets the new module itself
(the same classes and functions, so ``isinstance`` and monkeypatching keep working) and a
:class:`DeprecationWarning` naming the new path. The old paths go in the next release.
"""

from __future__ import annotations

import importlib
import sys
import warnings

# old module -> new module
MOVED = {
    "certsel.orchestrator.run.engine": "certsel.orchestrator.engine.driver",
    "certsel.orchestrator.run.selection": "certsel.orchestrator.engine.selection",
    "certsel.orchestrator.run.pairwise": "certsel.orchestrator.engine.pairwise",
    "certsel.orchestrator.run.pair_policies": "certsel.orchestrator.engine.pair_policies",
    "certsel.orchestrator.run.plan": "certsel.orchestrator.engine.plan",
    "certsel.orchestrator.run.state": "certsel.orchestrator.engine.state",
    "certsel.orchestrator.run.replicated": "certsel.orchestrator.engine.replicated",
    "certsel.orchestrator.runtimes.hosts": "certsel.orchestrator.engine.hosts",
    "certsel.orchestrator.runtimes.runtime": "certsel.orchestrator.engine.runtime",
    "certsel.orchestrator.runtimes.servers": "certsel.orchestrator.engine.servers",
    "certsel.orchestrator.run.job": "certsel.orchestrator.commands.job",
    "certsel.orchestrator.run.multitask": "certsel.orchestrator.commands.multitask",
    "certsel.orchestrator.run.stages": "certsel.orchestrator.commands.stages",
    "certsel.orchestrator.run.records": "certsel.orchestrator.results.records",
    "certsel.orchestrator.run.tasks": "certsel.orchestrator.results.multitask",
}


def alias(old: str) -> None:
    """Make the module being imported as ``old`` the module it moved to (called from the old file)."""
    new = MOVED[old]
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)
    # the import system hands back whatever sys.modules holds for the name once the file has run
    sys.modules[old] = importlib.import_module(new)
