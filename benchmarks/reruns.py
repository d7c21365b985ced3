"""Gates rerun at the boundary: one claim, one test, however often it is rerun.

Each sequence is one gated candidate whose claim holds only just: an i.i.d. table of paired scores whose recovery is
exactly r in distribution (recovery gate), or of losses whose mean is exactly alpha (risk gate). It is gated
``--reruns`` times in one label store, each rerun with a new seed and a larger budget (the k-th rerun: seed k,
budget k * ``--step``), as a person or a CI retry would rerun an undecided gate. With the store's ledger each rerun
continues the claim's test (workers/claims.py); without a store each rerun is a new test, as before the ledger. A
sequence's false pass is any rerun that passes, its false fail any rerun that fails: both must stay at most delta.
The engine runs every gate (``certsel gate``'s procedure, R-Eval, in-process), ``PER_JOB`` candidates per job, each
on a table of its own items.
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

PER_JOB = 50


def boundary_tables(path, rng, claim: str, n_items: int, r: float = 0.95, alpha: float = 0.1) -> None:
    """PER_JOB candidates of ``n_items`` i.i.d. items each, their claim exactly at the boundary in distribution."""
    rows: dict = {"candidate": [], "item": []}
    for k in range(PER_JOB):
        rows["candidate"] += [f"c{k}"] * n_items
        rows["item"] += list(range(n_items))
        if claim == "recovery":  # s_ref ~ Bernoulli(0.7); s = s_ref except on 10% of items, redrawn: E[s] = r E[s_ref]
            ref = (rng.random(n_items) < 0.7).astype(float)
            q = (r * 0.7 - 0.9 * 0.7) / 0.1
            s = np.where(rng.random(n_items) < 0.1, (rng.random(n_items) < q).astype(float), ref)
            rows.setdefault("score", []).extend(s.tolist())
            rows.setdefault("reference", []).extend(ref.tolist())
        else:  # a 0/1 loss with mean alpha
            rows.setdefault("loss", []).extend((rng.random(n_items) < alpha).astype(float).tolist())
    pq.write_table(pa.table(rows), path)


def job_for(claim: str, path, delta: float) -> dict:
    if claim == "recovery":
        return {"data": {"path": str(path), "score": "score", "reference": "reference"}, "recovery": 0.95,
                "policy": {"kind": "r-eval"}, "delta": delta}
    return {"data": {"path": str(path), "human": "loss"}, "alpha": 0.1, "policy": {"kind": "r-eval"}, "delta": delta}


def run_sequences(claim: str, sequences: int, reruns: int, step: int, delta: float, ledger: bool, seed: int = 0):
    """Outcomes (sequences, reruns) and human labels bought (sequences, reruns) of every rerun of every sequence."""
    from certsel.gates import gate_config
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.results.outcomes import Outcome

    rng = np.random.default_rng(seed)
    outcomes, bought = [], []
    runtime = LocalRuntime()
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(-(-sequences // PER_JOB)):
            path = pathlib.Path(tmp) / f"{claim}-{j}.parquet"
            boundary_tables(path, rng, claim, reruns * step)
            store = pathlib.Path(tmp) / f"labels-{j}.db"
            out_j, bought_j = [], []
            for k in range(1, reruns + 1):
                cfg = gate_config({**job_for(claim, path, delta), "seed": 1000 * j + k, "budget": {"n": k * step}},
                                  labels=store)
                if not ledger:  # before the ledger: every rerun a new test
                    cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": None})})
                res = run_job(cfg, load_job_data(cfg), runtime, collect_labels=False)
                cert = set(res.certified)
                out_j.append([str(Outcome.of(x.status, x.name in cert)) for x in res.records])
                bought_j.append([x.n_human - x.reused for x in res.records])
            outcomes.append(np.array(out_j).T)
            bought.append(np.array(bought_j).T)
    return np.concatenate(outcomes)[:sequences], np.concatenate(bought)[:sequences]


def clopper_pearson(x: int, n: int, level: float = 0.99) -> tuple[float, float]:
    from scipy.stats import beta

    a = (1 - level) / 2
    return (beta.ppf(a, x, n - x + 1) if x else 0.0, beta.ppf(1 - a, x + 1, n - x) if x < n else 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=1000, help="gated candidates per claim, each rerun --reruns times")
    ap.add_argument("--reruns", type=int, default=10)
    ap.add_argument("--step", type=int, default=100, help="the k-th rerun's budget is k * step human labels")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    ok = True
    with results_section("reruns", "Reruns of a gate at the boundary: one claim, one test", write=args.docs):
        print(f"{args.sequences:,} gated candidates per claim, each at the boundary in distribution (recovery exactly "
              f"0.95 of the reference; a risk gate's loss exactly alpha = 0.1), each gated {args.reruns} times in one "
              f"label store: the k-th rerun with seed k and budget {args.step} k human labels, as a person or CI "
              f"retrying an undecided gate would. R-Eval, delta {args.delta:g}, the engine in-process "
              f"(`python benchmarks/reruns.py`). A sequence passes if any of its reruns passes, fails if any fails; "
              f"at the boundary both are wrong, so each must happen at most delta of the time. Intervals: 99% "
              f"Clopper-Pearson.\n")
        print("| claim | reruns | any pass | 99% interval | any fail | 99% interval | pass by the 1st / 3rd rerun |")
        print("|---|---|---:|---:|---:|---:|---:|")
        bought_rows = []
        for claim in ("recovery", "risk"):
            for ledger in (True, False):
                o, b = run_sequences(claim, args.sequences, args.reruns, args.step, args.delta, ledger)
                n = o.shape[0]
                passes = int(np.sum((o == "pass").any(axis=1)))
                fails = int(np.sum((o == "fail").any(axis=1)))
                early = [float(np.mean((o[:, :k] == "pass").any(axis=1))) for k in (1, 3)]
                lp, hp = clopper_pearson(passes, n)
                lf, hf = clopper_pearson(fails, n)
                how = "continued (ledger)" if ledger else "each a new test (no ledger)"
                print(f"| {claim} | {how} | {passes / n:.3f} | [{lp:.3f}, {hp:.3f}] | {fails / n:.3f} | "
                      f"[{lf:.3f}, {hf:.3f}] | {early[0]:.3f} / {early[1]:.3f} |")
                if ledger:
                    ok &= passes / n <= args.delta and fails / n <= args.delta
                    bought_rows.append((claim, b))
        print(f"\nHuman labels bought by each rerun with the ledger (mean over the sequences; a rerun buys only "
              f"what its larger budget adds to its claim's test, and nothing once the claim is decided):\n")
        print("| claim | " + " | ".join(f"rerun {k}" for k in range(1, args.reruns + 1)) + " |")
        print("|---|" + "---:|" * args.reruns)
        for claim, b in bought_rows:
            print(f"| {claim} | " + " | ".join(f"{v:.0f}" for v in b.mean(axis=0)) + " |")
        print(f"\nWith the ledger, any pass and any fail at most delta = {args.delta:g} for both claims: {ok} "
              f"({(time.perf_counter() - t0) / 60:.1f} min).")


if __name__ == "__main__":
    main()
