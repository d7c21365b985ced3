"""certsel's stop inside inspect-ai, against stop rules built on Bayesian credible intervals.

Part 1, through inspect (the real package, mockllm, concurrency 10): a task of 100 samples
whose mean score is 0.69, claim "mean score >= 0.7" at delta = 0.1, futility off; right
answers take 1 ms, wrong ones 100 ms, so completions run ahead on the right answers. Every
run has its own shuffle. certsel's manager feeds its test in schedule order; the same runs
with a manager fed in completion order show what that order costs. Every certificate is
wrong here (0.69 < 0.7), so the rate of certified runs is the error rate.

Part 2, the stop rules on the same samples: each repetition is one shuffle of a task of N
0/1 scores (the order inspect schedules them in), and each rule reads the scores in that
order and stops at the first sample where it decides:

* certsel: the manager's test (R-Eval betting, UP, without replacement, delta = 0.05), with
  the futility stop (delta_f = 0.05); it claims "mean >= T" only when certified;
* credible width (like optstop): the 95% equal-tailed Beta(1, 1) credible interval; stop once
  it is narrower than 0.1 (or 0.2) and claim "mean >= T" if its lower end is >= T;
* credible interval excludes T: stop once the 95% credible interval lies above T (claim) or
  below it (no claim), after at least 10 samples.

It reports the samples each rule used and how often it claimed "mean >= T": for true means
below T every claim is false. Both numbers are over the same shuffles for every rule.

Part 3, judge-assisted testing through inspect: the expensive scorer's calls with R-Eval
(the expensive scorer on every sample) and with R-AutoEval+ (a cheap judge scorer on every
sample, the expensive one on one in four), for judges of three agreement rates.

    python benchmarks/inspect_stopping.py [--inspect-reps 300] [--reps 2000] [--judge-reps 40]
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import tempfile
import time

import numpy as np
from scipy.stats import beta, binomtest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from certsel.policies import log_evalue_paths  # noqa: E402
from certsel.policies.sampling import WithoutReplacement


def cp_upper(k: int, n: int) -> float:
    return float(binomtest(k, n).proportion_ci(0.95, method="exact").high)


def cp_interval(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"[{ci.low:.3f}, {ci.high:.3f}]"


def through_inspect(reps: int) -> None:
    from helpers.inspect_tasks import boundary_runs

    print(f"## Through inspect: {reps} runs per order, 100 samples of mean 0.69, claim >= 0.7 at delta = 0.1\n")
    print("| fed to the test in | runs | false certificates | rate | 95% CP interval | P(rate <= 0.1 is rejected) | "
          "samples run (mean) | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for order in ("schedule", "completion"):
            t0 = time.time()
            certs = boundary_runs(reps, pathlib.Path(tmp) / order, order=order, slow=0.1)
            wrong = sum(c.certified for c in certs)
            used = np.mean([c.samples.scheduled for c in certs])
            p = binomtest(wrong, reps, 0.1, alternative="greater").pvalue  # one-sided: is the rate above delta?
            print(f"| {order} order | {reps} | {wrong} | {wrong / reps:.3f} | {cp_interval(wrong, reps)} | p = {p:.3g} | "
                  f"{used:.1f} | {time.time() - t0:.0f} |")
        # at the boundary itself: the claim ">= 0.7" is true at 0.70, but the test's e-process is a
        # martingale there, so it may cross 1/delta before every sample ran in at most delta of the runs
        t0 = time.time()
        certs = boundary_runs(reps, pathlib.Path(tmp) / "exact", correct=70, slow=0.1)
        early = sum(c.certified and not c.exact for c in certs)
        used = np.mean([c.samples.scheduled for c in certs])
        p = binomtest(early, reps, 0.1, alternative="greater").pvalue
        print(f"| schedule order, mean exactly 0.70: certified by the test before every sample ran | {reps} | {early} | "
              f"{early / reps:.3f} | {cp_interval(early, reps)} | p = {p:.3g} | {used:.1f} | {time.time() - t0:.0f} |")
    print()


def certsel_rule(x: np.ndarray, at_least: float, delta: float, futility: float):
    """(samples used, claimed) of the manager's decisions on score paths x (reps, N)."""
    reps, N = x.shape
    kw = dict(rhos=[0.0], betting="up", horizon=N, sampling=WithoutReplacement(N), observation="split")  # as a certsel job tests
    win = log_evalue_paths(1.0 - x, alpha=1.0 - at_least, delta=delta, **kw) >= math.log(1 / delta)
    lose = log_evalue_paths(x, alpha=at_least, delta=futility, **kw) >= math.log(1 / futility)
    first_win = np.where(win.any(1), win.argmax(1) + 1, N + 1)
    first_lose = np.where(lose.any(1), lose.argmax(1) + 1, N + 1)
    used = np.minimum(np.minimum(first_win, first_lose), N)
    exact = x.mean(1) >= at_least  # every sample scored: the mean is known
    claimed = (first_win < first_lose) & (first_win <= N) | ((first_win > N) & (first_lose > N) & exact)
    return used, claimed


def credible(x: np.ndarray):
    """95% equal-tailed Beta(1, 1) credible intervals after each sample (reps, N)."""
    s = np.cumsum(x, axis=1)
    n = np.arange(1, x.shape[1] + 1)
    return beta.ppf(0.025, 1 + s, 1 + n - s), beta.ppf(0.975, 1 + s, 1 + n - s)


def first(mask: np.ndarray) -> np.ndarray:
    N = mask.shape[1]
    return np.where(mask.any(1), mask.argmax(1), N - 1)


def width_rule(lo, hi, at_least: float, width: float = 0.1):
    stop = first(hi - lo < width)
    rows = np.arange(lo.shape[0])
    return stop + 1, lo[rows, stop] >= at_least


def excludes_rule(lo, hi, at_least: float, min_n: int = 10):
    n = np.arange(1, lo.shape[1] + 1)
    stop = first(((lo >= at_least) | (hi < at_least)) & (n >= min_n))
    rows = np.arange(lo.shape[0])
    return stop + 1, lo[rows, stop] >= at_least


def rules(reps: int, N: int, at_least: float, rng) -> None:
    print(f"## Stop rules on the same shuffles: {reps} per task, N = {N} samples, claim mean >= {at_least}\n")
    print("| true mean | rule | samples used (mean) | claimed mean >= T | 95% CP upper | claims are |")
    print("|---|---|---|---|---|---|")
    for mean in (0.65, 0.69, 0.7, 0.75, 0.8, 0.9):
        k = int(round(mean * N))
        table = np.r_[np.ones(k), np.zeros(N - k)]
        x = np.stack([rng.permutation(table) for _ in range(reps)])
        lo, hi = credible(x)
        truth = "false" if k / N < at_least else "true"
        for name, (used, claimed) in (("certsel (delta 0.05)", certsel_rule(x, at_least, 0.05, 0.05)),
                                      ("credible width < 0.1", width_rule(lo, hi, at_least)),
                                      ("credible width < 0.2", width_rule(lo, hi, at_least, 0.2)),
                                      ("credible interval excludes T", excludes_rule(lo, hi, at_least))):
            c = int(claimed.sum())
            upper = f"{cp_upper(c, reps):.3f}" if truth == "false" else ""
            print(f"| {k / N:.2f} | {name} | {used.mean():.1f} | {c / reps:.3f} | {upper} | {truth} |")
    print()


def judge_assisted(reps: int) -> None:
    """Expensive-scorer calls with and without a cheap judge scorer, through inspect."""
    from inspect_ai import Task

    from certsel.inspect import CertifiedStopping
    from helpers.inspect_tasks import Counted, judged_dataset, recorded_answer, recorded_judge, recorded_score, run

    N, T = 600, 0.75
    print(f"## Judge-assisted testing through inspect: {reps} shuffles, {N} samples of mean 0.9, claim >= {T} at "
          "delta = 0.05\n")
    print("| judge agrees on | test | expensive-scorer calls (mean) | samples run (mean) | certified |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    human = (rng.random(N) < 0.9).astype(float)
    for agree in (0.95, 0.85, 0.7):
        judge = np.where(rng.random(N) < agree, human, 1 - human)
        for mode in ("R-Eval (expensive scorer only)", "R-AutoEval+ (judge, ratio 3)"):
            managers, counters, tasks = [], [], []
            for k in range(reps):
                if mode.startswith("R-Eval"):
                    m = CertifiedStopping(at_least=T, delta=0.05, sampling="iid", keep=False, store=None)
                    c = Counted(recorded_score())
                    scorers = [m.gate(c, name="recorded_score")]  # gated, but every sample is labelled
                else:
                    m = CertifiedStopping(at_least=T, delta=0.05, judge="recorded_judge", ratio=3, keep=False,
                                          store=None)
                    c = Counted(recorded_score())
                    scorers = [m.gate(c, name="recorded_score"), recorded_judge()]
                managers.append(m)
                counters.append(c)
                tasks.append(Task(dataset=judged_dataset(human, judge, shuffle=k), solver=recorded_answer(),
                                  scorer=scorers, early_stopping=m, name=f"judged_{k}"))
            with tempfile.TemporaryDirectory() as tmp:
                run(tasks, tmp, max_tasks=16)
            calls = np.mean([len(c.ids) for c in counters])
            used = np.mean([m.certificate.samples.scheduled for m in managers])
            cert = np.mean([m.certificate.certified for m in managers])
            print(f"| {agree:.2f} | {mode} | {calls:.1f} | {used:.1f} | {cert:.2f} |")
    print()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inspect-reps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--judge-reps", type=int, default=40)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.time()
    rules(args.reps, args.n, 0.7, np.random.default_rng(args.seed))
    if args.judge_reps:
        judge_assisted(args.judge_reps)
    if args.inspect_reps:
        through_inspect(args.inspect_reps)
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
