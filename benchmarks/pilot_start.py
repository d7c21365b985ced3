"""Whole-job human labels of a fixed sequence that starts from a judge-only pilot
(``scheduling.start: pilot``) against the same job run from the top, on the quantization
example (48 MX configs, TriviaQA) and each of its judges, over several seeds.

Per judge and seed: R-Eval from the top (no judge: the baseline the issue names), R-AutoEval+
from the top, and R-AutoEval+ from the pilot's start; the selection and its true risk on the
whole table (<= alpha in every run, else the run is flagged), human labels, judge labels (the
pilot's included). Prints one table row per judge and policy, with the ratio of human labels
to R-Eval's from the top, measured in this run.

``--fwer REPS``: the family-wise error of the pilot-started sequence at its least favourable
case (tests/helpers/boundary.py: configs well within alpha, then the first null at alpha +
1/items, where the pilot's start lands; no margin), by ``certsel audit``, which replays the
pilot's own draws and the job's in every repetition: the share of repetitions that certified a
null, with its 99% Clopper-Pearson interval, against delta.

    python benchmarks/pilot_start.py --seeds 10
    python benchmarks/pilot_start.py --fwer 1000
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

from certsel.config import load_config
from certsel.orchestrator.engine.driver import LocalRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quantization.yaml"
sys.path.insert(0, str(ROOT / "tests"))  # the boundary table shared with tests/test_pilot_start.py
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

from certsel.config.sections import DEFAULT_BUDGET_STOP as STOP, DEFAULT_FUTILITY as FUT  # noqa: E402

# the old defaults (no futility stop, no budget stop, from the top), the pilot alone, each stop on it, and the defaults
# (the pilot's start, futility and the budget stop at their default levels): each row names every setting it compares
OLD = ["scheduling.futility=null", "scheduling.budget_stop=null", "scheduling.start=top"]
RUNS = {"r-eval, from the top": ["policy.kind=r-eval", *OLD],
        "r-autoeval+, from the top (old defaults)": OLD,
        "r-autoeval+, pilot start": ["scheduling.futility=null", "scheduling.budget_stop=null", "scheduling.start=pilot"],
        f"r-autoeval+, pilot start + futility {FUT:g}": ["scheduling.budget_stop=null", "scheduling.start=pilot"],
        f"r-autoeval+, pilot start + budget stop {STOP:g}": ["scheduling.futility=null", "scheduling.start=pilot"],
        f"r-autoeval+, pilot start + futility {FUT:g} + budget stop {STOP:g} (defaults)": []}


def one(judge: str, sets: list[str], seed: int) -> dict:
    cfg = load_config(EXAMPLE, [f"data.judge={judge}", f"seed={seed}", *sets])
    data = load_job_data(cfg)
    res = run_job(cfg, data, LocalRuntime(1), collect_labels=False)
    truth = dict(zip(res.data.names, res.data.true_risk, strict=True))
    return {"selected": res.selected, "true": None if res.selected is None else float(truth[res.selected]),
            "objective": None if res.selected is None else float(res.data.objective[res.data.names.index(res.selected)]),
            "human": res.spent["human"], "judge": res.spent["judge"], "alpha": cfg.alpha,
            "start": None if res.data.pilot is None else res.data.pilot.start}


def familywise(reps: int, docs: bool = False) -> None:
    from certsel.config import parse_config
    from certsel.orchestrator.audit.base import clopper_pearson
    from certsel.orchestrator.audit.job_audit import audit
    from helpers.boundary import boundary_job, boundary_table

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "boundary.parquet"
        boundary_table(path)
        cfg = parse_config(boundary_job(path))
        res = audit(cfg, load_job_data(cfg), reps=reps, seed=2026, workers=1)
    rate = res.overall["familywise_failure"]
    lo, hi = clopper_pearson(round(rate * reps), reps, 0.99)
    with results_section("pilot-start-fwer", "The pilot's start at its least favourable case", write=docs):
        print("The pilot-started fixed sequence (people checking the start, futility at its default) on the table of "
              "`tests/helpers/boundary.py`: configs well within alpha, then the first null at alpha + 1/items, where "
              "the pilot's start lands (margin 0). `certsel audit` replays the pilot's own draws and the job's in "
              "every repetition; a repetition fails when it certifies a null.\n")
        print(f"Family-wise failure {rate:.4f} over {reps} repetitions (one-sided 99% Clopper-Pearson bounds {lo:.4f} "
              f"and {hi:.4f}; delta {cfg.delta}); configs certified per run {res.overall['mean_certified']:.2f}; "
              f"{time.perf_counter() - t0:.0f} s.")
        if hi >= cfg.delta:
            print(f"\n**The upper bound reaches delta ({cfg.delta}): not confirmed at this many repetitions.**")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--judges", nargs="+", default=["loss_judge_best", "loss_judge_med", "loss_judge_bad"])
    ap.add_argument("--fwer", type=int, default=None, metavar="REPS")
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    if args.fwer:
        familywise(args.fwer, args.docs)
        return
    t0 = time.perf_counter()
    with results_section("pilot-start", "A fixed sequence from the pilot's start (quantization example)", write=args.docs):
        print(f"Whole-job labels of `examples/quantization.yaml` (48 MX configs, FST, alpha = delta = 0.1, n = 300, "
              f"r = 3), {args.seeds} seeds per row, with each judge column. The pilot labels "
              "`scheduling.pilot_items` items per config with the judge only; its judge labels are counted. "
              "`selected = old defaults'`: runs whose selection is the one R-AutoEval+ from the top made on the "
              "same seed; `mean objective`: the selected config's average bitwidth over the runs that selected "
              "one (lower is better); `nothing certified`: runs that selected nothing.\n")
        print("| judge | policy | human labels (mean) | x R-Eval from the top | judge labels (mean) | "
              "selected = old defaults' | mean objective | nothing certified | true R of the selection <= alpha |")
        print("|---|---|---|---|---|---|---|---|---|")
        for judge in args.judges:
            got = {name: [one(judge, sets, s) for s in range(args.seeds)] for name, sets in RUNS.items()}
            base = np.mean([g["human"] for g in got["r-eval, from the top"]])
            ref = [g["selected"] for g in got["r-autoeval+, from the top (old defaults)"]]
            for name, runs in got.items():
                human = np.mean([g["human"] for g in runs])
                same = sum(g["selected"] == r for g, r in zip(runs, ref, strict=True))
                valid = sum(g["true"] is None or g["true"] <= g["alpha"] for g in runs)
                objs = [g["objective"] for g in runs if g["objective"] is not None]
                obj = f"{np.mean(objs):.3f}" if objs else "-"
                print(f"| {judge} | {name} | {human:,.0f} | {human / base:.3f} | "
                      f"{np.mean([g['judge'] for g in runs]):,.0f} | {same}/{len(runs)} | {obj} | "
                      f"{len(runs) - len(objs)}/{len(runs)} | {valid}/{len(runs)} |", flush=True)
        print(f"\nWall time of the whole benchmark: {time.perf_counter() - t0:.0f} s.")

if __name__ == "__main__":
    main()
