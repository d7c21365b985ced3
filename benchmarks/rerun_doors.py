"""Reruns through the doors a user takes besides a plain rerun: each door's any-pass and any-fail rate at the boundary.

benchmarks/reruns.py measures plain reruns (new seed, larger budget). This script measures the other doors of
docs/gate.md's rerun table where the answer is a rate, on the same boundary claims (``reruns.boundary_tables``: a
recovery of exactly 0.95, a loss of exactly alpha), ``PER_JOB`` candidates per job, the engine in-process:

- **kill, clean, new seed**: each rerun but the last is killed part-way (after ``--kill-round`` rounds of 10 labels,
  unless every candidate is decided by then) and its job folder removed, as ``certsel jobs --clean`` does, before the
  next rerun with the next seed and a larger budget; the last runs to its end. The killed jobs wrote their claims'
  tests ahead (workers/claims.py), so each rerun continues where the killed one stood.

A sequence passes if any of its finished runs passes, fails if any fails; at the boundary both are wrong, so each must
happen at most delta of the time.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from reruns import PER_JOB, boundary_tables, clopper_pearson, job_for  # noqa: E402
from results_doc import results_section  # noqa: E402


class Killed(Exception):
    """A job interrupted (Ctrl-C, a CI timeout) part-way through its rounds."""


def killed_sequences(claim: str, sequences: int, reruns: int, step: int, delta: float, kill_round: int,
                     seed: int = 0) -> np.ndarray:
    """Outcomes (sequences, reruns) of the door *kill, clean, new seed*: ``killed`` for a killed run."""
    from certsel.gates import gate_config
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.results.outcomes import Outcome

    rng = np.random.default_rng(seed)
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(-(-sequences // PER_JOB)):
            path = pathlib.Path(tmp) / f"{claim}-{j}.parquet"
            boundary_tables(path, rng, claim, reruns * step)
            store, jobs = pathlib.Path(tmp) / f"labels-{j}.db", pathlib.Path(tmp) / f"jobs-{j}"
            out_j = []
            for k in range(1, reruns + 1):
                cfg = gate_config({**job_for(claim, path, delta), "seed": 1000 * j + k,
                                   "budget": {"n": k * step, "batch": 10}, "state": {"dir": str(jobs)}}, labels=store)
                job_dir = jobs / f"run-{k}"
                job_dir.mkdir(parents=True)

                def kill(records, n, last=k == reruns):
                    if not last and n >= kill_round and not all(r.finished for r in records):
                        raise Killed

                try:
                    res = run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False, job_dir=job_dir,
                                  progress=kill)
                    cert = set(res.certified)
                    out_j.append([str(Outcome.of(x.status, x.name in cert)) for x in res.records])
                except Killed:
                    out_j.append(["killed"] * PER_JOB)
                shutil.rmtree(job_dir)  # what certsel jobs --clean does to it
            outcomes.append(np.array(out_j).T)
    return np.concatenate(outcomes)[:sequences]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=1000)
    ap.add_argument("--reruns", type=int, default=10)
    ap.add_argument("--step", type=int, default=100, help="the k-th rerun's budget is k * step human labels")
    ap.add_argument("--kill-round", type=int, default=7, help="a killed rerun dies after this many rounds of 10 labels")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    ok = True
    with results_section("rerun-doors", "Reruns through every door", write=args.docs):
        print(f"{args.sequences:,} gated candidates per claim at the boundary (as in the section above), each "
              f"rerun {args.reruns} times in one label store, the k-th with seed k and budget {args.step} k. "
              f"**Kill, clean, new seed**: every rerun but the last is killed after {args.kill_round} rounds of 10 "
              f"labels (unless all its candidates are decided by then) and its job folder removed before the next "
              f"(`certsel jobs --clean`); the last runs to its end. R-Eval, delta {args.delta:g}, the engine "
              f"in-process (`python benchmarks/rerun_doors.py`). Intervals: 99% Clopper-Pearson. Before the "
              f"write-ahead, a killed gate's claim restarted as a fresh test: 0.41 of such sequences passed "
              f"(issue 70, n = 100).\n")
        print("| claim | door | any pass | 99% interval | any fail | 99% interval | runs killed |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for claim in ("recovery", "risk"):
            o = killed_sequences(claim, args.sequences, args.reruns, args.step, args.delta, args.kill_round)
            n = o.shape[0]
            passes, fails = int(np.sum((o == "pass").any(axis=1))), int(np.sum((o == "fail").any(axis=1)))
            (lp, hp), (lf, hf) = clopper_pearson(passes, n), clopper_pearson(fails, n)
            print(f"| {claim} | kill, clean, new seed | {passes / n:.3f} | [{lp:.3f}, {hp:.3f}] | {fails / n:.3f} | "
                  f"[{lf:.3f}, {hf:.3f}] | {float(np.mean(o == 'killed')):.2f} |")
            ok &= passes / n <= args.delta and fails / n <= args.delta
        print(f"\nAny pass and any fail at most delta = {args.delta:g} through every door measured: {ok} "
              f"({(time.perf_counter() - t0) / 60:.1f} min).")


if __name__ == "__main__":
    main()
