"""Cer-Eval on real AlpacaEval losses: saving ratio at epsilon = 1.5 epsilon*, per model.

12 models x 805 instructions (bundled in examples/data/), MiniLM embeddings as the feature
space of Algorithm 2, delta = 0.05, epsilon = 1.5 sqrt(ln(1/delta)/(2 * 805)) = 0.0647.
Each policy runs on ``--shuffles`` random item orders (seeds) per model. Saving ratio =
1 - labels / 805. Failure: the final interval excludes the model's mean loss over all 805
items (the paper's metric for real data), with a one-sided 95% Clopper-Pearson upper bound
over all runs of the policy.

Policies: Seq and Cer-Eval with the paper's radii and with the stratified betting sequence,
and Cer-Eval with AlpacaEval's own sub-source column ("dataset": 5 groups) as a fixed
partition. The betting policies certify the mean over the 805 items, which is also the
reference for failures here.

    python benchmarks/cer_eval_alpacaeval.py [--shuffles 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy import stats

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the fixtures shared with the tests

from certsel.policies import CerEval, FixedPartition, NearestNeighborPartition, Seq, epsilon_star
from helpers.alpacaeval import load_preference_table

DELTA = 0.05
POLICIES = ["seq/paper", "cer-eval/paper", "seq/betting", "cer-eval/betting", "subsets/betting"]
_TABLE = None


def _table():
    global _TABLE
    if _TABLE is None:
        _TABLE = load_preference_table()
    return _TABLE


def one(args):
    m, shuffles = args
    t = _table()
    z = t.losses[m]
    n = z.size
    eps = 1.5 * float(epsilon_star(n, DELTA))
    knn = NearestNeighborPartition(t.features)
    subsets = FixedPartition(t.subsets)
    out = {}
    for name in POLICIES:
        kind, radius = name.split("/")
        used, miss = np.empty(shuffles), np.empty(shuffles, dtype=bool)
        for s in range(shuffles):
            if kind == "seq":
                p = Seq(n, delta=DELTA, epsilon=eps, radius=radius, seed=s)
            else:
                p = CerEval(n, knn if kind == "cer-eval" else subsets, delta=DELTA, epsilon=eps, radius=radius, seed=s)
            r = p.run(z)
            used[s] = r.n_labeled
            miss[s] = not (r.ci[0] <= z.mean() <= r.ci[1])
        out[name] = (1.0 - used.mean() / n, int(miss.sum()))
    return m, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shuffles", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    t = _table()
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as ex:
        results = dict(ex.map(one, [(m, args.shuffles) for m in range(len(t.models))]))
    n = t.losses.shape[1]
    print(f"<!-- {len(t.models)} models x {args.shuffles} shuffles, {time.perf_counter() - t0:.0f} s -->")
    print(f"\nepsilon = 1.5 epsilon* = {1.5 * float(epsilon_star(n, DELTA)):.4f}, delta = {DELTA}\n")
    print("| model | mean loss | sd | " + " | ".join(POLICIES) + " |")
    print("|---|---|---|" + "---|" * len(POLICIES))
    for m, name in enumerate(t.models):
        z = t.losses[m]
        cells = [f"{results[m][p][0]:.3f} ({results[m][p][1]})" for p in POLICIES]
        print(f"| {name} | {z.mean():.3f} | {z.std():.3f} | " + " | ".join(cells) + " |")
    runs = len(t.models) * args.shuffles
    print("| **failures / runs (95% upper bound)** | | | " + " | ".join(
        f"{sum(results[m][p][1] for m in results)}/{runs} "
        f"({stats.beta.ppf(0.95, sum(results[m][p][1] for m in results) + 1, runs - sum(results[m][p][1] for m in results)):.4f})"
        for p in POLICIES) + " |")


if __name__ == "__main__":
    main()
