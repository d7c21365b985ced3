"""Judge-stratified testing against R-AutoEval+ on every bundled prompt table, alpha 0.05-0.9.

For each Instruction-Induction task in ``examples/data/prompts_*.parquet`` (100 templates of
Llama-3.1-8B-Instruct, real execution accuracies), 25 templates spread over the length order
are tested for R <= alpha at level delta / 25 (Bonferroni, delta = 0.1) with a budget of
n = 200 human labels:

* R-AutoEval+ (UP, the split observation, r = 3 judge-only labels per human label) on the
  first n (1 + r) items of a random order;
* judge-stratified testing (UP, batches of 25): the default mixture over control scales
  0, 1/2, 1, and the controls in full alone (before the mixture).

For every alpha at which some of the 25 templates have R <= alpha, it prints the mean number of
those templates certified (± s.e. over ``--reps`` repetitions, paired: the same item orders
for R-AutoEval+, the same seeds for both judge-stratified variants) and the mean human labels
per template (n when never certified). ``worse`` marks a cell where the default
judge-stratified test certified fewer than R-AutoEval+ by more than 2 s.e. of the paired
difference. Templates with R > alpha are not run: they may certify in at most delta of the runs
(tests/test_judge_stratified.py and the audit check that).

    python benchmarks/judge_stratified_prompts.py [--reps 20] [--judges loss_judge_icl1 loss_judge_icl5]
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
import pyarrow.parquet as pq

from certsel.orchestrator.audit.stratified import run_to_budget
from certsel.policies import certify, scheme_rhos
from certsel.policies.judge_stratified import DEFAULT_RHOS, StratifiedTest

DATA = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data"
K, N_HUMAN, R, DELTA, BATCH = 25, 200, 3, 0.1, 25
ALPHAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.86, 0.9)
VARIANTS = {"default": DEFAULT_RHOS, "controls in full": (1.0,)}


def load(path: pathlib.Path, judge: str):
    t = pq.read_table(path, columns=["candidate", "item", "loss_human", judge]).to_pandas()
    t = t.sort_values(["candidate", "item"])
    names = sorted(t.candidate.unique())[:: 100 // K][:K]
    human = np.stack([t[t.candidate == c].loss_human.to_numpy() for c in names])
    return human, np.stack([t[t.candidate == c][judge].to_numpy() for c in names])


def stratified(h, j, alpha, level, rhos, seed) -> tuple[bool, int]:
    test = StratifiedTest(j, alpha=alpha, delta=level, horizon=N_HUMAN, seed=seed, rhos=rhos)
    labels, _ = run_to_budget(test, h, BATCH, -np.log(level), stop_at_crossing=True)
    return test.certified, labels if test.certified else N_HUMAN


def cell(human, judge, alpha, reps, seed):
    """Per repetition: certified counts and mean labels of R-AutoEval+ and each variant."""
    good = np.flatnonzero(human.mean(axis=1) <= alpha)
    level = DELTA / K
    rng = np.random.default_rng(seed)
    count = {name: np.zeros(reps) for name in ("R-AutoEval+", *VARIANTS)}
    labels = {name: np.zeros(reps) for name in count}
    n_items = human.shape[1]
    for rep in range(reps):
        order = rng.permutation(n_items)
        hi, ji = order[:N_HUMAN], order[N_HUMAN:N_HUMAN * (1 + R)]
        res = certify(human[good][:, hi], judge[good][:, hi], judge[good][:, ji], alpha=alpha, delta=level,
                      rhos=scheme_rhos("r-autoeval+"), betting="up", observation="split")
        count["R-AutoEval+"][rep] = res.certified.sum()
        labels["R-AutoEval+"][rep] = np.where(res.certified, res.labels_to_certify, N_HUMAN).mean()
        seeds = rng.integers(2**31, size=good.size)
        for name, rhos in VARIANTS.items():
            got = [stratified(human[k], judge[k], alpha, level, rhos, int(s)) for k, s in zip(good, seeds)]
            count[name][rep] = sum(c for c, _ in got)
            labels[name][rep] = np.mean([n for _, n in got])
    return good.size, count, labels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--judges", nargs="*", default=["loss_judge_icl1", "loss_judge_icl5"])
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"{K} templates per task, Bonferroni at delta = {DELTA}, n = {N_HUMAN}, {args.reps} repetitions: templates "
          "with R <= alpha certified (mean ± s.e.), human labels per template\n")
    print("| task | judge | alpha | R <= alpha | R-AutoEval+ | judge-stratified | judge-stratified, controls in full "
          "| labels R-AutoEval+ / JS / JS full | |")
    print("|---|---|---|---|---|---|---|---|---|")
    worse = cells = 0
    for path in sorted(DATA.glob("prompts_*.parquet")):
        task = path.stem.removeprefix("prompts_")
        for judge in args.judges:
            human, jl = load(path, judge)
            for i, alpha in enumerate(ALPHAS):
                if not np.any(human.mean(axis=1) <= alpha):
                    continue
                good, count, labels = cell(human, jl, alpha, args.reps, seed=i)
                diff = count["default"] - count["R-AutoEval+"]
                se = diff.std(ddof=1) / np.sqrt(args.reps) if args.reps > 1 else 0.0
                flag = "worse" if diff.mean() < -2 * se - 1e-12 else ""
                worse += bool(flag)
                cells += 1

                def fmt(name):
                    c = count[name]
                    return f"{c.mean():.2f} ± {c.std(ddof=1) / np.sqrt(args.reps) if args.reps > 1 else 0:.2f}"

                print(f"| {task} | {judge.removeprefix('loss_judge_')} | {alpha:g} | {good} | {fmt('R-AutoEval+')} | "
                      f"{fmt('default')} | {fmt('controls in full')} | {labels['R-AutoEval+'].mean():.0f} / "
                      f"{labels['default'].mean():.0f} / {labels['controls in full'].mean():.0f} | {flag} |",
                      flush=True)
    print(f"\ncells where judge-stratified certified fewer than R-AutoEval+ beyond 2 s.e.: {worse} of {cells}")
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
