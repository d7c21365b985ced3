"""A release series: gates of successive releases of one model, with the error controlled over the whole series.

Release k of a series (its k-th claim ever gated in it, in the order they were first gated) is tested at

    delta_k = delta / (k (k + 1)),     sum_k delta_k = delta,

so by the union bound the chance that *any* release ever gated in the series gets a false pass (or a false fail) is at
most the series' delta, however long the series grows. The series ledger (a table of the label store's file) gives each
claim its position once: a rerun of a release's claim, with any seed or front end, gets the same position and level,
and continues the claim's one test (workers/claims.py), so reruns never add chances to pass. A job with several
candidates gives each new claim the next position, and all of them the smallest level among them (a stricter level
than a release's own keeps the sum below delta). The series' delta is fixed by its first gate.
"""

from __future__ import annotations

import sqlite3
import time

from certsel.errors import InputError
from certsel.workers.claims import ClaimLedger, claim_key
from certsel.workers.label_store import LOCK_TIMEOUT, SERIES_DDL

from .claims import adopt_legacy, claim_identities


def release_level(delta: float, k: int) -> float:
    """delta_k = delta / (k (k + 1)): release k's level (k >= 1); the levels sum to delta."""
    if k < 1:
        raise ValueError("releases are numbered from 1")
    return float(delta) / (k * (k + 1))


def in_series(cfg, data):
    """``cfg`` with its series resolved: each candidate's release in the series (new claims appended, in the job's
    order), the series' delta, and the job's delta set to the smallest of its releases' levels (a gate tests every
    candidate at that level, its fail test too). Bad input: no label store, or a delta other than the series'."""
    series = cfg.series
    if cfg.state.store is None:
        raise InputError(f"series {series.name!r}: needs the label store (state.store), where the series is kept")
    keys, identities = [], claim_identities(cfg, data)
    ledger = ClaimLedger(cfg.state.store)
    try:  # a release recorded under an earlier release's identity of its claim is that release still
        adopt_legacy(cfg, data, ledger, identities)
    finally:
        ledger.close()
    for name, identity in zip(data.names, identities, strict=True):
        if identity is None:
            raise InputError(f"series {series.name!r}: candidate {name} has no label identity (a live server, a "
                             "Python function or people): its releases cannot be told apart across runs")
        keys.append((name, claim_key(identity, cfg.alpha / data.unit)))
    db = sqlite3.connect(cfg.state.store, timeout=LOCK_TIMEOUT, isolation_level=None)
    try:
        db.execute(SERIES_DDL)
        db.execute("begin immediate")
        rows = db.execute("select release, claim, delta from series where series = ? order by release",
                          (series.name,)).fetchall()
        delta = rows[0][2] if rows else cfg.delta
        # the job's delta is the series' level: the first gate fixes it, every later one must state the same
        if rows and abs(cfg.delta - delta) > 1e-12:
            db.execute("rollback")
            raise InputError(f"series {series.name!r}: was started at delta {delta:g}; gate its releases with delta "
                             f"{delta:g} (each gets its share delta / (k (k + 1))), not {cfg.delta:g}")
        known = {claim: k for k, claim, _ in rows}
        nxt = len(rows) + 1
        releases = []
        for name, key in keys:
            if key not in known:
                db.execute("insert into series values (?, ?, ?, ?, ?, ?)", (series.name, nxt, key, name, delta,
                                                                            time.time()))
                known[key] = nxt
                nxt += 1
            releases.append(known[key])
        db.execute("commit")
    except sqlite3.Error as exc:
        raise InputError(f"label store {cfg.state.store}: the series ledger cannot be written ({exc})") from None
    finally:
        db.close()
    level = min(release_level(delta, k) for k in releases)
    sched = cfg.scheduling.model_copy(update={"futility": level})
    return cfg.model_copy(update={"delta": level, "scheduling": sched,
                                  "series": series.model_copy(update={"delta": delta, "releases": releases})})
