"""Data generators for the simulation tests: i.i.d. draws with a known risk."""



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
