"""What policy snapshots save when a host is rebuilt: restore from snapshot + log tail
against a replay of every step from the log, for the same candidates after the same steps.

For each policy a host runs K candidates for S steps with a durable label log, once with
snapshots every ``--every`` steps and once without. A fresh host (a restarted actor) then
restores them, and the wall time of ``CandidateHost.restore`` is measured (best of
``--reps``), together with the states' equality. Both restores send no request: the
difference is the statistics redone. Replay data: the bundled TriviaQA table (R-AutoEval+)
and AlpacaEval with its embeddings (Cer-Eval).

    python benchmarks/bench_restore.py [--steps 60] [--every 10] [--reps 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

from certsel.config import parse_config
from certsel.orchestrator.engine.driver import JobPlan
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.workers.actor import CandidateHost
from certsel.workers.labellog import pack
from certsel.workers.replay import DATA_DIR


def configs(steps: int, batch: int) -> dict:
    trivia = {"path": str(DATA_DIR / "triviaqa_llama31_8b_mx.parquet"), "judge": "loss_judge_med"}
    alpaca = {"path": str(DATA_DIR / "alpacaeval_preferences.parquet"), "candidate": "model", "human": "loss",
              "features": str(DATA_DIR / "alpacaeval_embeddings.parquet")}
    models = sorted(set(pq.read_table(alpaca["path"], columns=["model"]).column("model").to_pylist()))
    return {
        "r-autoeval+ (48 candidates)": {
            "data": trivia, "policy": {"kind": "r-autoeval+", "betting": "up"}, "procedure": "bonferroni",
            "objective": {"column": "avg_bitwidth"}, "budget": {"n": steps * batch, "r": 3, "batch": batch}},
        # alpha near most models' risks (0.93 to 0.96): they stay undecided for long
        "cer-eval (12 candidates)": {
            "data": alpaca, "policy": {"kind": "cer-eval"}, "alpha": 0.93, "procedure": "fst",
            "order": models, "budget": {"n": min(805, steps * batch), "batch": batch}},
    }


def host_for(raw: dict, job_dir, every: int) -> tuple[CandidateHost, list[str]]:
    cfg = parse_config({**raw, "state": {"snapshot_every": every}, "tracking": {"intervals": "none"}})
    data = load_job_data(cfg)
    plan = JobPlan(cfg, data, str(job_dir))
    host = CandidateHost()
    host.load(plan.specs, plan.arrays, plan.rows)
    return host, list(data.names)


def equal(a, b) -> bool:
    """Two states are the same, arrays bit for bit (NaN equal to NaN)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    return a == b or (a != a and b != b)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{args.steps} steps of {args.batch} labels per candidate, snapshots every {args.every} steps, "
          f"restore timed best of {args.reps}")
    print("| policy | steps | labels per candidate | restore from snapshot + tail (s) | full replay (s) | "
          "replay / snapshot | snapshot size per candidate (kB) | same state |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for label, raw in configs(args.steps, args.batch).items():
        times, states, size = {}, {}, 0
        for every in (args.every, 10**9):
            with tempfile.TemporaryDirectory() as tmp:
                host, names = host_for(raw, tmp, every)
                for _ in range(args.steps):
                    host.step(names, args.batch)
                history = {n: list(host.history[n]) for n in names}
                if every == args.every:
                    size = np.mean([len(pack({"candidate": host.candidates[n].state_dict(), "log_used": 0}))
                                    for n in names]) / 1024
                best = float("inf")
                for _ in range(args.reps):
                    fresh, _ = host_for(raw, tmp, every)
                    t0 = time.perf_counter()
                    snaps = fresh.restore(history)
                    best = min(best, time.perf_counter() - t0)
                times[every] = best
                states[every] = {n: fresh.candidates[n].state_dict() for n in names}
                labels = int(np.mean([s["t"] for s in snaps]))
        same = all(equal(states[args.every][n], states[10**9][n]) for n in states[10**9])
        ok &= same
        print(f"| {label} | {args.steps} | {labels} | {times[args.every]:.3f} | {times[10**9]:.3f} | "
              f"{times[10**9] / times[args.every]:.1f} | {size:.0f} | {'yes' if same else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
