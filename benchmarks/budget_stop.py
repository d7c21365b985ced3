"""The budget stop (scheduling.budget_stop, policies/budget_stop.py) on the bundled replay examples.

Each example runs as a real job (the engine's rounds, its procedure, futility and pilot as the example sets them, in
this process) once per seed without the stop and once with it at each level. The same seed draws the same items, so the
run without the stop is the counterfactual of the run with it: a candidate it certified that the run with the stop did
not is one the stop cost (the stop never certifies, so every certificate's error is unchanged). Reported per example
and level: mean human labels, how often the certified set and the selection are the same, and the share of
(seed, candidate) pairs certified without the stop but not with it, against the level.

Then the gates (benchmarks/gate_vs_point.py's setting: `certsel gate examples/gate_recovery.yaml`, recovery >= 0.95,
1,000 questions, in random orders), where a stopped candidate is "undecided" early: pass / fail / undecided, wrong
decisions and median labels of the configurations within 5 points of 0.95, without and with the stop. Its rule there
needs both the claim's test and its futility test to be unlikely to reach their levels, as in every gate (a selection
judges the claim's own test alone: engine/decisions.Rules.decides_futility).

The pooled 'lost / certified' is diluted by the easy candidates, while the rule's statement is per candidate: one that
the full budget would certify is stopped with probability at most the level. So each job also gets a row per level with
its candidates' own rates: the seeds the stop cost a candidate over the seeds its full budget certified it, the worst
among those certified in at least ``--min-certified`` seeds, with a one-sided 95% Clopper-Pearson upper bound.

    python benchmarks/budget_stop.py [--seeds 20] [--levels 0.1 0.2] [--gate-orders 100] [--docs]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import pathlib
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

from certsel.config import load_config  # noqa: E402
from certsel.orchestrator.audit.base import clopper_pearson  # noqa: E402
from certsel.orchestrator.engine.driver import LocalRuntime, run_job  # noqa: E402
from certsel.orchestrator.inputs.sources import load_job_data  # noqa: E402

EXAMPLES = ["quantization.yaml", "quantization_recovery.yaml", "prompts.yaml", "prompts_aggregate.yaml",
            "gate_recovery.yaml", "gate_regression.yaml"]
LARGE = "1,000 templates (Holm, alpha 0.3)"  # benchmarks/defaults.py's 1,000-candidate job
# The final intervals decide nothing here (the certified set, the selection and the labels come from the e-values; the
# same on seeds 0 and 1 of every job below) and take nine tenths of the 1,000-template job's time.
NO_INTERVALS = ["tracking.intervals=none"]


def run(task):
    """One job: (its file, seed, level) -> (human labels, certified set, selection, candidates)."""
    path, seed, level = task
    sets = [f"seed={seed}", f"scheduling.budget_stop={'null' if level is None else level}", *NO_INTERVALS]
    cfg = load_config(path, sets)
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(1))
    return res.spent["human"], frozenset(res.certified), res.selected, len(res.records)


def upper(lost: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound of a rate of ``lost`` in ``n``."""
    return clopper_pearson(lost, n, 0.95)[1]


def per_candidate(name: str, level: float, off, on, min_certified: int) -> str:
    """The table row of one job at one level: its candidates' own rates (see the module docstring). Among candidates
    with the same rate the worst is the one whose upper bound is largest (the fewest seeds: the least known)."""
    names = sorted(set().union(*(o[1] for o in off)))
    n = {c: sum(c in o[1] for o in off) for c in names}
    lost = {c: sum(c in a[1] and c not in b[1] for a, b in zip(off, on, strict=True)) for c in names}
    judged = [c for c in names if n[c] >= min_certified]
    pooled = f"{sum(lost.values())} / {sum(n.values())}"
    if not judged:
        return f"| {name} | {level:g} | {len(names)} | 0 | | | | | {pooled} |"
    worst = max(judged, key=lambda c: (lost[c] / n[c], upper(lost[c], n[c])))
    above = sum(lost[c] / n[c] > level for c in judged)
    return (f"| {name} | {level:g} | {len(names)} | {len(judged)} | {worst} | {lost[worst]} / {n[worst]} | "
            f"{upper(lost[worst], n[worst]):.2f} | {above} | {pooled} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--levels", type=float, nargs="+", default=[0.1, 0.2])
    ap.add_argument("--examples", nargs="*", default=EXAMPLES)
    ap.add_argument("--large-levels", type=float, nargs="*", default=[0.2],
                    help="levels for the 1,000-template job (none: leave it out)")
    ap.add_argument("--gate-orders", type=int, default=100, help="random orders of the gate (0: no gate rows)")
    ap.add_argument("--min-certified", type=int, default=5,
                    help="seeds a candidate must be certified in for its own rate to be judged (fewer say little)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp, results_section(
            "budget-stop", "Budget stop: candidates the rest of their budget cannot certify", write=args.docs), \
            mp.get_context("spawn").Pool(args.workers) as pool:
        print(f"Each bundled replay example and the 1,000-template job of benchmarks/defaults.py (Holm, R-AutoEval+, "
              f"2,000 items per template) over {args.seeds} seeds, as a real job without and with "
              "scheduling.budget_stop at each level; the same seed draws the same items, so the run without the stop "
              "is the counterfactual. 'lost': (seed, candidate) pairs certified without the stop and not with it, "
              "per candidate, against the level that bounds it; 'largest share lost': the most of one seed's "
              "certified set the stop cost.\n")
        print("| job | budget_stop | human labels (mean) | against off | same certified set | largest share lost | "
              "same selection | lost / candidates | lost / certified |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        jobs = [(ex, ROOT / "examples" / ex, args.levels) for ex in args.examples]
        if args.large_levels:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from defaults import LARGE_JOB, large_table

            table, job = pathlib.Path(tmp) / "templates_1000.parquet", pathlib.Path(tmp) / "templates_1000.yaml"
            large_table(table)
            job.write_text(LARGE_JOB.format(path=table))
            jobs.append((LARGE, job, args.large_levels))
        rows = []  # each job's per-candidate rows, printed after the main table
        for name, path, levels in jobs:
            off = pool.map(run, [(path, s, None) for s in range(args.seeds)])
            base = np.mean([o[0] for o in off])
            print(f"| {name} | off | {base:,.1f} | 1.00x | | | | | |", flush=True)
            for level in levels:
                on = pool.map(run, [(path, s, level) for s in range(args.seeds)])
                rows.append(per_candidate(name, level, off, on, args.min_certified))
                pairs = list(zip(off, on, strict=True))
                lost = sum(len(a[1] - b[1]) for a, b in pairs)
                certified = sum(len(a[1]) for a in off)
                cands = sum(a[3] for a in off)
                labels = np.mean([o[0] for o in on])
                same_set = np.mean([a[1] == b[1] for a, b in pairs])
                share = max(len(a[1] - b[1]) / max(len(a[1]), 1) for a, b in pairs)
                same_sel = np.mean([a[2] == b[2] for a, b in pairs])
                print(f"| {name} | {level:g} | {labels:,.1f} | {labels / base:.2f}x | {same_set:.2f} | {share:.1%} | "
                      f"{same_sel:.2f} | {lost / cands:.4f} | {lost / max(certified, 1):.4f} |", flush=True)
            if name == "quantization.yaml":
                print(f"| (the quickstart: seed 0) | off / {' / '.join(f'{x:g}' for x in levels)} | "
                      f"{' / '.join(str(run((path, 0, x))[0]) for x in [None, *levels])} | | | | | | |", flush=True)
        print(f"\nEach candidate's own rate: n, the seeds whose run without the stop certified it; lost, those of them "
              f"the stop cost. The rule bounds lost / n by the level under its model; 'worst': the largest lost / n "
              f"among candidates with n >= {args.min_certified} (ties: the largest upper bound), with its one-sided "
              "95% Clopper-Pearson upper bound.\n")
        print(f"| job | budget_stop | candidates certified in some seed | with n >= {args.min_certified} | "
              "worst: candidate | lost / n | 95% upper bound | candidates with lost / n above the level | "
              "pooled lost / certified |")
        print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
        print("\n".join(rows), flush=True)
        if args.gate_orders:
            gates(pool, args.gate_orders, args.levels)
        print(f"\n({time.time() - t0:.0f} s)")


def _gate(task):
    """One gate of every config in one order (no label store: each run is its own test)."""
    from certsel.gates import gate_config
    from certsel.orchestrator.results.outcomes import Outcome

    seed, level = task
    sets = [f"seed={seed}", "budget.n=1000", f"scheduling.budget_stop={'null' if level is None else level}",
            *NO_INTERVALS]
    cfg = gate_config(ROOT / "examples" / "gate_recovery.yaml", sets)
    cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": None})})
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False)
    certified = set(res.certified)
    return ([str(Outcome.of(r.status, r.name in certified)) for r in res.records], [r.n_human for r in res.records],
            [r.name for r in res.records])


def gates(pool, orders: int, levels) -> None:
    from gate_vs_point import BAND, R, _scores

    names, s, ref = _scores()
    truth = dict(zip(names, s.mean(1) / ref.mean(1), strict=True))
    print(f"\nGates: `certsel gate examples/gate_recovery.yaml` (recovery >= {R:g}, R-Eval, delta 0.1, 1,000 questions) "
          f"in {orders} random orders, the configurations within {BAND * 100:.0f} points of {R:g} (true recovery on the "
          "whole table). Wrong: pass below, fail at or above; a stopped gate is undecided.\n")
    print("| budget_stop | pass | fail | undecided | wrong | median labels | median labels of an undecided gate | "
          "decisions lost / decided without the stop | labels of all 48 (mean) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for level in [None, *levels]:
        runs = pool.map(_gate, [(seed, level) for seed in range(orders)])
        order = runs[0][2]
        near = np.array([abs(truth[n] - R) < BAND for n in order])
        up = np.array([truth[n] >= R for n in order])
        o = np.array([r[0] for r in runs])[:, near]
        lab = np.array([r[1] for r in runs])
        base = o if base is None else base
        wrong = np.where(up[near], o == "fail", o == "pass")
        undecided = o == "undecided"
        lost = (base != "undecided") & undecided
        print(f"| {'off' if level is None else f'{level:g}'} | {np.mean(o == 'pass'):.1%} | "
              f"{np.mean(o == 'fail'):.1%} | {undecided.mean():.1%} | {wrong.mean():.2%} ({int(wrong.sum())}) | "
              f"{np.median(lab[:, near]):.0f} | {np.median(lab[:, near][undecided]):.0f} | "
              f"{int(lost.sum())} / {int((base != 'undecided').sum())} | {lab.sum(1).mean():,.0f} |", flush=True)


if __name__ == "__main__":
    main()
