"""``scheduling.start: pilot``: a fixed sequence that starts near its frontier. The judge-only pilot
(:mod:`certsel.policies.pilot`, which says why the guarantee is unchanged) picks the start; the job's candidates are
then the configs from the start on, in the same order, and the configs before it are recorded as not tested
(``JobData.pilot``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from certsel.config import RunConfig
from certsel.policies.pilot import run_pilot

from certsel.orchestrator.inputs.jobdata import JobData, PilotStart, _subset


def start_from_pilot(cfg: RunConfig, data: JobData) -> JobData:
    """``data`` restricted to the configs from the pilot's start on (unchanged for a job that starts at the top, or
    whose pilot already ran)."""
    if cfg.scheduling.start != "pilot" or data.pilot is not None:
        return data
    table = data.table
    if table is None or table.judge is None:
        raise ValueError("scheduling.start: pilot needs the judge's losses (a replay table with data.judge)")
    sch = cfg.scheduling
    run = run_pilot(table.judge, data.policy_config(cfg).alpha, sch.pilot_items, sch.pilot_margin, cfg.seed,
                    human=table.human, check=sch.pilot_check)
    names = data.names
    recorded = recorded_start(cfg, data)
    if recorded is not None and recorded[0] == run.start:  # its own pilot's start (a resumed job's, say): not pinned
        recorded = None
    start = run.start if recorded is None else recorded[0]
    pilot = PilotStart(start=names[start], skipped=tuple(names[:start]), items=run.items,
                       margin=sch.pilot_margin, estimates={n: float(e) for n, e in zip(names, run.estimates, strict=False)},
                       judge_labels=run.judge_labels, checked={names[k]: m for k, m in run.checked.items()},
                       human_labels=run.human_labels, pinned_by=None if recorded is None else recorded[1],
                       piloted=names[run.start])
    return dataclasses.replace(data, table=_subset(table, np.arange(start, len(names))), pilot=pilot)


def recorded_start(cfg: RunConfig, data: JobData) -> tuple[int, str] | None:
    """(the start, the job) of the fixed sequence its claims were first tested in, when the store's ledger records
    one for this order: a rerun starts where that selection started, whatever its own pilot says, so that its family
    stays the one its claims were tested in (orchestrator/engine/claims.py). None: no such record."""
    import pathlib

    if cfg.state.store is None or not pathlib.Path(cfg.state.store).exists():
        return None
    from certsel.workers.claims import ClaimLedger, claim_key

    from .claims import claim_identities

    identities = claim_identities(cfg, data)
    if any(i is None for i in identities):
        return None
    keys = [claim_key(i, cfg.alpha / data.unit) for i in identities]
    ledger = ClaimLedger(cfg.state.store)
    try:
        for s, key in enumerate(keys):
            family = ledger.family(key)
            if family is not None and family.procedure == cfg.procedure and family.members == tuple(keys[s:]):
                return s, family.job or "?"
    finally:
        ledger.close()
    return None
