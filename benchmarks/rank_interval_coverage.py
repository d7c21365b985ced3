"""Rank intervals' simultaneous coverage, by simulation over many shuffles of one table.

The table: 6 models on 600 items with 0/1 losses, built so that two pairs have *exactly* the
same mean on the table (the second model of each is a permutation of the first's losses) and the
other gaps are 0.03-0.09:

    a = b = 0.30,  c = 0.33,  d = e = 0.36,  f = 0.45

Exactly tied models are where a certified order is most likely to be wrong (any order between
them is wrong), so the rank intervals have the least room. Each repetition runs
``procedure: pairwise`` (Seq pair policies, batches of 25, budget = the whole table) through the
engine with its own seed -- a new uniformly random order -- and checks, against the table:

* coverage: every model's true rank (1 + the models with a strictly lower mean) lies in its
  certified [best, worst] rank interval, all models at once;
* wrong orders (a certified "x better than y" with mean(x) >= mean(y)) and false ties (a pair
  certified tied within epsilon whose difference is >= epsilon), and the runs with either: the
  family-wise failure, at most delta.

The guarantee: coverage >= 1 - delta (rank intervals only use certified orders, which all hold
together with probability >= 1 - delta). Printed with the 99% Clopper-Pearson lower bound of the
coverage.

    python benchmarks/rank_interval_coverage.py --reps 1000 [--workers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import pathlib
import sys
import tempfile
import time

import numpy as np

N = 600
MEANS = {"a": 0.30, "b": 0.30, "c": 0.33, "d": 0.36, "e": 0.36, "f": 0.45}


def exact_table(path: pathlib.Path, seed: int = 0) -> pathlib.Path:
    """The table above: each model's 0/1 losses with exactly round(mean * N) ones, b and e
    permutations of a and d."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    losses = {}
    for m, mu in MEANS.items():
        twin = {"b": "a", "e": "d"}.get(m)
        if twin is not None:
            losses[m] = losses[twin][rng.permutation(N)]
        else:
            x = np.zeros(N)
            x[rng.choice(N, size=round(mu * N), replace=False)] = 1.0
            losses[m] = x
    pq.write_table(pa.table({"model": np.repeat(list(losses), N), "item": np.tile(np.arange(N), len(losses)),
                             "loss": np.concatenate(list(losses.values()))}), path)
    return path


def one_run(args) -> tuple[bool, int, int, int]:
    """(covered, wrong orders, false ties, model evaluations) of one seed."""
    from certsel.config import parse_config
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job

    path, delta, epsilon, seed = args
    pairwise = {"goal": "ranking", **({} if epsilon is None else {"epsilon": epsilon})}
    cfg = parse_config({"data": {"path": path, "candidate": "model", "human": "loss"}, "policy": {"kind": "seq"},
                        "procedure": "pairwise", "delta": delta, "pairwise": pairwise, "seed": seed,
                        "budget": {"n": N, "batch": 25}, "tracking": {"intervals": "none"}})
    data = load_job_data(cfg)
    res = run_job(cfg, data, LocalRuntime(1), collect_labels=False)
    rk, truth = res.ranking, dict(zip(data.names, data.table.true_risk, strict=True))
    rank = {m: 1 + sum(truth[j] < truth[m] for j in truth) for m in truth}
    covered = all(lo <= rank[m] <= hi for m, (lo, hi) in rk.rank_intervals.items())
    wrong = sum(truth[a] >= truth[b] for a, bs in rk.better.items() for b in bs)
    false_ties = sum(abs(truth[a] - truth[b]) >= epsilon for a, b in (p.split(" ~ ") for p in rk.tied)) if epsilon else 0
    return covered, int(wrong), int(false_ties), int(res.spent["human"])


def main(argv=None) -> int:
    from scipy.stats import beta

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"{args.reps} shuffles per row; 6 models x {N} items, means {MEANS}\n")
    print("| delta | epsilon | rank intervals cover (99% CP lower) | runs with a wrong order | wrong orders | "
          "false ties | runs with either (99% CP upper) | model evaluations (saved) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp, mp.get_context("spawn").Pool(args.workers) as pool:
        path = str(exact_table(pathlib.Path(tmp) / "exact.parquet"))
        for delta, epsilon in ((0.1, None), (0.1, 0.05), (0.05, None)):
            t = time.perf_counter()
            rows = pool.map(one_run, [(path, delta, epsilon, s) for s in range(args.reps)])
            cov, wrong, ties, evals = (np.array(c) for c in zip(*rows, strict=True))
            k, n = int(cov.sum()), len(rows)
            lower = 0.0 if k == 0 else float(beta.ppf(0.01, k, n - k + 1))
            f = int(np.sum((wrong > 0) | (ties > 0)))  # the family-wise failures: any false claim
            upper = 1.0 if f == n else float(beta.ppf(0.99, f + 1, n - f))
            full = len(MEANS) * N
            print(f"| {delta} | {epsilon or '-'} | {k / n:.3f} ({lower:.3f}) | {np.mean(wrong > 0):.3f} | "
                  f"{wrong.sum()} | {ties.sum()} | {f / n:.3f} ({upper:.3f}) | {evals.mean():.0f} of {full} "
                  f"({1 - evals.mean() / full:.0%}) |"
                  f"  <!-- {time.perf_counter() - t:.0f} s -->", flush=True)
    print(f"\n<!-- {time.perf_counter() - t0:.0f} s -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
