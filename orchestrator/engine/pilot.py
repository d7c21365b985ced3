"""``scheduling.start: pilot``: a fixed sequence that starts near its frontier. The judge-only
pilot (:mod:`certsel.policies.pilot`, which says why the guarantee is unchanged) picks the
start; the job's candidates are then the configs from the start on, in the same order, and
the configs before it are recorded as not tested (``JobData.pilot``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from certsel.config import RunConfig
from certsel.policies.pilot import pilot_items, pilot_start

from certsel.orchestrator.inputs.jobdata import JobData, PilotStart, _subset


def start_from_pilot(cfg: RunConfig, data: JobData) -> JobData:
    """``data`` restricted to the configs from the pilot's start on (unchanged for a job that
    starts at the top, or whose pilot already ran)."""
    if cfg.scheduling.start != "pilot" or data.pilot is not None:
        return data
    table = data.table
    if table is None or table.judge is None:
        raise ValueError("scheduling.start: pilot needs the judge's losses (a replay table with data.judge)")
    items = pilot_items(table.items.size, cfg.scheduling.pilot_items, cfg.seed)
    start, est = pilot_start(table.judge[:, items], data.policy_config(cfg).alpha, cfg.scheduling.pilot_margin)
    names = data.names
    # the pilot runs down the sequence and stops at the first config the judge puts above alpha
    beyond = np.flatnonzero(est > data.policy_config(cfg).alpha)
    piloted = len(names) if beyond.size == 0 else int(beyond[0]) + 1
    pilot = PilotStart(start=names[start], skipped=tuple(names[:start]), items=int(items.size),
                       margin=cfg.scheduling.pilot_margin,
                       estimates={n: float(e) for n, e in zip(names[:piloted], est[:piloted], strict=True)},
                       judge_labels=int(items.size) * piloted)
    return dataclasses.replace(data, table=_subset(table, np.arange(start, len(names))), pilot=pilot)
