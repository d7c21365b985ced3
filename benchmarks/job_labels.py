"""Whole-job human labels: does the judge pay at the level of a job?

Runs the quantization example (``examples/quantization.yaml``: 48 MX configurations, FST in
decreasing bitwidth, alpha = delta = 0.1, n = 300, r = 3, rounds of at most 25 sized by each
candidate's predicted need (``scheduling.rounds: predicted``, the default), look-ahead 1) through
the driver in-process for ``--seeds`` seeds, with R-Eval, R-AutoEval+ with the paper's
observation and R-AutoEval+ with the split one (the default), for the best and the MX4 ("bad")
judge, and prints per policy and judge the mean human labels of a job, its ratio to R-Eval's
on the same seeds, and how often the selection equals R-Eval's. ``--set KEY=VALUE`` overrides
any job key for every run (e.g. ``scheduling.rounds=fixed`` for rounds of 25).

    python benchmarks/job_labels.py [--seeds 10] [--set scheduling.rounds=fixed]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from certsel.config import load_config
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.engine.runtime import LocalRuntime
from certsel.workers.replay import DATA_DIR

EXAMPLE = DATA_DIR.parent / "quantization.yaml"
POLICIES = {"R-Eval": ["policy.kind=r-eval"],
            "R-AutoEval+ (paper)": ["policy.kind=r-autoeval+", "policy.observation=paper"],
            "R-AutoEval+ (split, default)": ["policy.kind=r-autoeval+", "policy.observation=split"]}
JUDGES = {"best": "loss_judge_best", "bad (MX4)": "loss_judge_bad"}


def job(overrides: list[str]):
    cfg = load_config(EXAMPLE, overrides)
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(1))
    return res.spent["human"], res.selected, res.rounds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"quantization example, {args.seeds} seeds, overrides {args.overrides or 'none'}: mean human labels per "
          "job, ratio to R-Eval on the same seeds, selections equal to R-Eval's, mean driver rounds\n")
    print("| judge | policy | human labels per job | ratio to R-Eval | same selection as R-Eval | rounds |")
    print("|---|---|---|---|---|---|")
    for judge, column in JUDGES.items():
        runs = {name: [job([*sets, f"data.judge={column}", f"seed={s}", *args.overrides]) for s in range(args.seeds)]
                for name, sets in POLICIES.items()}
        base = np.array([h for h, _, _ in runs["R-Eval"]], dtype=float)
        for name, got in runs.items():
            labels = np.array([h for h, _, _ in got], dtype=float)
            same = sum(sel == ref for (_, sel, _), (_, ref, _) in zip(got, runs["R-Eval"], strict=True))
            rounds = np.mean([n for _, _, n in got])
            print(f"| {judge} | {name} | {labels.mean():.0f} | {labels.sum() / base.sum():.3f} | "
                  f"{same}/{args.seeds} | {rounds:.1f} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
