"""`certsel plan`'s forecasts against real runs: for each bundled replay example, the human labels the plan forecasts
for the job as configured (its engine run on tables drawn from a pilot of 200 items per candidate,
orchestrator/engine/forecast.py) against the labels the job then used: at its own seed, and on average over
``--seeds`` seeds (what a forecast of an expectation is measured against). The plan's per-policy row for the job's
policy (each candidate's expected labels alone, no stops, orchestrator/inputs/planning.py) is shown beside it.

    python benchmarks/plan_vs_run.py [--pilot 200] [--sims 8] [--seeds 10] [--docs]

The plan's pilot is drawn apart from the job's order (its own seed), so a forecast is an honest one, not a replay.
Prints a Markdown table; with ``--docs`` it becomes the section "plan" of docs/results.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

from certsel.config import load_config
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.engine.forecast import forecast
from certsel.orchestrator.engine.runtime import LocalRuntime
from certsel.orchestrator.inputs import planning
from certsel.orchestrator.inputs.sources import load_job_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

EXAMPLES = ["quantization.yaml", "quantization_recovery.yaml", "prompts.yaml", "prompts_aggregate.yaml",
            "gate_recovery.yaml", "gate_regression.yaml"]
LOW, HIGH = 0.8, 1.25


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilot", type=int, default=200)
    ap.add_argument("--sims", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--examples", nargs="+", default=EXAMPLES)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    with results_section("plan", "certsel plan against the jobs it plans", write=args.docs):
        table(args)


def table(args) -> None:
    t0 = time.time()
    print(f"For each bundled replay example: the human labels `certsel plan` forecasts for the job as configured (its "
          f"engine run {args.sims} times on tables drawn from a pilot of {args.pilot} items per candidate, the "
          f"plan's own seed 0, so every stop, the pilot start and the procedure's end apply), against the labels the "
          f"job used at its own seed and on average over {args.seeds} seeds (a forecast is of the expectation). "
          "'per policy row': the plan's table row for the job's policy, each candidate's expected labels alone "
          "(no stops), which ranks policies but is no forecast of a job.\n")
    print("| example | per policy row | forecast (range over runs) | used, job's seed | used, mean of seeds | "
          "used / forecast (seed) | used / forecast (mean) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    inside = []
    for name in args.examples:
        cfg = load_config(ROOT / "examples" / name)
        data = load_job_data(cfg)
        units = data.policy_config(cfg)
        planning.JUDGE_RATIOS = (cfg.budget.r,)  # the job's own ratio among the planned ones
        rows = planning.plan(units, data, m=args.pilot, seed=0)
        row = next((r for r in rows if r.policy == units.policy.kind and (r.r is None or r.r == cfg.budget.r)), None)
        f = forecast(cfg, data, planning.pilot(data.table, args.pilot, 0), sims=args.sims, seed=0)
        used = [run_job(load_config(ROOT / "examples" / name, [f"seed={s}"]), data, LocalRuntime()).spent["human"]
                for s in [cfg.seed, *(s for s in range(args.seeds + 1) if s != cfg.seed)][:args.seeds]]
        mean = float(np.mean(used))
        inside.append(LOW <= mean / f.human <= HIGH)
        print(f"| {name} | {'-' if row is None else f'{row.human:,.0f}'} | {f.human:,.0f} ({f.human_low:,} to "
              f"{f.human_high:,}) | {used[0]:,} | {mean:,.0f} | {used[0] / f.human:.2f} | {mean / f.human:.2f} |",
              flush=True)
    print(f"\nThe mean within {LOW}-{HIGH} of the forecast on {sum(inside)} of {len(inside)} examples "
          f"({time.time() - t0:.0f} s).")


if __name__ == "__main__":
    main()
