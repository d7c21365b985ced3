"""Cer-Eval cost on an MMLU-sized test set: 14,000 items with 384-d embeddings.

The embeddings are 40 Gaussian clusters on the unit sphere of R^384 (sklearn make_blobs,
L2-normalised, like MiniLM sentence embeddings) and the 0/1 losses have a per-cluster
error rate, so the 1-NN partition has structure to find. Reports wall time for a run to
epsilon = 0.03 and a full run over all 14,000 items (every re-partition of the schedule
a * beta^t), for the raw 384-d features and for a 32-component PCA projection, and the
number of partitions fitted.

    python benchmarks/bench_cer_eval.py
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.datasets import make_blobs

from certsel.policies import CerEval, NearestNeighborPartition, oracle


def main():
    n, d = 14_000, 384
    x, cluster = make_blobs(n_samples=n, n_features=d, centers=40, cluster_std=4.0, random_state=0)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rate = np.random.default_rng(0).beta(0.6, 0.6, size=40)
    losses = (np.random.default_rng(1).random(n) < rate[cluster]).astype(float)
    print(f"{n} items x {d}-d, mean loss {losses.mean():.3f}\n")
    print("| features | radius | epsilon | labels | final K | partitions | seconds |")
    print("|---|---|---|---|---|---|---|")
    for comps in (None, 32):
        t0 = time.perf_counter()
        part = NearestNeighborPartition(x, n_components=comps)
        prep = time.perf_counter() - t0
        for radius in ("betting", "paper"):
            for eps in (0.03, None):
                p = CerEval(n, part, delta=0.05, epsilon=eps, radius=radius, seed=0)
                t0 = time.perf_counter()
                r = p.run(losses)
                secs = time.perf_counter() - t0
                label = "384-d" if comps is None else f"PCA {comps} (+{prep:.1f} s once)"
                print(f"| {label} | {radius} | {eps if eps else 'full run'} | {r.n_labeled} | {p.n_groups} "
                      f"| {p.n_partitions} | {secs:.1f} |")
    for radius in ("betting", "paper"):
        p = oracle(n, cluster, delta=0.05, epsilon=0.03, radius=radius, seed=0)
        t0 = time.perf_counter()
        r = p.run(losses)
        print(f"| true 40 clusters (fixed) | {radius} | 0.03 | {r.n_labeled} | {p.n_groups} | 1 "
              f"| {time.perf_counter() - t0:.1f} |")


if __name__ == "__main__":
    main()
