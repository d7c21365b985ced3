"""The README's quickstart, timed as a newcomer meets it, against what it cannot avoid: the
statistics and Ray's start. Then `certsel show` and `certsel jobs` on the job it made.

    python benchmarks/quickstart_time.py [--repeat 3]

One run measures, each in a fresh process:
- the quickstart: `certsel run examples/quantization.yaml` in a fresh certsel home (a new
  MLflow SQLite store, as on a fresh machine), wall clock, with its stages from
  `--log-level info` (stages overlap: the MLflow store opens while Ray starts);
- Ray's start: `import ray; ray.init(); ray.shutdown()` as the job calls it;
- the statistics: the same job's rounds and final bounds in one process without Ray,
  MLflow or a report (`run_job` on a `LocalRuntime`; imports and data loading excluded);
- `certsel show RUN` (the run id prefix the quickstart printed) and `certsel jobs`.
Medians of ``--repeat`` runs. The goal: quickstart <= 2 x (statistics + Ray's start);
`certsel show` under 1 s.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
JOB = ROOT / "examples" / "quantization.yaml"
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

RAY_START = """
import logging, time
t0 = time.perf_counter()
import ray
ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
ray.shutdown()
print(time.perf_counter() - t0)
"""

STATISTICS = f"""
import time
from certsel.config import load_config
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.engine.runtime import LocalRuntime
cfg = load_config({str(JOB)!r})
data = load_job_data(cfg)
t0 = time.perf_counter()
res = run_job(cfg, data, LocalRuntime())
print(time.perf_counter() - t0, res.selected)
"""


def quickstart(home: pathlib.Path, cwd: pathlib.Path) -> tuple[float, dict[str, float], str, str]:
    env = {**os.environ, "CERTSEL_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # modules read from their cached bytecode, as an installed package's are
    t0 = time.perf_counter()
    p = subprocess.run([CERTSEL, "run", str(JOB), "--no-progress", "--log-level", "info"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"the quickstart failed: {p.stderr.strip().splitlines()[-1:]}")
    stages: dict[str, float] = {}
    for name, sec in re.findall(r"INFO certsel\.job: (.+): ([0-9.]+) s$", p.stderr, re.M):
        stages[name] = stages.get(name, 0.0) + float(sec)
    prefix = re.search(r"\(certsel show (\w+)\)", p.stdout).group(1)
    return wall, stages, prefix, answer(p.stdout, home)


def answer(stdout: str, home: pathlib.Path) -> str:
    """The job's last lines, from ``selected:`` to the MLflow run (paths in the home as ~/.certsel)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("selected: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("MLflow run: "))
    return "\n".join(lines[start:end + 1]).replace(str(home), "~/.certsel")


def python_seconds(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr.strip().splitlines()[-1])
    return float(out.stdout.split()[0])


def command_seconds(argv: list[str], home: pathlib.Path, cwd: pathlib.Path) -> float:
    t0 = time.perf_counter()
    env = {**os.environ, "CERTSEL_HOME": str(home)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as in quickstart(): cached bytecode, as an installed package's
    p = subprocess.run([CERTSEL, *argv], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"certsel {' '.join(argv)} failed: {p.stderr.strip()}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    walls, ray_s, stats_s, show_s, jobs_s, stage_runs, answers = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for k in range(args.repeat):
            home, cwd = tmp / f"home{k}", tmp / f"cwd{k}"
            cwd.mkdir()
            wall, stages, prefix, said = quickstart(home, cwd)
            walls.append(wall)
            answers.append(said)
            stage_runs.append(stages)
            ray_s.append(python_seconds(RAY_START))
            stats_s.append(python_seconds(STATISTICS))
            show_s.append(command_seconds(["show", prefix], home, tmp))
            jobs_s.append(command_seconds(["jobs"], home, tmp))
    med = statistics.median
    wall, ray, stats = med(walls), med(ray_s), med(stats_s)
    with results_section("quickstart", "The quickstart", write=args.docs):
        print("`certsel run examples/quantization.yaml` in a fresh certsel home (a new MLflow SQLite store, as on "
              f"a fresh machine), medians of {args.repeat} runs, each in a fresh process; its stages from "
              "`--log-level info` (a recorded table runs in-process under `runtime: auto`, so no Ray stage; Ray's start is timed beside it as what the job no longer pays).\n")
        print("| what | seconds |")
        print("|---|---|")
        print(f"| quickstart, wall clock | {wall:.1f} |")
        for name in stage_runs[0]:
            print(f"| - stage: {name} | {med([s.get(name, 0.0) for s in stage_runs]):.2f} |")
        print(f"| Ray's start (import, init, shutdown) | {ray:.1f} |")
        print(f"| the statistics (rounds and final bounds, one process) | {stats:.1f} |")
        print(f"| `certsel show RUN` (from the job's folder) | {med(show_s):.2f} |")
        print(f"| `certsel jobs` | {med(jobs_s):.2f} |")
        ratio = wall / (stats + ray)
        print(f"\nquickstart / (statistics + Ray's start) = {ratio:.2f} (goal <= 2: "
              f"{'met' if ratio <= 2 else 'not met'}); certsel show {med(show_s):.2f} s (goal < 1 s: "
              f"{'met' if med(show_s) < 1 else 'not met'}).\n")
        print("The answer the first run printed (from `selected:` on; the home shortened to `~/.certsel`):\n")
        print(f"```\n{answers[0]}\n```")

if __name__ == "__main__":
    main()
