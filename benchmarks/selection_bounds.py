"""Does the selected candidate's bound keep the level it is stated at?

20 candidates, all with R = alpha - 1e-6 (alpha = delta = 0.1): every one can be certified,
each barely, so the selection picks whichever one's data happened to look best. Bernoulli
human losses, a judge that agrees with them on 90% of items, R-AutoEval+ with UP bets,
rounds of 25 labels, n = 300. The selected candidate is the one the selection favours most
(FST: the end of the certified prefix; Bonferroni: the first to certify; Holm: the largest
e-value, with every candidate run to its budget).

For each procedure it prints, over all repetitions, how often a candidate was selected and
its R lies above its own test's bound (stated at its own decision level, e.g. delta/K under
Bonferroni) or above its joint bound (stated at 1 - delta simultaneously for all candidates),
each with a 95% Clopper-Pearson interval. The joint bound is the one certsel quotes next to
the selection.

    python benchmarks/selection_bounds.py [--reps 2000]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from scipy import stats

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from helpers.simulate import selection_trial  # noqa: E402


def cp(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    a = (1 - conf) / 2
    lo = 0.0 if k == 0 else stats.beta.ppf(a, k, n - k + 1)
    hi = 1.0 if k == n else stats.beta.ppf(1 - a, k + 1, n - k)
    return lo, hi


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"K = 20 candidates at R = alpha - 1e-6, alpha = delta = 0.1, R-AutoEval+ (UP), 90%-accurate judge, "
          f"n = 300, rounds of 25, {args.reps} repetitions\n")
    print("| procedure | runs with a selection | own bound: stated miss rate | own bound: measured (95% CP) "
          "| joint bound: stated | joint bound: measured (95% CP) | selections with a joint bound < alpha | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for proc in ("bonferroni", "holm", "fst"):
        t0 = time.perf_counter()
        out = selection_trial(proc, reps=args.reps, seed=args.seed)
        m, reps = out["selections"], out["reps"]
        rows = []
        for key in ("own", "joint"):
            k = out[f"{key}_misses"]
            lo, hi = cp(k, reps)
            rows.append(f"{k / reps:.4f} [{lo:.4f}, {hi:.4f}]")
        print(f"| {proc} | {m} | {out['own_level']:.4g} | {rows[0]} | {out['joint_level']:g} | {rows[1]} | "
              f"{out['joint_below_alpha']} | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
