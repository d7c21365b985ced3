"""Selection-aware pairwise ranking: model evaluations per goal, winners and wrong orders.

Runs ``procedure: pairwise`` through the driver (in-process runtime, replay sources) with
``pairwise.goal`` = ``all`` (every pair until its sign is certified), ``ranking`` (pairs whose
order is implied by certified pairs stop) and ``best`` (only pairs between possible winners
run), on several seeds (item orders). Tables: the bundled AlpacaEval example (12 models,
805 items) and a 40-model table simulated from its structure (risks spread like AlpacaEval's,
0/1 losses, independent items). Reported: model evaluations (distinct items labelled per
model, summed) against K x N, the certified orders, wrong certified orders against the
table's means, whether the selection is the true best model.

    python benchmarks/pairwise_goals.py [--seeds 5] [--policy seq]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]

from certsel.config import load_config, parse_config  # noqa: E402
from certsel.orchestrator.engine.driver import LocalRuntime, run_job  # noqa: E402
from certsel.orchestrator.inputs.sources import load_job_data  # noqa: E402

GOALS = ("all", "ranking", "best")


def simulated_table(path: pathlib.Path, K: int = 40, N: int = 805, seed: int = 0) -> pathlib.Path:
    """K models with AlpacaEval-like risks (0.70-0.97, most near the top), 0/1 losses."""
    rng = np.random.default_rng(seed)
    risks = np.sort(np.r_[0.70, 0.83, 0.83, 0.87, rng.uniform(0.90, 0.97, K - 4)])
    losses = (rng.random((K, N)) < risks[:, None]).astype(float)
    names = [f"model_{k:02d}" for k in range(K)]
    pq.write_table(pa.table({"model": np.repeat(names, N), "item": np.tile(np.arange(N), K),
                             "loss": losses.reshape(-1)}), path)
    return path


def run(cfg, seeds):
    data = load_job_data(cfg)
    truth = data.table.true_risk
    names = data.names
    best = names[int(np.argmin(truth))]
    out = {"evals": [], "orders": [], "wrong": 0, "best": 0}
    for seed in seeds:
        c = cfg.model_copy(update={"seed": seed})
        res = run_job(c, data, LocalRuntime(4), collect_labels=False)
        rk = res.ranking
        out["evals"].append(res.spent["human"])
        out["orders"].append(rk.pairs_certified)
        pos = {m: k for k, m in enumerate(names)}
        out["wrong"] += sum(truth[pos[a]] >= truth[pos[b]] for a, bs in rk.better.items() for b in bs)
        out["best"] += res.selected == best
    return out, len(names) * data.n_items, len(names) * (len(names) - 1) // 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--policy", default="seq", choices=["seq", "cer-eval"])
    args = ap.parse_args(argv)
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    print(f"{args.seeds} seeds per row, policy {args.policy}, delta = 0.05 over all pairs, budget = the whole test set\n")
    print("| table | goal | model evaluations (saved) | orders certified (of all pairs) | wrong orders | "
          "true best selected | seconds |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        sim = simulated_table(pathlib.Path(tmp) / "sim40.parquet")
        tables = [("AlpacaEval, 12 models", lambda goal: load_config(
                      ROOT / "examples" / "alpacaeval_ranking.yaml",
                      [f"pairwise.goal={goal}", f"policy.kind={args.policy}", "tracking.intervals=none"])),
                  ("simulated, 40 models", lambda goal: parse_config({
                      "data": {"path": str(sim), "candidate": "model", "human": "loss"},
                      "policy": {"kind": "seq"}, "procedure": "pairwise", "delta": 0.05, "pairwise": {"goal": goal},
                      "budget": {"n": 805, "batch": 25}}))]
        for name, make in tables:
            for goal in GOALS:
                t = time.perf_counter()
                o, full, pairs = run(make(goal), seeds)
                ev = np.mean(o["evals"])
                print(f"| {name} | {goal} | {ev:.0f} of {full} ({1 - ev / full:.0%}) | {np.mean(o['orders']):.0f} of "
                      f"{pairs} | {o['wrong']} | {o['best']}/{len(seeds)} | {(time.perf_counter() - t) / len(seeds):.0f} |",
                      flush=True)
    print(f"\n<!-- {time.perf_counter() - t0:.0f} s -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
