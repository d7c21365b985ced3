"""Reruns through the doors a user takes besides a plain rerun: each door's any-pass and any-fail rate at the boundary.

benchmarks/reruns.py measures plain reruns (new seed, larger budget). This script measures the other doors of
docs/gate.md's rerun table where the answer is a rate, on the same boundary claims (``reruns.boundary_tables``: a
recovery of exactly 0.95, a loss of exactly alpha), ``PER_JOB`` candidates per job, the engine in-process:

- **kill, clean, new seed**: each rerun but the last is killed part-way (after ``--kill-round`` rounds of 10 labels,
  unless every candidate is decided by then) and its job folder removed, as ``certsel jobs --clean`` does, before the
  next rerun with the next seed and a larger budget; the last runs to its end. The killed jobs wrote their claims'
  tests ahead (workers/claims.py), so each rerun continues where the killed one stood.
- **table written again**: the k-th rerun reads the same measurements written another way (a CSV with string ids,
  rows shuffled, values rounded to 6 decimals; :func:`rewritten`), on tables of 16-digit values at the boundary
  (:func:`continuous_tables`). A claim's identity is what was measured (ids normalised, values at 6 decimals), so each
  rerun continues its claim's one test.

A sequence passes if any of its finished runs passes, fails if any fails; at the boundary both are wrong, so each must
happen at most delta of the time.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sqlite3
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from reruns import PER_JOB, boundary_tables, clopper_pearson, job_for  # noqa: E402
from results_doc import results_section  # noqa: E402


class Killed(Exception):
    """A job interrupted (Ctrl-C, a CI timeout) part-way through its rounds."""


def continuous_tables(path, rng, claim: str, n_items: int) -> None:
    """Like ``reruns.boundary_tables`` (PER_JOB candidates exactly at the boundary in distribution), with values of 16
    digits, so that rounding them is an edit: a risk gate's losses ~ Beta(1, 9) (mean exactly alpha = 0.1); a recovery
    gate's reference scores ~ Beta(7, 3) (mean 0.7) and the candidate's the same except on 10% of items, redrawn from
    Beta(3.5, 6.5) (mean 0.35), so E[s] = 0.9 * 0.7 + 0.1 * 0.35 = 0.95 * 0.7."""
    rows: dict = {"candidate": [], "item": []}
    for k in range(PER_JOB):
        rows["candidate"] += [f"c{k}"] * n_items
        rows["item"] += list(range(n_items))
        if claim == "recovery":
            ref = rng.beta(7, 3, n_items)
            s = np.where(rng.random(n_items) < 0.1, rng.beta(3.5, 6.5, n_items), ref)
            rows.setdefault("score", []).extend(s.tolist())
            rows.setdefault("reference", []).extend(ref.tolist())
        else:
            rows.setdefault("loss", []).extend(rng.beta(1, 9, n_items).tolist())
    pq.write_table(pa.table(rows), path)


def rewritten(path, rng) -> list[pathlib.Path]:
    """The table at ``path`` written again four ways, as users rewrite a table between runs: as it is; a CSV with its
    item ids as strings; its rows shuffled; its values rounded to 6 decimals."""
    from pyarrow import csv

    t = pq.read_table(path)
    stem = path.with_suffix("")
    as_str = t.set_column(t.column_names.index("item"), "item", pa.array([str(i) for i in t.column("item").to_pylist()]))
    csv.write_csv(as_str, f"{stem}-str.csv")
    pq.write_table(t.take(rng.permutation(t.num_rows)), f"{stem}-shuffled.parquet")
    rounded = t
    for col in ("loss", "score", "reference"):
        if col in t.column_names:
            rounded = rounded.set_column(t.column_names.index(col), col,
                                         pa.array(np.round(t.column(col).to_numpy(), 6)))
    pq.write_table(rounded, f"{stem}-rounded.parquet")
    return [path, pathlib.Path(f"{stem}-str.csv"), pathlib.Path(f"{stem}-shuffled.parquet"),
            pathlib.Path(f"{stem}-rounded.parquet")]


def door_sequences(claim: str, door: str, sequences: int, reruns: int, step: int, delta: float, kill_round: int = 7,
                   seed: int = 0, tests: list | None = None) -> np.ndarray:
    """Outcomes (sequences, reruns) of reruns through ``door`` (``killed`` for a killed run); ``tests`` gets the number
    of tests each job's store holds per candidate (1.0: every rerun continued its claim's one test):

    - ``kill``: every rerun but the last killed after ``kill_round`` rounds (unless all its candidates are decided by
      then) and its job folder removed, as ``certsel jobs --clean`` does;
    - ``rewrite``: the k-th rerun reads the table written again the ((k - 1) mod 4)-th way of :func:`rewritten`."""
    from certsel.gates import gate_config
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.results.outcomes import Outcome

    rng = np.random.default_rng(seed)
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(-(-sequences // PER_JOB)):
            path = pathlib.Path(tmp) / f"{claim}-{j}.parquet"
            if door == "rewrite":
                continuous_tables(path, rng, claim, reruns * step)
                paths = rewritten(path, rng)
            else:
                boundary_tables(path, rng, claim, reruns * step)
                paths = [path]
            store, jobs = pathlib.Path(tmp) / f"labels-{j}.db", pathlib.Path(tmp) / f"jobs-{j}"
            out_j = []
            for k in range(1, reruns + 1):
                cfg = gate_config({**job_for(claim, paths[(k - 1) % len(paths)], delta), "seed": 1000 * j + k,
                                   "budget": {"n": k * step, "batch": 10}, "state": {"dir": str(jobs)}}, labels=store)
                job_dir = jobs / f"run-{k}"
                job_dir.mkdir(parents=True)

                def kill(records, n, last=k == reruns):
                    if door == "kill" and not last and n >= kill_round and not all(r.finished for r in records):
                        raise Killed

                try:
                    res = run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False, job_dir=job_dir,
                                  progress=kill)
                    cert = set(res.certified)
                    out_j.append([str(Outcome.of(x.status, x.name in cert)) for x in res.records])
                except Killed:
                    out_j.append(["killed"] * PER_JOB)
                if door == "kill":
                    shutil.rmtree(job_dir)  # what certsel jobs --clean does to it
            if tests is not None:
                db = sqlite3.connect(store)
                tests.append(db.execute("select count(distinct claim) from claims").fetchone()[0] / PER_JOB)
                db.close()
            outcomes.append(np.array(out_j).T)
    return np.concatenate(outcomes)[:sequences]


def killed_sequences(claim: str, sequences: int, reruns: int, step: int, delta: float, kill_round: int,
                     seed: int = 0) -> np.ndarray:
    """Outcomes of the door *kill, clean, new seed* (:func:`door_sequences`)."""
    return door_sequences(claim, "kill", sequences, reruns, step, delta, kill_round, seed)


DOORS = {"kill": "kill, clean, new seed", "rewrite": "table written again (CSV, string ids, shuffled, rounded)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=1000)
    ap.add_argument("--reruns", type=int, default=10)
    ap.add_argument("--step", type=int, default=100, help="the k-th rerun's budget is k * step human labels")
    ap.add_argument("--kill-round", type=int, default=7, help="a killed rerun dies after this many rounds of 10 labels")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--doors", nargs="+", choices=list(DOORS), default=list(DOORS))
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    ok = True
    with results_section("rerun-doors", "Reruns through every door", write=args.docs):
        print(f"{args.sequences:,} gated candidates per claim and door at the boundary (as in the section above), "
              f"each rerun {args.reruns} times in one label store, the k-th with seed k and budget {args.step} k. "
              f"**Kill, clean, new seed**: every rerun but the last is killed after {args.kill_round} rounds of 10 "
              f"labels (unless all its candidates are decided by then) and its job folder removed before the next "
              f"(`certsel jobs --clean`); the last runs to its end. **Table written again**: losses (or scores) of 16 "
              f"digits at the boundary in distribution, the k-th rerun reading the table as it is, as a CSV with its "
              f"item ids as strings, with its rows shuffled, or with its values rounded to 6 decimals, in turn. "
              f"R-Eval, delta {args.delta:g}, the engine in-process (`python benchmarks/rerun_doors.py`). Intervals: "
              f"99% Clopper-Pearson. *Tests per claim*: the claims each store holds per candidate (1.00: every rerun "
              f"continued its claim's one test). Before the write-ahead, a killed gate's claim restarted as a fresh "
              f"test: 0.41 of such sequences passed (issue 70, n = 100); before the identity of what was measured, "
              f"each rewrite of a table was a fresh test.\n")
        print("| claim | door | any pass | 99% interval | any fail | 99% interval | runs killed | tests per claim |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for door in args.doors:
            for claim in ("recovery", "risk"):
                tests: list = []
                o = door_sequences(claim, door, args.sequences, args.reruns, args.step, args.delta, args.kill_round,
                                   tests=tests)
                n = o.shape[0]
                passes, fails = int(np.sum((o == "pass").any(axis=1))), int(np.sum((o == "fail").any(axis=1)))
                (lp, hp), (lf, hf) = clopper_pearson(passes, n), clopper_pearson(fails, n)
                print(f"| {claim} | {DOORS[door]} | {passes / n:.3f} | [{lp:.3f}, {hp:.3f}] | {fails / n:.3f} | "
                      f"[{lf:.3f}, {hf:.3f}] | {float(np.mean(o == 'killed')):.2f} | {float(np.mean(tests)):.2f} |")
                ok &= passes / n <= args.delta and fails / n <= args.delta
        print(f"\nAny pass and any fail at most delta = {args.delta:g} through every door measured: {ok} "
              f"({(time.perf_counter() - t0) / 60:.1f} min).")


if __name__ == "__main__":
    main()
