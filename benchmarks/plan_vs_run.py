"""`certsel plan`'s forecasts against real runs: for each bundled replay example, the human labels the plan forecasts
for the job as configured (its engine run on tables drawn from a pilot of 1,000 items per candidate,
orchestrator/engine/forecast.py) against the labels the job then used: at its own seed, and on average over
``--seeds`` seeds (what a forecast of an expectation is measured against). The forecast is the plan's row for the job
as configured (every row of the plan is such a forecast, for its policy, on the same drawn tables).

    python benchmarks/plan_vs_run.py [--pilot 1000] [--sims 16] [--seeds 20] [--pilot-seeds 3] [--docs]

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

from certsel.cli.parser import PLAN_PILOT, PLAN_SIMS  # noqa: E402

EXAMPLES = ["quantization.yaml", "quantization_recovery.yaml", "prompts.yaml", "prompts_aggregate.yaml",
            "gate_recovery.yaml", "gate_regression.yaml"]
LOW, HIGH = 0.8, 1.25


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilot", type=int, default=PLAN_PILOT, help="pilot items per candidate (default: the CLI's)")
    ap.add_argument("--sims", type=int, default=PLAN_SIMS, help="simulated runs per forecast (default: the CLI's)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--pilot-seeds", type=int, default=3, help="pilot draws in the table of the pilot's noise")
    ap.add_argument("--compare", type=int, nargs="*", default=[200], help="other pilot sizes in that table")
    ap.add_argument("--examples", nargs="+", default=EXAMPLES)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    with results_section("plan", "certsel plan against the jobs it plans", write=args.docs):
        table(args)


def _forecast(cfg, data, m: int, pilot_seed: int, sims: int):
    """The plan's forecast from a pilot of ``m`` items (all of a smaller table, as the CLI takes it) drawn at
    ``pilot_seed``."""
    m = min(m, data.table.human.shape[1])
    return forecast(cfg, data, planning.pilot(data.table, m, pilot_seed), sims=sims, seed=pilot_seed)


def table(args) -> None:
    t0 = time.time()
    print(f"For each bundled replay example: the human labels `certsel plan` forecasts for the job as configured (its "
          f"engine run {args.sims} times on tables drawn from a pilot of {args.pilot:,} items per candidate, or all "
          f"of a smaller table, the plan's own seed 0, so every stop, the pilot start and the procedure's end apply), "
          f"against the labels the job used at its own seed and on average over {args.seeds} seeds (a forecast is of "
          "the expectation; the mean's standard error beside it). The forecast is the plan's row for the job as "
          "configured; its other rows are the same forecast for the other policies, on the same drawn tables.\n")
    print("| example | forecast (range over runs) | used, job's seed | used, mean of seeds | "
          "used / forecast (seed) | used / forecast (mean) |")
    print("|---|---:|---:|---:|---:|---:|")
    inside, means, jobs = [], {}, {}
    for name in args.examples:
        cfg = load_config(ROOT / "examples" / name)
        data = load_job_data(cfg)
        f = _forecast(cfg, data, args.pilot, 0, args.sims)
        used = [run_job(load_config(ROOT / "examples" / name, [f"seed={s}"]), data, LocalRuntime()).spent["human"]
                for s in [cfg.seed, *(s for s in range(args.seeds + 1) if s != cfg.seed)][:args.seeds]]
        mean = float(np.mean(used))
        means[name], jobs[name] = mean, (cfg, data)
        inside.append(LOW <= mean / f.human <= HIGH)
        print(f"| {name} | {f.human:,.0f} ({f.human_low:,} to "
              f"{f.human_high:,}) | {used[0]:,} | {mean:,.0f} ± {np.std(used, ddof=1) / np.sqrt(len(used)):,.0f} | "
              f"{used[0] / f.human:.2f} | {mean / f.human:.2f} |", flush=True)
    print(f"\nThe mean within {LOW}-{HIGH} of the forecast on {sum(inside)} of {len(inside)} examples.")
    sizes = [args.pilot, *args.compare]
    print(f"\nThe pilot's noise: used (mean of seeds) / forecast for pilot draws 0 to {args.pilot_seeds - 1} (the "
          "plan's --seed) at each pilot size. A job's labels go mostly to the candidates near their threshold, and a "
          "small pilot cannot place those: the forecast then follows where its draw happened to put them.\n")
    print("| example | " + " | ".join(f"pilot {m:,}" for m in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name in args.examples:
        cfg, data = jobs[name]
        cells = [", ".join(f"{means[name] / _forecast(cfg, data, m, p, args.sims).human:.2f}"
                           for p in range(args.pilot_seeds)) for m in sizes]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
