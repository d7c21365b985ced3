"""Testing candidates stepped together: those at the same label count, with the same test settings, have their
:class:`~certsel.policies.SequentialTest` states stacked and updated in one vectorised call, and those with the same
test settings have their final bounds searched in one call per chunk (the shorter padded), then split back, each
candidate's numbers up to the last bit (BLAS may add a stacked sum in another order). A label source that fails for
good ends only its own candidate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from certsel.policies import SequentialTest, confidence_interval, decision_upper_bound
from certsel.policies.sampling import IID

from .candidate import mirrored
from .contracts import LabelsPending, Snapshot, SourceError

if TYPE_CHECKING:
    from .candidate import TestingCandidate


def guarded_step(c, batch: int) -> Snapshot:
    """``c.step(batch)``; a label source that failed for good ends this candidate only (its snapshot says so; the driver
    marks it not certified)."""
    try:
        return c.step(batch)
    except SourceError as err:
        return c.failed(err)
    except LabelsPending:  # people have not answered yet: nothing changed, the snapshot says so
        return c.snapshot()


def step_together(cands: list[TestingCandidate], batch: int) -> list[Snapshot]:
    """Advance testing candidates at the same label count as one batch: their :class:`SequentialTest` states are
    stacked, updated with one vectorised call and split back (each candidate's e-values up to the last bit: BLAS may add
    a stacked sum in another order). A candidate whose source fails for good ends; the others go on with the labels they
    already bought (each label bought and held once)."""
    t, n = cands[0].t, cands[0].n
    if len(cands) == 1 or any(c.t != t or c.n != n or not c.stacks_with(cands[0]) for c in cands):
        return [guarded_step(c, batch) for c in cands]
    got, apart = [], {}
    for c in cands:
        try:
            got.append(c.fetch(batch))
        except SourceError as err:  # this candidate's source failed for good; the others go on
            apart[c.name] = c.failed(err)
            got.append(None)
        except LabelsPending:  # nothing answered yet: it waits, the others go on
            apart[c.name] = c.snapshot()
            got.append(None)
    ok = [(c, g) for c, g in zip(cands, got, strict=True) if c.name not in apart]
    full = [(c, g) for c, g in ok if g is None or g[0].size == min(batch, n - t)]
    for c, g in ok:  # part of the batch answered (a queue of people): updated on its own
        if g is not None and g[0].size < min(batch, n - t):
            apart[c.name] = c.absorb(g)
    done = dict(zip([c.name for c, _ in full], _update_together(full), strict=True))
    return [apart.get(c.name) or done[c.name] for c in cands]


def _update_together(fetched: list[tuple[TestingCandidate, tuple | None]]) -> list[Snapshot]:
    """The stacked update of :func:`step_together` on fetched labels (None: the budget is spent, for all alike: they
    share t and n)."""
    if not fetched:
        return []
    cands = [c for c, _ in fetched]
    got = [g for _, g in fetched]
    if got[0] is None:
        return [c.snapshot() for c in cands]
    h = np.stack([g[0] for g in got])
    jl = ju = None
    if got[0][1] is not None:
        jl, ju = np.stack([g[1] for g in got]), np.stack([g[2] for g in got])
    test = SequentialTest.stack([c.test for c in cands])
    path = test.update(h, jl, ju)
    if cands[0].futility is not None:  # the mirrored tests, stacked the same way
        fut = SequentialTest.stack([c.futility for c in cands])
        fpath = np.asarray(fut.update(*mirrored(h, jl, ju)), dtype=np.float64)
        for i, (c, part) in enumerate(zip(cands, fut.split(), strict=True)):
            c.futility, c._futility_path = part, fpath[i]
    # the snapshot numbers for the whole batch at once (the same formulas as snapshot())
    log_e, max_log_e, weights = test.log_evalue.tolist(), test.max_log_evalue.tolist(), test.rho_weights
    est = test.estimate
    weights = weights.tolist()
    out = []
    for i, (c, part) in enumerate(zip(cands, test.split(), strict=True)):
        c.test = part
        out.append(c.after_update(path[i], (log_e[i], max_log_e[i], weights[i], float(est[i]))))
    return out


# rows of one stacked bound search: a search holds (points, rows, S, labels) arrays, so rows are taken in chunks
_BOUND_ROWS = 64


def _stackable(cands: list[TestingCandidate], todo, key) -> list[list[TestingCandidate]]:
    """Groups (of two or more) of the candidates for which ``todo(c)`` holds and whose ``key(c)`` (test settings)
    agree, in chunks of at most :data:`_BOUND_ROWS` of similar label counts: one stacked call per chunk, the shorter
    members padded (:func:`_stacked`); an unhashable key leaves a candidate to its own call."""
    groups: dict = {}
    for c in cands:
        if c.t == 0 or not todo(c):
            continue
        # under sampling without replacement a draw's conditional mean depends on the table left, which padding would
        # draw from: those candidates stack only with others at their own label count
        held = None if isinstance(c.test.sampling, IID) else c.t
        k = (held, c.n, c.horizon, c.test.uses_judge, tuple(np.atleast_1d(c.rhos).tolist()), *key(c))
        try:
            groups.setdefault(k, []).append(c)
        except TypeError:
            continue
    out = []
    for members in groups.values():
        members = sorted(members, key=lambda c: c.t)  # neighbours in label count: little padding per chunk
        out.extend(chunk for i in range(0, len(members), _BOUND_ROWS)
                   if len(chunk := members[i:i + _BOUND_ROWS]) > 1)
    return out


def _stacked(members: list[TestingCandidate]):
    """The members' labels as (K, t) arrays, t the largest label count, and each member's own count: a shorter member's
    arrays are padded with zeros (a loss in range) that the bounds leave out (``n_used``: every bet is chosen from the
    past, so the padding changes none of the steps before it). Judge arrays None without a judge."""
    data = [c._data() for c in members]
    used = np.array([d[0].size for d in data])
    t = int(used.max())

    def pad(arrays, width):
        return np.stack([np.pad(a, (0, width - a.size)) for a in arrays])

    h = pad([d[0] for d in data], t)
    if not members[0].test.uses_judge:
        return (h, None, None), used
    r = members[0].r
    return (h, pad([d[1] for d in data], t), pad([d[2] for d in data], r * t)), used


def intervals_together(cands: list[TestingCandidate]) -> None:
    """:meth:`TestingCandidate.interval` for many candidates, one stacked call per group of equal label counts and tests
    (each row's bisection is its own: the bounds of one call per candidate)."""
    for members in _stackable(cands, lambda c: c._ci is None,
                              lambda c: (c.ci_delta, c.betting.interval_strategy(), c.test.sampling)):
        first = members[0]
        labels, used = _stacked(members)
        lo, hi = confidence_interval(*labels, delta=first.ci_delta, rhos=first.rhos,
                                     betting=first.betting.interval_strategy(), horizon=first.horizon,
                                     sampling=first.test.sampling, past_horizon=True, n_used=used)
        for c, a, b in zip(members, np.asarray(lo).tolist(), np.asarray(hi).tolist(), strict=True):
            c._ci = (float(a), float(b))


def upper_bounds_together(cands: list[TestingCandidate], levels: list[float]) -> None:
    """:meth:`TestingCandidate.upper_bound` of ``cands[i]`` at ``levels[i]``, one stacked call per group of equal label
    counts, tests and levels (each row's search is its own)."""
    at = {id(c): float(lv) for c, lv in zip(cands, levels, strict=True)}
    for members in _stackable(cands, lambda c: at[id(c)] not in c._bound,
                              lambda c: (at[id(c)], c.test.delta, c.test.alpha, c.betting, c.test.observation,
                                         c.test.sampling)):
        first, level = members[0], at[id(members[0])]
        labels, used = _stacked(members)
        got = decision_upper_bound(*labels, level=level, delta=first.test.delta, alpha=first.test.alpha,
                                   rhos=first.rhos, betting=first.betting, horizon=first.horizon,
                                   max_log_evalue=np.array([c.test.max_log_evalue for c in members]),
                                   observation=first.test.observation, sampling=first.test.sampling, past_horizon=True,
                                   n_used=used)
        for c, u in zip(members, np.asarray(got).tolist(), strict=True):
            c._bound[level] = float(u)
