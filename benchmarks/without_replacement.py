"""Betting tests for sampling without replacement (``sampling=WithoutReplacement(N)``): type-I error at the
table's mean, and the human labels the correction saves on the bundled tables.

1. **Type-I error at R = alpha.** Tables of ``--items`` items whose mean human loss is alpha
   exactly (the least favourable null for the table's mean), a judge that agrees with the
   human on 85% of the items, ``--reps`` tables per row, each drawn in a random order to 50%,
   90% and 100% of its items (the planned budget ``horizon`` = the items drawn), one
   judge-only label per human label from an independent order. Every scheme (R-Eval,
   R-AutoEval, R-AutoEval+), strategy (UP, WSR, ONS) and observation (split, paper) without
   replacement; the i.i.d. test on the same draws for comparison. Printed: the fraction of
   tables certified (a type-I error) and its 99% Clopper-Pearson upper bound; R-Eval (UP) again
   on ten times the tables, since its rate sits close to delta.
2. **Labels saved.** On every bundled table, at its targets, up to three candidates whose
   R-Eval limit log(1/delta)/KL_inf is 10-80% of the table (where drawing much of the table
   is what certifying costs): mean human labels to certify over ``--orders`` random orders,
   i.i.d. against without replacement, R-Eval and R-AutoEval+ (split, UP, r = 1, judge-only
   items in an order of their own), the whole table as the budget (an order that never
   certifies counts the whole table).

    python benchmarks/without_replacement.py --reps 2000 --orders 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import beta

from certsel.policies import certify, scheme_rhos
from certsel.policies.limits import label_limit
from certsel.policies.sampling import IID, WithoutReplacement
from certsel.workers.replay import DATA_DIR, load_loss_table

DELTA = 0.1
FRACTIONS = (0.5, 0.9, 1.0)
PROMPT_TASKS = {"antonyms": (0.5, 0.6), "first_word_letter": (0.05, 0.1, 0.3), "larger_animal": (0.2, 0.3),
                "sentiment": (0.15, 0.25), "sum": (0.05, 0.1), "synonyms": (0.9,)}


def cp_upper(k: int, n: int, level: float = 0.99) -> float:
    return 1.0 if k == n else float(beta.ppf(1 - (1 - level) / 2, k + 1, n - k))


def boundary(reps: int, N: int, alpha: float, seed: int):
    """(human, judge, judge-only order) for ``reps`` tables of mean alpha, each row already in
    its random human order."""
    rng = np.random.default_rng(seed)
    h = np.zeros((reps, N))
    h[:, : int(round(alpha * N))] = 1.0
    h = rng.permuted(h, axis=1)
    j = np.where(rng.random(h.shape) < 0.85, h, 1.0 - h)
    return h, j, rng.permuted(np.tile(np.arange(N), (reps, 1)), axis=1)


def type_one(args) -> None:
    N, alpha = args.items, args.alpha
    h, j, jorder = boundary(args.reps, N, alpha, seed=1)
    ju_all = np.take_along_axis(j, jorder, axis=1)
    print(f"## Type-I error at R = alpha = {alpha} (table mean exactly alpha, {N} items, {args.reps} tables "
          f"per row, delta = {DELTA})\n")
    print("| scheme | betting | observation | sampling | " + " | ".join(f"{f:.0%} drawn" for f in FRACTIONS) + " |")
    print("|---|---|---|---|" + "---|" * len(FRACTIONS))
    rows = [(s, b, o, p) for s in ("r-eval", "r-autoeval", "r-autoeval+") for b in ("up", "wsr", "ons")
            for o in ("split", "paper") for p in ("without replacement", "i.i.d.")
            if p == "without replacement" or (b == "up" and o == "split")]
    worst = 0.0
    for scheme, betting, obs, sampling in rows:
        if scheme == "r-eval" and obs == "paper":
            continue  # R-Eval's observation is the loss itself in either form
        cells = []
        for f in FRACTIONS:
            n = int(round(f * N))
            judge = scheme != "r-eval"
            res = certify(h[:, :n], j[:, :n] if judge else None, ju_all[:, :n] if judge else None, alpha=alpha,
                          delta=DELTA, rhos=scheme_rhos(scheme), betting=betting, observation=obs, horizon=n,
                          sampling=WithoutReplacement(N) if sampling == "without replacement" else IID())
            k = int(res.certified.sum())
            if sampling == "without replacement":
                worst = max(worst, k / args.reps)
            cells.append(f"{k / args.reps:.4f} ({cp_upper(k, args.reps):.4f})")
        print(f"| {scheme} | {betting} | {obs} | {sampling} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nlargest rate without replacement: {worst:.4f} (delta {DELTA})")
    # R-Eval's martingale at the boundary crosses with probability close to delta (with the table drawn to its
    # end its wealth is nearly all or nothing), so its rate gets ten times the tables, which R-Eval affords
    big, hits = 10 * args.reps, 0
    for seed in range(10):
        hb, _, _ = boundary(args.reps, N, alpha, seed=100 + seed)
        hits += int(certify(hb, alpha=alpha, delta=DELTA, rhos=[0.0], observation="split", horizon=N,
                            sampling=WithoutReplacement(N)).certified.sum())
    print(f"R-Eval (UP, split) without replacement, 100% drawn, {big:,} tables: {hits / big:.4f} "
          f"({cp_upper(hits, big):.4f})\n")


def tables():
    trivia = load_loss_table(judge="loss_judge_best")
    yield "TriviaQA (MX, best judge)", trivia.human, trivia.judge, (0.05, 0.1, 0.2)
    for task, alphas in PROMPT_TASKS.items():
        t = load_loss_table(DATA_DIR / f"prompts_{task}.parquet", judge="loss_judge_icl5", order=None,
                            objective="prompt_len")
        yield f"prompts: {task} (5-shot judge)", t.human, t.judge, alphas
    alpaca = load_loss_table(DATA_DIR / "alpacaeval_preferences.parquet", human="loss", judge=None,
                             candidate="model", order=None, objective=None)
    yield "AlpacaEval (no judge)", alpaca.human, None, (0.8, 0.9, 0.95)


def pick(human, alpha) -> np.ndarray:
    N = human.shape[1]
    lims = np.array([label_limit(x, alpha, DELTA) for x in human])
    ok = np.flatnonzero((lims >= 0.1 * N) & (lims <= 0.8 * N))
    ok = ok[np.argsort(lims[ok])]
    return ok[np.unique(np.linspace(0, ok.size - 1, min(3, ok.size)).round().astype(int))] if ok.size else ok


def labels_saved(args) -> None:
    print(f"## Human labels to certify, i.i.d. against without replacement ({args.orders} orders per candidate, "
          f"delta = {DELTA}, the whole table as the budget)\n")
    print("| table | items | alpha | R | policy | i.i.d. | without replacement | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for name, human, judge, alphas in tables():
        N = human.shape[1]
        for alpha in alphas:
            for k in pick(human, alpha):
                rng = np.random.default_rng(int(k))
                order = np.argsort(rng.random((args.orders, N)), axis=1)
                jorder = np.argsort(rng.random((args.orders, N)), axis=1)
                H = human[k][order]
                policies = [("R-Eval", [0.0], None, None)]
                if judge is not None:
                    policies.append(("R-AutoEval+", scheme_rhos("r-autoeval+"), judge[k][order], judge[k][jorder]))
                for pname, rhos, JL, JU in policies:
                    got = []
                    for drawn in (IID(), WithoutReplacement(N)):
                        res = certify(H, JL, JU, alpha=alpha, delta=DELTA, rhos=rhos, observation="split",
                                      horizon=N, sampling=drawn)
                        got.append(float(np.where(res.certified, res.labels_to_certify, N).mean()))
                    ratios.append(got[1] / got[0])
                    print(f"| {name} | {N} | {alpha} | {human[k].mean():.3f} | {pname} | {got[0]:,.0f} | "
                          f"{got[1]:,.0f} | {got[1] / got[0]:.3f} |", flush=True)
    if ratios:
        print(f"\n{len(ratios)} cases: labels without replacement / i.i.d. mean {np.mean(ratios):.3f}, "
              f"min {np.min(ratios):.3f}, max {np.max(ratios):.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--orders", type=int, default=100)
    ap.add_argument("--skip", choices=("type-one", "labels"), default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.skip != "type-one":
        type_one(args)
    if args.skip != "labels":
        labels_saved(args)
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
