"""The budget stop (scheduling.budget_stop, policies/budget_stop.py) on the bundled replay examples.

Each example runs as a real job (the engine's rounds, its procedure, futility and pilot as the example sets them, in
this process) once per seed without the stop and once with it at each level. The same seed draws the same items, so the
run without the stop is the counterfactual of the run with it: a candidate it certified that the run with the stop did
not is one the stop cost (the stop never certifies, so every certificate's error is unchanged). Reported per example
and level: mean human labels, how often the certified set and the selection are the same, and the share of
(seed, candidate) pairs certified without the stop but not with it, against the level.

    python benchmarks/budget_stop.py [--seeds 20] [--levels 0.1 0.2] [--docs]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

from certsel.config import load_config  # noqa: E402
from certsel.orchestrator.engine.driver import LocalRuntime, run_job  # noqa: E402
from certsel.orchestrator.inputs.sources import load_job_data  # noqa: E402

EXAMPLES = ["quantization.yaml", "quantization_recovery.yaml", "prompts.yaml", "gate_recovery.yaml",
            "gate_regression.yaml"]


def run(example: str, seed: int, level: float | None):
    sets = [f"seed={seed}"] + ([] if level is None else [f"scheduling.budget_stop={level}"])
    cfg = load_config(ROOT / "examples" / example, sets)
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(1))
    return res.spent["human"], frozenset(res.certified), res.selected, len(res.records)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--levels", type=float, nargs="+", default=[0.1, 0.2])
    ap.add_argument("--examples", nargs="+", default=EXAMPLES)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.time()
    with results_section("budget-stop", "Budget stop: candidates the rest of their budget cannot certify",
                         write=args.docs):
        print(f"Each bundled replay example over {args.seeds} seeds, as a real job without and with "
              "scheduling.budget_stop at each level; the same seed draws the same items, so the run without the stop "
              "is the counterfactual. 'lost': (seed, candidate) pairs certified without the stop and not with it, "
              "per candidate, against the level that bounds it.\n")
        print("| example | budget_stop | human labels (mean) | against off | same certified set | same selection | "
              "lost / candidates | lost / certified |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for ex in args.examples:
            off = [run(ex, s, None) for s in range(args.seeds)]
            base = np.mean([o[0] for o in off])
            print(f"| {ex} | off | {base:.1f} | 1.00x | | | | |", flush=True)
            for level in args.levels:
                on = [run(ex, s, level) for s in range(args.seeds)]
                lost = sum(len(a[1] - b[1]) for a, b in zip(off, on, strict=True))
                certified = sum(len(a[1]) for a in off)
                cands = sum(a[3] for a in off)
                labels = np.mean([o[0] for o in on])
                same_set = np.mean([a[1] == b[1] for a, b in zip(off, on, strict=True)])
                same_sel = np.mean([a[2] == b[2] for a, b in zip(off, on, strict=True)])
                print(f"| {ex} | {level:g} | {labels:.1f} | {labels / base:.2f}x | {same_set:.2f} | {same_sel:.2f} | "
                      f"{lost / cands:.4f} | {lost / max(certified, 1):.4f} |", flush=True)
        print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
