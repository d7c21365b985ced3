"""The type-I error of a gate's pass at the boundary, through the real engine.

Each gated candidate is an i.i.d. sample of paired scores whose distribution has recovery
E[s] / E[s_ref] exactly r (the boundary: the claim "recovery >= r" holds only just, and its
opposite too): s_ref ~ Bernoulli(p), and s equals s_ref except on a share of items where it
is redrawn so that E[s] = r p. ``--runs`` candidates (10 per job, each with a table of its
own items) are gated by the engine (``certsel gate``'s procedure, R-Eval, in-process) with a
budget of 1,000 items; a pass is a type-I error of the claim's test, a fail one of its
opposite's. Both rates must stay below delta.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

PER_JOB, N = 10, 1000


def boundary_table(path, rng, r: float, p: float = 0.7, disagree: float = 0.1) -> None:
    """PER_JOB candidates, N items each, recovery exactly r in distribution."""
    q = (r * p - (1 - disagree) * p) / disagree
    rows = {"candidate": [], "item": [], "score": [], "reference": []}
    for k in range(PER_JOB):
        ref = (rng.random(N) < p).astype(float)
        s = np.where(rng.random(N) < disagree, (rng.random(N) < q).astype(float), ref)
        rows["candidate"] += [f"c{k}"] * N
        rows["item"] += list(range(N))
        rows["score"] += s.tolist()
        rows["reference"] += ref.tolist()
    pq.write_table(pa.table(rows), path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="gated candidates (10 per job)")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    from scipy.stats import beta

    from certsel.gates import gate_config
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.results.outcomes import Outcome

    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, results_section(
            "gate-boundary", "Gates at the boundary: type-I error of pass and fail", write=args.docs):
        print(f"{args.runs} gated candidates per claim, each an i.i.d. sample of {N:,} paired scores whose recovery is "
              f"exactly r in distribution (s_ref ~ Bernoulli(0.7); s = s_ref except on 10% of items, redrawn so "
              f"that E[s] = r E[s_ref]). The engine gates them ({PER_JOB} per job, R-Eval, delta {args.delta:g}, "
              f"budget {N:,}). At the boundary both the claim and its opposite hold only just, so a pass and a "
              f"fail are each wrong at most delta of the time.\n")
        print("| r | runs | pass | fail | undecided | pass: 99% Clopper-Pearson interval | median labels |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in (0.95, 0.9):
            rng = np.random.default_rng(int(r * 1000))
            outcomes, labels = [], []
            for j in range(args.runs // PER_JOB):
                path = pathlib.Path(tmp) / f"b{r}-{j}.parquet"
                boundary_table(path, rng, r)
                cfg = gate_config({"data": {"path": str(path), "score": "score", "reference": "reference"},
                                   "recovery": r, "policy": {"kind": "r-eval"}, "delta": args.delta,
                                   "budget": {"n": N}, "seed": j, "state": {"dir": str(pathlib.Path(tmp) / "jobs")}},
                                  labels=pathlib.Path(tmp) / "labels.db")
                cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": None})})
                res = run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False)
                outcomes += [str(Outcome.of(x.status, x.name in set(res.certified))) for x in res.records]
                labels += [x.n_human for x in res.records]
            o = np.array(outcomes)
            n, passes = o.size, int(np.sum(o == "pass"))
            upper = beta.ppf(0.995, passes + 1, n - passes) if passes < n else 1.0
            lower = beta.ppf(0.005, passes, n - passes + 1) if passes else 0.0
            print(f"| {r:g} | {n} | {passes / n:.1%} | {np.mean(o == 'fail'):.1%} | {np.mean(o == 'undecided'):.1%} | "
                  f"[{lower:.1%}, {upper:.1%}] | {np.median(labels):.0f} |")
            rows.append((r, passes / n, float(np.mean(o == "fail"))))
        print(f"\nBoth rates at most delta = {args.delta:g} for every r: "
              f"{all(p <= args.delta and f <= args.delta for _, p, f in rows)} "
              f"({(time.perf_counter() - t0) / 60:.1f} min).")


if __name__ == "__main__":
    main()
