"""Labels to certify against the limit on every bundled table, across targets and judges.

``benchmarks/limit.py`` measures the five TriviaQA frontier configurations at one target;
a betting prior tuned there could lose elsewhere. This runs every bundled loss table
(TriviaQA's 48 MX configurations with its best and MX4 judges; the six Instruction-Induction
prompt tables with their 1- and 5-shot judges; AlpacaEval's 12 models, no judge) at several
targets each, on up to four candidates per (table, target) spread over the range of limits
from 20 to 250 labels (log(1/delta) / KL_inf of their losses), and reports the mean human
labels to the first crossing of 1/delta over ``--orders`` random orders, divided by the limit:

* R-Eval against log(1/delta) / KL_inf of the human losses;
* R-AutoEval+ with the split observation (r = 3, ten reliance factors) against the
  prediction-powered floor (:func:`certsel.policies.limits.ppi_limit`), for each judge
  whose floor is between 15 and 250 labels;

each with UP's default prior (``alternatives``: Jeffreys over the alternatives below the
target, half the mass at the cap on judge-controlled rows) and with eq. (19)'s Beta(1/2, 1/2)
(``exact``). An order that does not certify within the horizon (600 human labels, fewer when
the table is smaller: R-AutoEval+ needs r + 1 items per human label) counts the whole horizon. The last rows give the mean ratio per
table and over everything, and R-AutoEval+'s labels over R-Eval's on the same orders.

    python benchmarks/limit_tables.py [--orders 100]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the fixtures shared with the tests

from certsel.policies import UP, certify
from certsel.policies.limits import label_limit, ppi_limit
from certsel.workers.replay import DATA_DIR, load_loss_table
from helpers.alpacaeval import ALPACAEVAL_PREFERENCES

DELTA = 0.1
R = 3
RHOS = np.linspace(0.0, 1.0, 10)
PROMPT_TASKS = {"antonyms": (0.5, 0.6), "first_word_letter": (0.05, 0.1, 0.3), "larger_animal": (0.2, 0.3),
                "sentiment": (0.15, 0.25), "sum": (0.05, 0.1), "synonyms": (0.9,)}
PRIORS = {"alternatives": UP(), "exact (eq. 19)": UP(prior="exact")}


@dataclass
class Table:
    name: str
    human: np.ndarray  # (K, items)
    judges: dict  # judge name -> (K, items)
    alphas: tuple


def tables() -> list[Table]:
    out = []
    trivia = load_loss_table(judge="loss_judge_best")
    bad = load_loss_table(judge="loss_judge_bad")
    out.append(Table("triviaqa", trivia.human, {"best": trivia.judge, "MX4": bad.judge}, (0.05, 0.1, 0.2)))
    for task, alphas in PROMPT_TASKS.items():
        path = DATA_DIR / f"prompts_{task}.parquet"
        judges = {f"icl{k}": load_loss_table(path, judge=f"loss_judge_icl{k}", order=None, objective="prompt_len").judge
                  for k in (1, 5)}
        human = load_loss_table(path, judge=None, order=None, objective="prompt_len").human
        out.append(Table(f"prompts_{task}", human, judges, alphas))
    alpaca = load_loss_table(ALPACAEVAL_PREFERENCES, human="loss", judge=None, candidate="model", order=None,
                             objective=None)
    out.append(Table("alpacaeval", alpaca.human, {}, (0.8, 0.9, 0.95)))
    return out


def spread(limits: np.ndarray, lo: float = 20, hi: float = 250, per: int = 4) -> np.ndarray:
    """Up to ``per`` candidates whose limits lie in [lo, hi], spread over that range."""
    ok = np.flatnonzero((limits >= lo) & (limits <= hi))
    ok = ok[np.argsort(limits[ok])]
    return ok[np.unique(np.linspace(0, ok.size - 1, min(per, ok.size)).round().astype(int))] if ok.size else ok


def orders(n_items: int, reps: int, m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((reps, n_items)), axis=1)[:, :m]


def labels(res, horizon: int) -> float:
    return float(np.where(res.certified, res.labels_to_certify, horizon).mean())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=100)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"delta = {DELTA}, {args.orders} orders per candidate; mean human labels to certify / the limit, "
          f"per prior of UP\n")
    print("| table | alpha | candidate R | policy | judge | limit | " + " | ".join(PRIORS) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(PRIORS))
    rows = []  # (table, policy, {prior: ratio}, {prior: labels / R-Eval's labels with the same prior})
    every = tables()
    for table in every:
        n_items = table.human.shape[1]
        horizon, ppi_horizon = min(600, n_items), min(600, n_items // (1 + R))
        for alpha in table.alphas:
            lims = np.array([label_limit(h, alpha, DELTA) for h in table.human])
            for k in spread(lims):
                h = table.human[k]
                order = orders(n_items, args.orders, n_items, seed=int(k))
                H = h[order[:, :horizon]]
                reval = {p: labels(certify(H, alpha=alpha, delta=DELTA, rhos=[0.0], betting=s, horizon=horizon),
                                   horizon) for p, s in PRIORS.items()}
                rows.append((table.name, "R-Eval", {p: v / lims[k] for p, v in reval.items()}, None))
                print(f"| {table.name} | {alpha} | {h.mean():.3f} | R-Eval | - | {lims[k]:.1f} | "
                      + " | ".join(f"{v / lims[k]:.2f}" for v in reval.values()) + " |", flush=True)
                for jname, J in table.judges.items():
                    j = J[k]
                    floor = ppi_limit(h, j, alpha, DELTA).labels
                    if not 15 <= floor <= 250:
                        continue
                    n, m = ppi_horizon, ppi_horizon * (1 + R)
                    got = {p: labels(certify(H[:, :n], j[order[:, :n]], j[order[:, n:m]], alpha=alpha, delta=DELTA,
                                             rhos=RHOS, betting=s, horizon=n, observation="split"), n)
                           for p, s in PRIORS.items()}
                    rows.append((table.name, "R-AutoEval+", {p: v / floor for p, v in got.items()},
                                 {p: got[p] / reval[p] for p in PRIORS}))
                    print(f"| {table.name} | {alpha} | {h.mean():.3f} | R-AutoEval+ (split) | {jname} | {floor:.1f} | "
                          + " | ".join(f"{v / floor:.2f}" for v in got.values()) + " |", flush=True)
    print("\n| table | policy | cases | " + " | ".join(f"mean ratio, {p}" for p in PRIORS) + " |")
    print("|---|---|---|" + "---|" * len(PRIORS))
    for name in [t.name for t in every] + ["all"]:
        for policy in ("R-Eval", "R-AutoEval+"):
            mine = [r for r in rows if r[1] == policy and name in (r[0], "all")]
            if mine:
                print(f"| {name} | {policy} | {len(mine)} | "
                      + " | ".join(f"{np.mean([r[2][p] for r in mine]):.3f}" for p in PRIORS) + " |")
    paired = [r[3] for r in rows if r[3] is not None]
    print("\nR-AutoEval+ labels / R-Eval labels on the same orders (same prior): "
          + ", ".join(f"{p}: mean {np.mean([x[p] for x in paired]):.3f}, max {np.max([x[p] for x in paired]):.3f}"
                      for p in PRIORS))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
