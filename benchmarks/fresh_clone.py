"""The README's two commands on a fresh clone in a fresh virtual environment, timed, then the
fast tier; what the test runs counted, and whether anything was written into the clone.

The commands are read from the README's first `bash` block, so the figures are those of the
commands a newcomer copies. The clone is of the committed tree (``git clone`` of this
repository), the venv is new (``python -m venv``), certsel's home is a fresh folder.

    python benchmarks/fresh_clone.py [--docs]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402


def readme_commands(readme: pathlib.Path = ROOT / "README.md") -> list[str]:
    """The two commands of the README's first bash block."""
    block = re.search(r"```bash\n(.*?)```", readme.read_text(), re.S)
    if block is None:
        raise SystemExit("README.md has no bash block")
    cmds = [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]
    if len(cmds) != 2:
        raise SystemExit(f"README.md's first bash block should hold two commands, it holds {len(cmds)}")
    return cmds


def timed(cmd: str, cwd: pathlib.Path, env: dict, log: pathlib.Path, tests: bool = False) -> tuple[float, str]:
    """Run ``cmd`` in the clone's venv: its seconds and output. A failing test run is measured and
    reported like a passing one (the section names its failures); any other failure stops here."""
    t0 = time.perf_counter()
    p = subprocess.run(["bash", "-c", f". {cwd.parent / 'venv'}/bin/activate && {cmd}"], cwd=cwd, env=env,
                       capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    log.write_text(p.stdout + p.stderr)
    if p.returncode != 0 and not (tests and re.search(r"\d+ passed", p.stdout)):
        raise SystemExit(f"`{cmd}` exited {p.returncode} after {seconds:.0f} s; its output: {log}")
    return seconds, p.stdout + p.stderr


def counts(output: str) -> dict[str, int]:
    """pytest's last line: passed, skipped, failed, ... and the number of tests collected."""
    last = [line for line in output.splitlines() if re.search(r"\d+ passed", line)][-1]
    out = {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped|failed|errors?|xfailed|deselected)", last)}
    out["tests"] = sum(v for k, v in out.items() if k != "deselected")
    return out


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    ap.add_argument("--keep", type=pathlib.Path, default=None, help="work in this folder and keep it")
    args = ap.parse_args(argv)
    install_run, install_test = readme_commands()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or pathlib.Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        clone = work / "certsel"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MLFLOW_TRACKING_URI", "PYTHONPATH")}
        env["CERTSEL_HOME"] = str(work / "home")
        first, _ = timed(install_run, clone, env, work / "first.log")
        second, out = timed(install_test, clone, env, work / "second.log", tests=True)
        suite = counts(out)
        fast, fast_out = timed("pytest -m unit -q", clone, env, work / "fast.log", tests=True)
        tier = counts(fast_out)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    with results_section("tests", "A fresh clone: the README's two commands, and the fast tier", write=args.docs):
        print(f"A `git clone` of commit {head} in a new folder, a new venv (`python -m venv`), a fresh certsel home; "
              "the commands copied from the README's quickstart, each timed as a whole (pip's downloads "
              "included).\n")
        print("| command | wall time | what ran |")
        print("|---|---|---|")
        print(f"| `{install_run}` | {minutes(first)} | install, then the quickstart job |")
        failed = lambda c: f", **{c['failed']} failed**" if c.get("failed") else ""  # noqa: E731
        print(f"| `{install_test}` | {minutes(second)} | install of the test extras, then {suite['tests']:,} tests: "
              f"{suite.get('passed', 0):,} passed, {suite.get('skipped', 0)} skipped{failed(suite)} |")
        print(f"| `pytest -m unit` (the fast tier) | {minutes(fast)} | {tier.get('passed', 0):,} tests passed"
              f"{failed(tier)} |")
        failures = re.findall(r"^FAILED (\S+)", out + fast_out, re.M)
        if failures:
            print("\nFailed: " + ", ".join(f"`{f}`" for f in dict.fromkeys(failures)) + ".")
        print(f"\nFiles written under the clone by the commands: {'none' if not dirty.strip() else dirty.strip()}.")
        print("The skipped tests are those of the `vllm` and `label_studio` markers, which need the CPU vLLM build "
              "and a Label Studio server (CI installs both and runs them).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
