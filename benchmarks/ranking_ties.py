"""Rankings with certified ties, top-k sets and rank intervals, against Arena-style bootstrap ranks.

Runs ``procedure: pairwise`` (Seq pair policies, delta = 0.05 over all pairs, budget = the
whole test set, batches of 25) through the engine on many shuffles (seeds) of two tables: the
bundled AlpacaEval table (12 models x 805 items) and a 40-model table simulated from its
structure (``pairwise_goals.simulated_table``). Per goal and epsilon it reports, over the
shuffles:

* model evaluations (distinct items labelled per model, summed) against K x N;
* how often the result is a full ranking (every pair ordered or tied);
* **wrong orders** (a certified order the full table's means contradict) and **false ties**
  (a pair certified tied whose full-table difference is >= epsilon), and the runs with either:
  the family-wise failure, to compare with delta;
* rank-interval coverage: the runs in which every model's true rank (1 + the models with a
  lower mean on the table) lies in its certified interval;
* for ``topk``: the runs whose certified-in set holds only true top-k models and whose
  certified-out set only others.

The oracle limit (:func:`oracle_limit`) bounds from below what a full ranking must spend on
each table, for a test that knows every pair's variance: what "saved" can be at most.

The bootstrap comparison gives Arena-style ranks the same number of evaluations per model
(the mean that certsel's ``ranking`` goal used, taken as the first items of a random order):
1,000 paired bootstrap resamples of those items, each model's 95% percentile interval of its
mean loss, and an order asserted when two intervals are disjoint (what "Rank (UB)" counts), with
no multiplicity correction. Reported: asserted orders per run, wrong ones, and the runs with a
wrong one.

Each design runs with the pair tests' bets of ``--bets`` (``pairwise.bet``): ``plug-in`` (Seq's
own, what every ranking used before the margin bet) and ``margin`` (sized for the order or tie a
pair is closest to deciding, the default), on the same shuffles, so the two are compared in one
run.

    python benchmarks/ranking_ties.py --shuffles 200 [--workers 2] [--tables alpaca,sim40] [--bets plug-in,margin]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import pathlib
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from pairwise_goals import simulated_table  # noqa: E402

DELTA = 0.05


def make_config(table: str, path: str, goal: str, epsilon: float | None, topk: int | None, bet: str | None = None):
    from certsel.config import parse_config

    pairwise = {"goal": goal, **({} if epsilon is None else {"epsilon": epsilon}),
                **({} if topk is None else {"topk": topk}), **({} if bet is None else {"bet": bet})}
    return parse_config({"name": f"{table}-{goal}", "data": {"path": path, "candidate": "model", "human": "loss"},
                         "policy": {"kind": "seq", "radius": "betting"}, "procedure": "pairwise", "delta": DELTA,
                         "pairwise": pairwise, "budget": {"n": 805, "batch": 25}, "tracking": {"intervals": "none"}})


def one_run(args) -> dict:
    """One shuffle of one design: what the job certified, checked against the full table."""
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job

    table, path, goal, epsilon, topk, seed, bet = args
    cfg = make_config(table, path, goal, epsilon, topk, bet).model_copy(update={"seed": seed})
    data = load_job_data(cfg)
    res = run_job(cfg, data, LocalRuntime(1), collect_labels=False)
    rk, names = res.ranking, data.names
    truth = dict(zip(names, data.table.true_risk, strict=True))
    wrong = sum(truth[a] >= truth[b] for a, bs in rk.better.items() for b in bs)
    false_ties = sum(abs(truth[a] - truth[b]) >= epsilon for a, b in (p.split(" ~ ") for p in rk.tied)) if epsilon else 0
    rank = {m: 1 + sum(truth[j] < truth[m] for j in names) for m in names}
    covered = all(lo <= rank[m] <= hi for m, (lo, hi) in rk.rank_intervals.items())
    out = {"evals": res.spent["human"], "full": len(names) * data.n_items, "orders": rk.pairs_certified,
           "ties": rk.pairs_tied, "pairs": rk.pairs, "wrong": int(wrong), "false_ties": int(false_ties),
           "complete": rk.pairs_certified + rk.pairs_tied == rk.pairs, "covered": covered,
           "per_model": res.spent["human"] / len(names)}
    if rk.topk is not None:
        true_top = set(sorted(names, key=truth.get)[:topk])
        out["topk_ok"] = set(rk.topk.certified_in) <= true_top and not set(rk.topk.certified_out) & true_top
        out["topk_decided"] = not rk.topk.undetermined
    return out


def bootstrap_orders(losses: np.ndarray, truth: np.ndarray, m: int, seed: int, B: int = 1000) -> tuple[int, int]:
    """(asserted orders, wrong ones) of Arena-style bootstrap ranks on the first ``m`` items of
    a random order: paired resamples, 95% percentile intervals, disjoint intervals = an order."""
    rng = np.random.default_rng(10_000 + seed)
    items = rng.permutation(losses.shape[1])[:m]
    x = losses[:, items]
    means = np.stack([x[:, rng.integers(0, m, m)].mean(axis=1) for _ in range(B)], axis=1)  # (K, B)
    lo, hi = np.percentile(means, 2.5, axis=1), np.percentile(means, 97.5, axis=1)
    asserted = hi[:, None] < lo[None, :]  # [a, b]: a asserted better (lower loss) than b
    wrong = asserted & (truth[:, None] >= truth[None, :])
    return int(asserted.sum()), int(wrong.sum())


def oracle_limit(losses: np.ndarray, delta: float, epsilon: float | None) -> np.ndarray:
    """A lower bound on each model's evaluations in a full ranking, for an oracle test that knows
    every pair's moments on the table (:func:`certsel.policies.ranking_limit.ranking_need`,
    each pair at its level per direction delta / (K (K - 1)))."""
    from certsel.policies.ranking_limit import ranking_need, table_moments

    K, N = losses.shape
    return ranking_need(*table_moments(losses), N, delta / (K * (K - 1)), epsilon)


def summarise(rows: list[dict]) -> dict:
    n = len(rows)
    fail = sum(r["wrong"] > 0 or r["false_ties"] > 0 for r in rows)
    return {"evals": np.mean([r["evals"] for r in rows]), "full": rows[0]["full"],
            "complete": sum(r["complete"] for r in rows) / n, "orders": np.mean([r["orders"] for r in rows]),
            "ties": np.mean([r["ties"] for r in rows]), "pairs": rows[0]["pairs"],
            "wrong": sum(r["wrong"] for r in rows), "false_ties": sum(r["false_ties"] for r in rows),
            "failure": fail / n, "covered": sum(r["covered"] for r in rows) / n, "n": n,
            "per_model": np.mean([r["per_model"] for r in rows]),
            **({"topk_ok": sum(r["topk_ok"] for r in rows) / n, "topk_decided": sum(r["topk_decided"] for r in rows) / n}
               if "topk_ok" in rows[0] else {})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shuffles", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tables", default="alpaca,sim40")
    ap.add_argument("--epsilons", default="0.02,0.05")
    ap.add_argument("--designs", default="", help="indices of the designs to run (default: all)")
    ap.add_argument("--bets", default="plug-in,margin", help="pairwise.bet values to compare")
    args = ap.parse_args(argv)
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        tables = {"alpaca": ("AlpacaEval, 12 models", str(ROOT / "examples" / "data" / "alpacaeval_preferences.parquet")),
                  "sim40": ("simulated, 40 models", str(simulated_table(pathlib.Path(tmp) / "sim40.parquet")))}
        designs = [("ranking", None, None), *[("ranking", e, None) for e in epsilons], ("topk", epsilons[0], 3)]
        if args.designs:
            designs = [designs[int(i)] for i in args.designs.split(",")]
        print(f"{args.shuffles} shuffles per row, Seq pair policies, delta = {DELTA} over all pairs, "
              "budget = the whole test set\n")
        print("| table | goal | epsilon | bet | model evaluations (saved) | full ranking | orders + ties (of pairs) | "
              "wrong orders | false ties | runs with either (99% CP upper) | rank intervals cover | top-3 right / "
              "decided |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        bets = args.bets.split(",")
        per_model, saved = {}, {}
        with mp.get_context("spawn").Pool(args.workers) as pool:
            for key in args.tables.split(","):
                name, path = tables[key]
                for (goal, eps, k), bet in ((d, b) for d in designs for b in bets):
                    t = time.perf_counter()
                    rows = pool.map(one_run, [(key, path, goal, eps, k, s, bet) for s in range(args.shuffles)])
                    s = summarise(rows)
                    if goal == "ranking":
                        saved[(key, eps, bet)] = s["evals"]
                    if goal == "ranking" and eps == epsilons[0] and bet == bets[-1] or key not in per_model:
                        per_model[key] = s["per_model"]
                    print(f"| {name} | {goal}{'' if k is None else f' (k = {k})'} | {eps or '-'} | {bet} | {s['evals']:.0f} of "
                          f"{s['full']} ({1 - s['evals'] / s['full']:.0%}) | {s['complete']:.0%} | {s['orders']:.1f} + "
                          f"{s['ties']:.1f} of {s['pairs']} | {s['wrong']} | {s['false_ties']} | {s['failure']:.3f} "
                          f"({_cp_upper(round(s['failure'] * s['n']), s['n']):.3f}) | {s['covered']:.3f} | "
                          + (f"{s['topk_ok']:.3f} / {s['topk_decided']:.0%}" if "topk_ok" in s else "-")
                          + f" |  <!-- {time.perf_counter() - t:.0f} s -->", flush=True)
        print("\nThe oracle limit (oracle_limit): model evaluations a full ranking needs at least, and certsel's "
              "evaluations against it\n")
        print("| table | epsilon | oracle's evaluations (saved at most) | "
              + " | ".join(f"certsel, {b} (x oracle)" for b in bets) + " |")
        print("|---|---|---|" + "---|" * len(bets))
        for key in args.tables.split(","):
            name, path = tables[key]
            losses = pq.read_table(path).to_pandas().pivot(index="model", columns="item", values="loss").to_numpy()
            for eps in (None, *epsilons):
                need = oracle_limit(losses, DELTA, eps).sum()
                cells = [saved.get((key, eps, b)) for b in bets]
                print(f"| {name} | {eps or '-'} | {need} of {losses.size} ({1 - need / losses.size:.0%}) | "
                      + " | ".join("-" if c is None else f"{c:.0f} ({c / need:.3f}x)" for c in cells) + " |", flush=True)
        print(f"\nArena-style bootstrap ranks at certsel's evaluations per model (ranking, epsilon = {epsilons[0]}):\n")
        print("| table | items per model | asserted orders per run | wrong asserted orders per run | runs with a wrong "
              "order |")
        print("|---|---|---|---|---|")
        for key in args.tables.split(","):
            name, path = tables[key]
            t = pq.read_table(path).to_pandas().pivot(index="model", columns="item", values="loss")
            losses = t.to_numpy()
            truth = losses.mean(axis=1)
            for m in (100, 200, 400, int(round(per_model[key]))):
                got = [bootstrap_orders(losses, truth, m, s) for s in range(args.shuffles)]
                asserted, wrong = np.array(got).T
                print(f"| {name} | {m} | {asserted.mean():.1f} | {wrong.mean():.2f} | {np.mean(wrong > 0):.3f} |",
                      flush=True)
    print(f"\n<!-- {time.perf_counter() - t0:.0f} s -->")
    return 0


@functools.cache
def _cp_upper(k: int, n: int) -> float:
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(0.99, k + 1, n - k))


if __name__ == "__main__":
    sys.exit(main())
