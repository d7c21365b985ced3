"""`certsel plan`'s predictions against real runs: for each bundled replay example, the human
labels the plan predicts for the job's own policy (and for R-Eval) against the labels the job
then used, run in one process (`run_job` on a `LocalRuntime`, the job's seed).

    python benchmarks/plan_vs_run.py [--pilot 50] [--docs]

The plan's pilot is drawn apart from the job's order (its own seed), so a prediction is an
honest forecast, not a replay. Prints a Markdown table; with ``--docs`` it becomes the section
"plan" of docs/results.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from certsel.config import load_config
from certsel.orchestrator.inputs import planning
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.engine.runtime import LocalRuntime

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402
EXAMPLES = ["quantization.yaml", "prompts.yaml", "quantization_recovery.yaml"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilot", type=int, default=50)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    with results_section("plan", "certsel plan against the jobs it plans", write=args.docs):
        table(args.pilot)


def table(pilot: int) -> None:
    print(f"For each bundled replay example, the human labels `certsel plan` predicts (a pilot of {pilot} items per "
          "candidate, its own seed; each policy kind's measured efficiency times its limit) against the labels the "
          "job then used (the job's seed, in one process). The plan charges each candidate its expected labels "
          "alone; jobs stop, prune and skip candidates as their procedures allow.\n")
    print("| example | policy | predicted human labels | used | used / predicted |")
    print("|---|---|---|---|---|")
    for name in EXAMPLES:
        for kind in ("own", "r-eval"):
            over = [] if kind == "own" else ["policy.kind=r-eval"]
            cfg = load_config(ROOT / "examples" / name, over)
            if kind == "r-eval" and load_config(ROOT / "examples" / name).policy.kind == "r-eval":
                continue  # the job's own policy is R-Eval: its row is above
            data = load_job_data(cfg)
            pcfg = data.policy_config(cfg)
            planning.JUDGE_RATIOS = (cfg.budget.r,)  # the job's own ratio among the planned ones
            rows = planning.plan(pcfg, data, m=pilot, seed=0)
            want = "r-eval" if pcfg.policy.kind == "r-eval" else pcfg.policy.kind
            row = next((r for r in rows if r.policy == want), None)
            if row is None:
                continue
            used = run_job(cfg, data, LocalRuntime()).spent["human"]
            label = want + ("" if row.r is None else f" (r = {row.r})")
            print(f"| {name} | {label} | {row.human:,.0f} | {used:,} | {used / row.human:.2f} |", flush=True)


if __name__ == "__main__":
    main()
