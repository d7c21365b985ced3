"""The budget stop's claim per candidate: of the seeds whose full budget certifies a candidate, how many the stop ends.

benchmarks/budget_stop.py pools its 'lost / certified' over every candidate of a job, where the easy ones dilute it.
The rule's statement is per candidate: one that the full budget would certify is stopped with probability at most
gamma (policies/budget_stop.py). Here each bundled replay example runs per seed without the stop and with it at the
default level (the same seed draws the same items, so the run without the stop is the counterfactual), and each
candidate certified without it in some seed gets its own rate: the seeds the stop cost it over the seeds it was
certified, with a one-sided 95% Clopper-Pearson upper bound. Printed: the worst candidate of each example, among those
certified in at least ``--min-certified`` seeds (fewer say little), and how many exceed the level.

    python benchmarks/budget_stop_candidates.py [--seeds 20] [--docs]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import pathlib
import sys
import time

from scipy.stats import beta

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from budget_stop import EXAMPLES, run  # noqa: E402
from results_doc import results_section  # noqa: E402

from certsel.policies.budget_stop import DEFAULT_LEVEL  # noqa: E402


def upper(lost: int, n: int, conf: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate of ``lost`` in ``n``."""
    return 1.0 if lost >= n else float(beta.ppf(conf, lost + 1, n - lost))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    ap.add_argument("--min-certified", type=int, default=5)
    ap.add_argument("--examples", nargs="*", default=EXAMPLES)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.time()
    with results_section("budget-stop-candidates", "Budget stop: each candidate's rate against the level",
                         write=args.docs), mp.get_context("spawn").Pool(args.workers) as pool:
        print(f"Each bundled replay example over {args.seeds} seeds without scheduling.budget_stop and with it at "
              f"{args.level:g}, as real jobs; the same seed draws the same items. Per candidate: the seeds whose run "
              "without the stop certified it (n), and those of them the stop cost (lost). The rule bounds lost / n "
              f"by the level under its model; 'worst': the candidate with the largest lost / n among those with n >= "
              f"{args.min_certified}, with its one-sided 95% Clopper-Pearson upper bound.\n")
        print("| example | candidates certified in some seed | with n >= "
              f"{args.min_certified} | worst: candidate | lost / n | 95% upper bound | candidates with lost / n > "
              f"{args.level:g} (n >= {args.min_certified}) | pooled lost / certified |")
        print("|---|---:|---:|---|---:|---:|---:|---:|")
        for ex in args.examples:
            path = ROOT / "examples" / ex
            off = pool.map(run, [(path, s, None) for s in range(args.seeds)])
            on = pool.map(run, [(path, s, args.level) for s in range(args.seeds)])
            names = sorted(set().union(*(o[1] for o in off)))
            n = {c: sum(c in o[1] for o in off) for c in names}
            lost = {c: sum(c in a[1] and c not in b[1] for a, b in zip(off, on, strict=True)) for c in names}
            judged = [c for c in names if n[c] >= args.min_certified]
            pooled = f"{sum(lost.values())} / {sum(n.values())}"
            if not judged:
                print(f"| {ex} | {len(names)} | 0 | | | | | {pooled} |", flush=True)
                continue
            worst = max(judged, key=lambda c: (lost[c] / n[c], n[c]))
            above = sum(lost[c] / n[c] > args.level for c in judged)
            print(f"| {ex} | {len(names)} | {len(judged)} | {worst} | {lost[worst]} / {n[worst]} | "
                  f"{upper(lost[worst], n[worst]):.2f} | {above} | {pooled} |", flush=True)
        print(f"\n({time.time() - t0:.0f} s on {args.workers} processes)")


if __name__ == "__main__":
    main()
