"""A job's stages, named and timed (the progress line, ``--log-level info``, ``selection.json``'s ``stages``).

``on_stage(name)`` is told when a stage starts, so a front end never shows a frozen line. Stages may overlap (the
MLflow store opens while Ray starts): each keeps its own wall-clock seconds.
"""

from __future__ import annotations

import contextlib
import logging
import time

log = logging.getLogger("certsel.job")

# the stages of `certsel run` in start order (some skipped without tracking); after Ray, a source kind may run its
# own (SourceKind.prepare_stage, e.g. "starting servers")
LOADING, RAY, TRACKING, RUNS, ROUNDS, REPORT, LOGGING, STOPPING = (
    "loading data", "starting Ray", "opening MLflow", "creating MLflow runs", "rounds",
    "writing the report", "logging to MLflow", "stopping Ray")


class StageClock:
    """Seconds per named stage; each start is logged at info and told to ``on_stage``."""

    def __init__(self, on_stage=None):
        self.seconds: dict[str, float] = {}
        self._on_stage = on_stage

    @contextlib.contextmanager
    def stage(self, name: str, tell: bool = True):
        """Time ``name``; ``tell=False`` for a stage run beside another (not shown as the current one)."""
        log.info("%s", name)
        if tell and self._on_stage is not None:
            self._on_stage(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - t0
            self.seconds[name] = self.seconds.get(name, 0.0) + took
            log.info("%s: %.2f s", name, took)
