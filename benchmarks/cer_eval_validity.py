"""Validity of Seq and Cer-Eval by simulation: how often the anytime interval ever misses.

Each case runs a policy to the end of the test set (or to its decision) ``--runs`` times
with fresh seeds and counts the runs whose interval missed the test-set mean at any step
("ever-miss"; the interval is a running intersection, so this is also the final miss). The
guarantee is ever-miss <= delta; the table gives the rate, the 99% binomial ceiling
(rate above it rejects "rate <= delta" at 1%) and a one-sided 99% Clopper-Pearson upper
bound. Cases:

* outliers: 3,000 items, 30% hard items (error 0.8) alone at distance 5 from a cluster of
  easy items (error 0.05), Cer-Eval with the 1-NN partition of Algorithm 2 (the case where
  the per-group union bound failed), and the paper's radii on the same data;
* refit every label: a partition recomputed from the labels after every label (an
  adversarial partitioner, 600 items) and the 1-NN partition refitted after every label
  (300 items);
* judge strata: real TriviaQA losses (one MX configuration, 2,000 items) with strata of the
  judge's loss (``loss_judge_best``, and the useless ``loss_judge_bad``);
* pairwise exact null: AlpacaEval's claude vs claude-2 with every item twice, once swapped,
  so the mean difference over the test set is 0: the interval on the mean of u and the
  certified signs (threshold 1/2 at delta/2 per direction);
* threshold decisions: a TriviaQA configuration against thresholds 0.01 below, at and 0.01
  above its risk; a decision is wrong when the claimed R <= c or R >= c is false;
* the boundary: the same configuration against c = R -+ 1e-6, where one of the two one-sided
  claims is false by a hair (its worst case), for Cer-Eval (judge strata) and Seq.

    python benchmarks/cer_eval_validity.py [--runs 1000] [--workers 2]
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

from certsel.policies import CerEval, NearestNeighborPartition, ScorePartition, Seq
from helpers.scenarios import RefitEveryLabel, make_outliers
from certsel.workers.replay import load_loss_table
from helpers.alpacaeval import load_preference_table

DELTA = 0.05
TRIVIA = "examples/data/triviaqa_llama31_8b_mx.parquet"


def _trivia(column_judge: str, n: int = 2000):
    t = load_loss_table(TRIVIA, human="loss_human", judge=column_judge, candidate="candidate", item="item",
                        order="rank")
    k = list(t.candidates).index("mx_m4_r2_k16")  # R = 0.124 on the whole table
    idx = np.random.default_rng(0).choice(t.human.shape[1], size=n, replace=False)
    return t.human[k, idx], t.judge[k, idx]


def case(name: str):
    """(make_policy(seed), losses, target, batch) for one case."""
    if name.startswith("outliers"):
        sc = make_outliers(n=3000, seed=1)
        part = NearestNeighborPartition(sc.features)
        radius = "paper" if name.endswith("paper") else "betting"
        return (lambda s: CerEval(3000, part, delta=DELTA, seed=s, radius=radius)), sc.losses, None, 10
    if name.startswith("refit"):
        n = 600 if name == "refit/adversarial" else 300
        rng = np.random.default_rng(5)
        x = rng.random(n)
        z = ((rng.random(n) < 0.15 + 0.7 * (x > 0.8)) * rng.random(n) ** 0.3).astype(float)
        if name == "refit/adversarial":
            part = RefitEveryLabel(x)
        else:
            part = NearestNeighborPartition(np.c_[x, rng.standard_normal((n, 3))])
        return (lambda s: CerEval(n, part, delta=DELTA, seed=s, warm_start=10, schedule=(10, 1.0 + 1e-9))), z, \
            None, 5
    if name.startswith("judge"):
        human, judge = _trivia("loss_judge_" + name.split("/")[1])
        part = ScorePartition(judge)
        return (lambda s: CerEval(human.size, part, delta=DELTA, seed=s)), human, None, 10
    if name == "pairwise-null":
        t = load_preference_table()
        a, b = t.losses[t.models.index("claude")], t.losses[t.models.index("claude-2")]
        la, lb = np.r_[a, b], np.r_[b, a]
        u = (la - lb + 1.0) / 2.0
        part = NearestNeighborPartition(np.r_[t.features, t.features])
        return (lambda s: CerEval(u.size, part, delta=DELTA / 2, threshold=0.5, seed=s, strict=True)), u, 0.5, 10
    if name.startswith("threshold"):
        human, judge = _trivia("loss_judge_best")
        mu = float(human.mean())
        c = {"below": mu + 0.01, "at": mu, "above": mu - 0.01}[name.split("/")[1]]
        part = ScorePartition(judge)
        return (lambda s: CerEval(human.size, part, delta=DELTA, threshold=c, seed=s)), human, c, 10
    if name.startswith("boundary"):
        # the threshold a hair from R: one of the two one-sided claims is false by 1e-6, the
        # hardest case for it (the c = R +- 0.01 rows are far from it)
        human, judge = _trivia("loss_judge_best")
        mu = float(human.mean())
        kind, side = name.split("/")[1].split("-")
        c = mu - 1e-6 if side == "above" else mu + 1e-6  # R just above c: "R <= c" is false
        if kind == "seq":
            return (lambda s: Seq(human.size, delta=DELTA, threshold=c, seed=s)), human, c, 10
        part = ScorePartition(judge)
        return (lambda s: CerEval(human.size, part, delta=DELTA, threshold=c, seed=s)), human, c, 10
    raise ValueError(name)


CASES = ["outliers/betting", "outliers/paper", "refit/adversarial", "refit/1-nn", "judge/best", "judge/bad",
         "pairwise-null", "threshold/below", "threshold/at", "threshold/above", "boundary/cer_eval-above",
         "boundary/cer_eval-below", "boundary/seq-above", "boundary/seq-below"]


def one(args):
    name, seeds = args
    make, z, c, batch = case(name)
    mu = float(z.mean())
    miss = wrong = decided = labels = 0
    for s in seeds:
        p = make(s)
        path = p.run(z, batch=batch, record=True).path
        miss += bool(np.any((path[:, 2] > mu + 1e-12) | (path[:, 3] < mu - 1e-12)))
        d = p.decision
        decided += d != 0
        if name.startswith(("threshold", "boundary")):
            wrong += (d == -1 and mu > c) or (d == 1 and mu < c)
        elif name == "pairwise-null":
            wrong += d != 0  # any sign is false at an exact tie
        labels += p.n_labeled
    return name, (miss, wrong, decided, labels, len(seeds))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cases", nargs="*", default=CASES)
    args = ap.parse_args(argv)
    blocks = 8
    jobs = [(name, list(range(b, args.runs, blocks))) for name in args.cases for b in range(blocks)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as ex:
        out = list(ex.map(one, jobs))
    total: dict = {}
    for name, vals in out:
        total[name] = np.add(total.get(name, 0), vals)
    print(f"<!-- {args.runs} runs per case, delta = {DELTA}, {time.perf_counter() - t0:.0f} s -->\n")
    print("| case | level | runs | ever-miss | wrong decisions | 99% ceiling | 99% CP upper | decided | labels (mean) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases:
        miss, wrong, decided, labels, runs = (int(v) for v in total[name])
        level = DELTA / 2 if name == "pairwise-null" else DELTA
        # the pairwise signs: delta/2 per direction, so any sign at a tie has rate <= delta
        decisions = name.startswith(("threshold", "boundary")) or name == "pairwise-null"
        fail = wrong if decisions else miss
        ceil = stats.binom.ppf(0.99, runs, DELTA) / runs
        upper = stats.beta.ppf(0.99, fail + 1, runs - fail) if fail < runs else 1.0
        print(f"| {name} | {level:g} | {runs} | {miss / runs:.3f} | "
              f"{f'{wrong / runs:.3f}' if decisions else '-'} | "
              f"{ceil:.3f} | {upper:.3f} | {decided / runs:.3f} | {labels / runs:.0f} |")


if __name__ == "__main__":
    main()
