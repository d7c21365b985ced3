"""The least favourable fixed sequence for a pilot's start, shared by tests/test_pilot_start.py
and benchmarks/pilot_start.py: configs well within alpha, then the first null just above it,
where a pilot's estimated frontier lands."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# c4 and c5 sit at alpha + 1/items: the first nulls, right after the configs the pilot calls good
RISKS = (0.02, 0.04, 0.06, 0.08, 0.1, 0.1, 0.2, 0.3)
ALPHA = 0.1 - 1e-9


def boundary_table(path, risks=RISKS, seed: int = 0, items: int = 3000) -> list[str]:
    """Write a table of Bernoulli human losses at ``risks`` (exactly, on the table) and a judge
    that agrees with the human on 90% of items to ``path``; returns the candidates' names."""
    rng = np.random.default_rng(seed)
    K = len(risks)
    human = np.zeros((K, items))
    for k, r in enumerate(risks):
        human[k, rng.choice(items, size=int(round(r * items)), replace=False)] = 1.0
    judge = np.where(rng.random(human.shape) < 0.9, human, 1.0 - human)
    names = [f"c{k}" for k in range(K)]
    pq.write_table(pa.table({"candidate": np.repeat(names, items), "item": np.tile(np.arange(items), K),
                             "loss_human": human.ravel(), "loss_judge": judge.ravel(), "rank": np.repeat(np.arange(K), items),
                             "size": np.repeat(np.arange(K, 0, -1).astype(float), items)}), path)
    return names


def boundary_job(path) -> dict:
    """The pilot-started fixed sequence on :func:`boundary_table` (no margin: the start lands on
    the frontier the pilot estimates, next to the first null)."""
    return {"data": {"path": str(path), "judge": "loss_judge", "order": "rank"},
            "objective": {"column": "size"}, "alpha": ALPHA, "delta": 0.1,
            "policy": {"kind": "r-autoeval+"}, "procedure": "fst",
            "budget": {"n": 600, "r": 2, "batch": 50},
            "scheduling": {"start": "pilot", "pilot_items": 200, "pilot_margin": 0}}


def shifted_table(path, shifts: dict, n: int = 1000, seed: int = 5):
    """Write a ranking table to ``path``: model "a" has 0/1 losses with mean about 1/2, and each
    other model of ``shifts`` (name -> k) is "a" with k of its 0 losses turned to 1, so that its
    mean is exactly k / n above a's (a tie claim's boundary when k / n = epsilon)."""
    rng = np.random.default_rng(seed)
    base = (rng.random(n) < 0.5).astype(float)
    flip = rng.permutation(n)
    losses = {"a": base}
    for name, k in shifts.items():
        x = base.copy()
        x[flip[base[flip] == 0][:k]] = 1.0
        losses[name] = x
    pq.write_table(pa.table({"model": np.repeat(list(losses), n), "item": np.tile(np.arange(n), len(losses)),
                             "loss": np.concatenate(list(losses.values()))}), path)
    return path
