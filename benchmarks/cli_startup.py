"""How fast the command line answers: `certsel --help`, `certsel` alone, `certsel run --help`,
and a bad job file (the error path, which loads the configuration layer).

    python benchmarks/cli_startup.py [--repeat 7]

Prints the median and the worst of ``--repeat`` runs of each (wall clock, a fresh process
each time, as a user starts it). The goal for help and usage is under 1 s.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"


def timed(argv: list[str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([CERTSEL, *argv], capture_output=True, timeout=120)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bad = pathlib.Path(tmp) / "job.yaml"
        bad.write_text("budgt: {n: 10}\n")
        cases = [("certsel --help", ["--help"]), ("certsel (usage)", []), ("certsel run --help", ["run", "--help"]),
                 ("certsel run bad.yaml (error)", ["run", str(bad)])]
        print("| command | median s | worst s |")
        print("|---|---|---|")
        for name, argv in cases:
            t = timed(argv, args.repeat)
            print(f"| `{name}` | {statistics.median(t):.2f} | {max(t):.2f} |")


if __name__ == "__main__":
    main()
