"""What a command costs beyond its statistics, as a ratio to the floor: a Python that imports numpy and pyarrow and reads
the bundled TriviaQA table.

Each command runs as a user starts it (a fresh process, a fresh certsel home, so nothing is answered by a finished job
and every store is created anew), best of ``--repeat``, the commands interleaved so that the machine's load falls on
all of them alike; the load average is printed with the figures. Then the crossover where Ray starts to pay for a
recorded table: jobs of K candidates, each in-process and on Ray (``--runtime``).

    python benchmarks/overhead.py [--repeat 3] [--docs]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
TABLE = ROOT / "examples" / "data" / "triviaqa_llama31_8b_mx.parquet"
GATE = ROOT / "examples" / "gate_recovery.yaml"
FLOOR = [sys.executable, "-c", f"import numpy, pyarrow.parquet as pq; pq.read_table({str(TABLE)!r})"]


def _timed(argv: list[str], home: pathlib.Path, codes=(0,)) -> float:
    env = {**os.environ, "CERTSEL_HOME": str(home)}
    env.pop("RAY_ADDRESS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # modules read from their cached bytecode, as an installed package's are
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    took = time.perf_counter() - t0
    if out.returncode not in codes:
        raise SystemExit(f"{' '.join(map(str, argv))}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return took


def commands(tmp: pathlib.Path) -> dict[str, tuple[list[str], tuple]]:
    typo = tmp / "typo.yaml"
    typo.write_text(f"data: {{path: {TABLE}, human: loss_human}}\nalpah: 0.1\n")
    one = [CERTSEL, "gate", str(GATE), "--only", "mx_m7_r4_k16"]
    return {
        "floor: Python reads the table": (FLOOR, (0,)),
        "a typo in the job file (`alpah: 0.1`)": ([CERTSEL, "run", str(typo)], (2,)),
        "one-candidate recovery gate, no tracking": ([*one, "--no-tracking"], (0, 1, 3)),
        "one-candidate recovery gate, MLflow tracking (a new store)": (one, (0, 1, 3)),
        "one-candidate recovery gate, MLflow tracking (a store that exists)": (one, (0, 1, 3)),
        "48-config recovery gate, no tracking": ([CERTSEL, "gate", str(GATE), "--no-tracking"], (0, 1, 3)),
        "the quickstart (`certsel run examples/quantization.yaml`)": (
            [CERTSEL, "run", str(ROOT / "examples" / "quantization.yaml"), "--no-progress"], (0,)),
        "`certsel show JOB`": (None, (0,)),  # filled in with a job made first
    }


def crossover_table(path: pathlib.Path, k: int, n_items: int = 4000, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    means = np.linspace(0.03, 0.2, k)  # about half below alpha = 0.1: tests that run long enough to matter
    rows = {"candidate": np.repeat([f"c{j:03d}" for j in range(k)], n_items), "item": np.tile(np.arange(n_items), k),
            "loss": (rng.random(k * n_items) < np.repeat(means, n_items)).astype(float)}
    pq.write_table(pa.table(rows), path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--candidates", type=int, nargs="+", default=[4, 32, 128])
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t, results_section("overhead", "Overhead: what a command costs beyond "
                                                             "its statistics", write=args.docs):
        tmp = pathlib.Path(t)
        cases = commands(tmp)
        made = tmp / "made"
        _timed([*cases["one-candidate recovery gate, no tracking"][0], "--json", str(tmp / "g.json")], made, (0, 1, 3))
        _timed(cases["one-candidate recovery gate, MLflow tracking (a new store)"][0], tmp / "warm", (0, 1, 3))
        job = json.loads((tmp / "g.json").read_text())["job_id"]
        cases["`certsel show JOB`"] = ([CERTSEL, "show", job], (0,))
        best = {name: float("inf") for name in cases}
        load = []
        for rep in range(args.repeat):
            for name, (argv, codes) in cases.items():
                home = made if argv[1] == "show" else tmp / f"home-{rep}-{len(load)}"
                if "exists" in name:  # its store made (migrated, the experiment created) by another gate, untimed
                    _timed([CERTSEL, "gate", str(GATE), "--only", "mx_m8_r4_k64"], home, (0, 1, 3))
                best[name] = min(best[name], _timed(argv, home, codes))
                load.append(os.getloadavg()[0])
        floor = best["floor: Python reads the table"]
        print(f"Best of {args.repeat} runs each, interleaved, a fresh process and a fresh certsel home every run (no "
              f"finished job answers; every store is created, but where it is said to exist), on this machine at load {min(load):.1f}-{max(load):.1f} "
              f"(1-minute average; 2 cores), modules read from cached bytecode as an installed package's are. The floor is a Python that imports numpy and pyarrow and reads the bundled "
              f"TriviaQA table (`python benchmarks/overhead.py`). A recorded table runs in-process (`runtime: "
              f"auto`).\n")
        print("| command | seconds | x floor |")
        print("|---|---:|---:|")
        for name, s in best.items():
            print(f"| {name} | {s:.2f} | {s / floor:.1f} |")
        print(f"\nWhere Ray starts to pay for a recorded table: one job of K candidates (4,000 items, R-Eval, "
              f"budget 1,000, each gated, risks from 0.03 to 0.2 against alpha 0.1), no tracking, in-process against Ray on this "
              f"machine, best of {args.repeat}:\n")
        ratios = []
        print("| candidates | in-process s | Ray s | Ray / in-process |")
        print("|---:|---:|---:|---:|")
        for k in args.candidates:
            path = tmp / f"k{k}.parquet"
            crossover_table(path, k)
            job = tmp / f"k{k}.yaml"
            job.write_text(f"data: {{path: {path}, human: loss}}\npolicy: {{kind: r-eval}}\nalpha: 0.1\n"
                           f"procedure: gate\nbudget: {{n: 1000, batch: 50}}\n")
            secs = {}
            for runtime in ("local", "ray"):
                secs[runtime] = min(_timed([CERTSEL, "run", str(job), "--no-tracking", "--no-progress", "--runtime",
                                            runtime], tmp / f"x-{k}-{runtime}-{rep}") for rep in range(args.repeat))
            print(f"| {k} | {secs['local']:.1f} | {secs['ray']:.1f} | {secs['ray'] / secs['local']:.2f} |")
            ratios.append(secs["ray"] / secs["local"])
        paid = [k for k, r in zip(args.candidates, ratios, strict=True) if r < 1]
        print(f"\nRay paid for a recorded table from {paid[0]} candidates on." if paid else
              f"\nRay did not pay for a recorded table up to {args.candidates[-1]} candidates on this machine, so "
              f"`runtime: auto` runs tables in-process (`runtime: ray` asks for Ray).")


if __name__ == "__main__":
    main()
