"""Empirical error rates of every scheme and betting strategy (Markdown, for the docs).

Type-I error: fraction of runs that ever certify R <= alpha when R is slightly above alpha
(Bernoulli, and resamples of the real TriviaQA candidate with R = 0.0994 at alpha = R -
0.002). Coverage: fraction of runs whose two-sided anytime interval (the one a job
reports: a strategy whose bets depend on the target, ONS, reports the intervals of its
``interval_strategy()``) ever excludes the true risk. Each with a one-sided 99%
Clopper-Pearson upper bound, to compare with delta. Every registered betting strategy
(``certsel.policies.STRATEGIES``; ``up`` with its default prior) and UP with eq. (19)'s prior
get a row per scheme, with the paper's observation (eq. 10)
and then with the jobs' default, the split observation (Type-I columns; its interval is the
paper observation's, so the coverage columns are those of the row above).

    python benchmarks/validity_report.py [--reps 2000] [--observations both|paper|split]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from scipy import stats

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from helpers.simulate import bernoulli, resample  # noqa: E402

from certsel.policies import STRATEGIES, UP, certify, effective_observations, scheme_rhos  # noqa: E402
from certsel.policies.autoeval import interval_excludes  # noqa: E402
from certsel.workers.replay import load_loss_table  # noqa: E402

DELTA = 0.1


def upper99(k, n):
    return stats.beta.ppf(0.99, k + 1, n - k) if k < n else 1.0


def bettings() -> dict:
    """Every registered strategy by name (``up`` with its default prior), then UP with eq. 19's
    prior, the paper's (seeds follow the order, so the registered rows keep theirs)."""
    return {**{name: name for name in STRATEGIES}, "up (exact, eq. 19)": UP(prior="exact")}


def excluded(h, jl, ju, R, rhos, betting):
    obs = effective_observations(h, jl, ju, rhos=rhos)
    return interval_excludes(obs, R, delta=DELTA, betting=betting)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--observations", choices=["both", "paper", "split"], default="both")
    args = ap.parse_args()
    reps = args.reps
    table = load_loss_table(judge="loss_judge_best")
    R_real = table.true_risk[36]
    print(f"delta = {DELTA}, {reps} replications, n = 300 human + 900 judge labels "
          "(coverage, Bernoulli: n = 200 + 600)\n")
    print("| scheme | betting | Type-I Bernoulli R=0.105, alpha=0.1 | Type-I TriviaQA resample | "
          "non-coverage Bernoulli R=0.3 | non-coverage TriviaQA R=0.045 |")
    print("|---|---|---|---|---|---|")
    if args.observations != "split":
        paper_rows(table, reps, R_real)
    if args.observations == "paper":
        return
    for i, s in enumerate(("r-eval", "r-autoeval", "r-autoeval+")):
        for j, (name, b) in enumerate(bettings().items()):
            rng = np.random.default_rng(1000 + 100 * i + j)
            kw = dict(delta=DELTA, rhos=scheme_rhos(s), betting=b, observation="split")
            h, jl, ju = bernoulli(rng, reps, 300, 900, 0.105, 0.1)
            cells = [certify(h, jl, ju, alpha=0.1, **kw).certified.sum()]
            h, jl, ju = resample(rng, table.human[36], table.judge[36], reps, 300, 900)
            cells.append(certify(h, jl, ju, alpha=R_real - 0.002, **kw).certified.sum())
            print(f"| {s} (split) | {name} | " + " | ".join(f"{k / reps:.4f} (≤ {upper99(k, reps):.4f})" for k in cells)
                  + " | as paper | as paper |", flush=True)


def paper_rows(table, reps, R_real) -> None:
    for i, s in enumerate(("r-eval", "r-autoeval", "r-autoeval+")):
        for j, (name, b) in enumerate(bettings().items()):
            rng = np.random.default_rng(100 * i + j)
            rhos = scheme_rhos(s)
            cells = []
            h, jl, ju = bernoulli(rng, reps, 300, 900, 0.105, 0.1)
            cells.append(certify(h, jl, ju, alpha=0.1, delta=DELTA, rhos=rhos, betting=b).certified.sum())
            h, jl, ju = resample(rng, table.human[36], table.judge[36], reps, 300, 900)
            cells.append(certify(h, jl, ju, alpha=R_real - 0.002, delta=DELTA, rhos=rhos, betting=b).certified.sum())
            h, jl, ju = bernoulli(rng, reps, 200, 600, 0.3, 0.1)
            cells.append(excluded(h, jl, ju, 0.3, rhos, b).sum())
            h, jl, ju = resample(rng, table.human[33], table.judge[33], reps, 300, 900)
            cells.append(excluded(h, jl, ju, table.true_risk[33], rhos, b).sum())
            print(f"| {s} | {name} | " + " | ".join(f"{k / reps:.4f} (≤ {upper99(k, reps):.4f})" for k in cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
