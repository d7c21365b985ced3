"""Reruns of inspect-ai's CertifiedStopping next to the boundary: some rerun's false certificate, with the ledger
(each rerun continues its claim's test), killed evals in between, and without it (``store=None``: each rerun a new
test).

Each sequence is one task of 100 samples rerun ``--reruns`` times, the k-th with its own shuffle and a budget of
``--step`` k samples (the claim's total, with the ledger). Two claims, each false: "mean score >= 0.7" on a task whose
mean is 0.69 (69 of 100 right; futility off; a pass is wrong), and on a task whose mean is 0.71 with the futility
test at 0.1 (a fail, "mean <= 0.7 certified", is wrong). **Killed**: every rerun but the last is abandoned half-way
through its budget, without ``complete_task``, and its event loop closed, as ``kill -9`` leaves it; the next rerun
continues from what it wrote ahead. A sequence errs if any finished run of it states the false claim.

The managers are driven through inspect's protocol without its runner (``tests/helpers/inspect_protocol.py``: a real
``EvalSpec`` and inspect's own ``Sample``/``SampleScore``, ten samples in flight finishing out of order, wrong answers
slower), thousands of evals in minutes; ``tests/test_inspect_claims.py`` checks that a driven eval states what a real
``eval()`` states, and runs the rerun and kill cases through real evals.

    python benchmarks/inspect_reruns.py [--sequences 1000] [--reruns 5] [--docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from reruns import clopper_pearson  # noqa: E402
from results_doc import results_section  # noqa: E402

N, T = 100, 0.7
CLAIMS = {"pass": (69, None), "fail": (71, 0.1)}  # the wrong outcome: (right answers of N, futility level)
DOORS = {"ledger": "reruns continue the claim's test", "killed": "reruns continue; all but the last killed half-way",
         "none": "each rerun a new test (store=None)"}


def a_spec():
    """A real eval's spec (inspect's own EvalSpec of one small real eval), for the driven evals."""
    from certsel.inspect import CertifiedStopping
    from helpers.inspect_tasks import run, task

    with tempfile.TemporaryDirectory() as tmp:
        [log] = run(task(np.ones(5), CertifiedStopping(at_least=0.5, store=None, keep=False), shuffle=0), tmp)
    return log.eval


def sequences(claim: str, door: str, n_seq: int, reruns: int, step: int, delta: float, spec, rng) -> tuple:
    """(errs: one bool per sequence, samples run per sequence)."""
    from certsel.inspect import CertifiedStopping
    from helpers.inspect_protocol import drive, shuffled_samples, spec_like

    right, futility = CLAIMS[claim]
    store = None if door == "none" else "home"
    errs = np.zeros(n_seq, dtype=bool)
    cost = np.zeros(n_seq)
    values = [np.zeros(N) for _ in range(n_seq)]
    for v in values:
        v[rng.permutation(N)[:right]] = 1.0
    for k in range(1, reruns + 1):
        budget = min(step * k, N)
        kill = door == "killed" and k < reruns
        managers = [CertifiedStopping(at_least=T, delta=delta, futility=futility, budget=budget, keep=False,
                                      store=store) for _ in range(n_seq)]

        async def round_():
            for s, m in enumerate(managers):
                await drive(m, spec_like(spec, f"{claim}-{door}-{s}"), shuffled_samples(N, 1000 * s + k), values[s],
                            rng=rng, kill_after=budget // 2 if kill else None)

        asyncio.run(round_())  # one event loop per round, closed after it: a killed eval's hold is gone with it
        for s, m in enumerate(managers):
            cost[s] += m.run.ledger.scheduled
            if kill or m.certificate is None:
                continue
            wrong = m.certificate.certified if claim == "pass" else m.certificate.status == "futile"
            errs[s] |= wrong
    return errs, cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=1000)
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--step", type=int, default=20, help="the k-th rerun's budget is k * step samples")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    # a ledger of its own, in memory where the machine has a RAM disk: every score is written ahead, and the rates
    # measured do not depend on how fast a disk syncs
    shm = pathlib.Path("/dev/shm")
    os.environ["CERTSEL_HOME"] = tempfile.mkdtemp(prefix="certsel-inspect-reruns-",
                                                  dir=shm if shm.is_dir() else None)
    t0 = time.perf_counter()
    spec = a_spec()
    rng = np.random.default_rng(0)
    ok = True
    with results_section("inspect-reruns", "Reruns through inspect", write=args.docs):
        print(f"{args.sequences:,} sequences per claim and door: one task of {N} samples, rerun {args.reruns} times "
              f"through `CertifiedStopping` (at_least {T}, delta {args.delta:g}), the k-th rerun with its own shuffle "
              f"and a budget of {args.step} k samples. *Pass*: the task's mean is 0.69, futility off, so any pass is "
              f"false; *fail*: its mean is 0.71 with the futility test at 0.1, so any fail is false. *Killed*: every "
              f"rerun but the last is abandoned half-way through its budget without `complete_task`, its event loop "
              f"closed (what `kill -9` leaves). The managers are driven through inspect's protocol without its runner "
              f"(`tests/helpers/inspect_protocol.py`; `python benchmarks/inspect_reruns.py`). Intervals: 99% "
              f"Clopper-Pearson.\n")
        print("| wrong outcome | door | some rerun wrong | 99% interval | samples run per sequence (mean) |")
        print("|---|---|---:|---:|---:|")
        for claim in CLAIMS:
            for door, words in DOORS.items():
                errs, cost = sequences(claim, door, args.sequences, args.reruns, args.step, args.delta, spec, rng)
                x, n = int(errs.sum()), errs.size
                lo, hi = clopper_pearson(x, n)
                print(f"| {claim} | {words} | {x / n:.3f} | [{lo:.3f}, {hi:.3f}] | {cost.mean():.1f} |")
                if door != "none":
                    ok &= x / n <= args.delta
        print(f"\nWith the ledger, some rerun's wrong outcome at most delta = {args.delta:g}, killed evals included: "
              f"{ok} ({(time.perf_counter() - t0) / 60:.1f} min).")


if __name__ == "__main__":
    main()
