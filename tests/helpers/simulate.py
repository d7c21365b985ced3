"""Data generators for the simulation tests: i.i.d. draws with a known risk, and the selection
trial of the joint bounds (tests/test_procedures.py, benchmarks/selection_bounds.py)."""

import numpy as np



def bernoulli(rng, reps, n, N, p, flip):
    """Binary human losses with mean p; the judge reports the human loss flipped with
    probability ``flip`` (the setting of Example 1 of R-AutoEval+). The unlabelled items
    have their own unseen human losses, so E[judge] is the same on both sets."""
    h = rng.random((reps, n)) < p
    jl = h ^ (rng.random((reps, n)) < flip)
    ju = (rng.random((reps, N)) < p) ^ (rng.random((reps, N)) < flip)
    return h.astype(float), jl.astype(float), ju.astype(float)


def resample(rng, human_col, judge_col, reps, n, N):
    """i.i.d. draws with replacement from a real (human, judge) loss table column: the
    population is the table itself, so its risk is exactly ``human_col.mean()``."""
    idx = rng.integers(0, human_col.size, size=(reps, n))
    uidx = rng.integers(0, human_col.size, size=(reps, N))
    return human_col[idx], judge_col[idx], judge_col[uidx]


def selection_trial(procedure: str, *, reps: int, K: int = 20, n: int = 300, r: int = 3, alpha: float = 0.1,
                    delta: float = 0.1, batch: int = 25, accuracy: float = 0.9, seed: int = 0, scheme="r-autoeval+",
                    betting="up") -> dict:
    """How often the selected candidate's bounds miss its R, against the levels they are stated at.

    K candidates all with R = alpha - 1e-6 (every one may be certified, each barely), Bernoulli
    human losses and a judge that agrees with them with probability ``accuracy``; each
    candidate labelled in rounds of ``batch`` and stopped at the first round end where its
    e-value reaches its level's threshold (Holm: the whole budget, ``scheduling.mode: full``).
    The selected candidate is the one the selection favours most (FST: the end of the
    certified prefix; Bonferroni: the first to certify; Holm: the largest e-value). Returns
    the selections, the misses of its own bound (stated at its own decision level) and of its
    joint bound (stated at 1 - delta, simultaneously: :meth:`Procedure.simultaneous_bounds`),
    with the levels."""
    from certsel.policies.procedures import get_procedure
    from certsel.policies import decision_upper_bound, log_evalue_paths, scheme_rhos

    proc = get_procedure(procedure)
    rng = np.random.default_rng(seed)
    R = alpha - 1e-6
    h, jl, ju = (x.reshape(reps, K, -1) for x in bernoulli(rng, reps * K, n, r * n, R, flip=1 - accuracy))
    rhos = scheme_rhos(scheme)
    bet_delta = float(proc.candidate_deltas(delta, K)[0])
    log_e = log_evalue_paths(h, jl, ju, alpha=alpha, delta=bet_delta, rhos=rhos, betting=betting)
    ends = np.arange(batch, n + 1, batch)
    running = np.maximum.accumulate(log_e, axis=-1)[..., ends - 1]  # (reps, K, rounds)
    if procedure == "holm":
        n_used = np.full((reps, K), n)
    else:
        hit = running >= -np.log(proc.candidate_deltas(delta, K))[:, None]
        n_used = np.where(hit.any(-1), ends[hit.argmax(-1)], n)
    max_log_e = np.take_along_axis(running, (n_used // batch - 1)[..., None], axis=-1)[..., 0]
    certified = proc.certified(max_log_e, delta)
    chosen = certified.any(-1)
    if procedure == "fst":
        sel = certified.sum(-1) - 1
    elif procedure == "bonferroni":
        sel = np.argmin(np.where(certified, n_used, n + 1), axis=-1)
    else:
        sel = np.argmax(np.where(certified, max_log_e, -np.inf), axis=-1)
    reps_sel = np.flatnonzero(chosen)
    k_sel = sel[reps_sel]
    dec_level = np.array([proc.decision_deltas(delta, max_log_e[i])[k] for i, k in zip(reps_sel, k_sel)])
    joint_level = np.array([proc.joint_levels(delta, certified[i])[k] for i, k in zip(reps_sel, k_sel)])

    def own_bounds(levels):
        out = np.full(reps_sel.size, np.nan)
        for lv in np.unique(levels[~np.isnan(levels)]):
            m = levels == lv
            i, k = reps_sel[m], k_sel[m]
            out[m] = decision_upper_bound(h[i, k], jl[i, k], ju[i, k], level=lv, delta=bet_delta, alpha=alpha,
                                          rhos=rhos, betting=betting, n_used=n_used[i, k],
                                          max_log_evalue=max_log_e[i, k], horizon=n)
        return out

    own = own_bounds(dec_level)
    own_joint = own_bounds(joint_level)
    joint = np.empty(reps_sel.size)
    for j, (i, k) in enumerate(zip(reps_sel, k_sel)):
        vec = np.full(K, np.nan)
        vec[k] = own_joint[j]
        joint[j] = proc.simultaneous_bounds(delta, alpha, certified[i], vec)[k]
    return {"procedure": procedure, "reps": reps, "selections": int(reps_sel.size), "R": R,
            "own_misses": int(np.sum(own < R)), "own_level": float(np.max(dec_level)) if dec_level.size else None,
            "joint_misses": int(np.sum(joint < R)), "joint_level": delta,
            "joint_below_alpha": int(np.sum(joint < alpha)), "certified_mean": float(certified.sum(-1).mean())}
