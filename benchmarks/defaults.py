"""The defaults against the old ones, on every bundled replay example and on a 1,000-candidate
job, through `certsel run` as a user runs it.

Three settings changed (certsel/config/schema.py, ``RunConfig._measured_defaults``): a testing
policy stops a candidate once R >= alpha is certified at ``scheduling.futility: 0.05`` (0.2.0;
it was off), and once the rest of its budget is unlikely to decide it at
``scheduling.budget_stop: 0.1`` (after 0.2.0; it was off), and a fixed sequence whose policy
pairs human labels with a recorded judge starts from the judge-only pilot
(``scheduling.start: pilot``, 0.2.0; it was ``top``). The old behaviour is
``--set scheduling.futility=null --set scheduling.budget_stop=null --set scheduling.start=top``.
Each example runs both ways in a fresh home (no MLflow), and the table compares what was
certified, the labels and the wall time.

The 1,000-candidate job: 1,000 prompt templates x 2,000 items with Bernoulli losses (risks
spread over 0.1-0.6, seeded), a judge agreeing with the human label on 85% of items, Holm,
R-AutoEval+, alpha 0.3, n = 500, r = 3.

    python benchmarks/defaults.py [--docs] [--skip-large] [--live]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

from certsel.config.sections import DEFAULT_BUDGET_STOP, DEFAULT_FUTILITY  # noqa: E402

OLD = ["scheduling.futility=null", "scheduling.budget_stop=null", "scheduling.start=top"]
EXAMPLES = ["quantization.yaml", "quantization_recovery.yaml", "prompts.yaml", "prompts_tasks.yaml",
            "prompts_aggregate.yaml", "alpacaeval_ranking.yaml"]
# live jobs that start their own CPU vLLM server (bash deploy/cpu/setup.sh first); both runs share one
# response cache, so the second pays for no generation twice (its wall time is not comparable)
LIVE = ["live_additions.yaml", "live_precision_drop.yaml"]
# lm-eval's live example asks a server that is already running (deploy/cpu/serve.sh): started here
LM_EVAL = "lm_eval_live.yaml"
NOT_RUN = {"live_templates.yaml": "sets scheduling.futility itself (0.1): only the budget stop's default applies",
           "live_ranking.yaml": "Seq, pairwise: no default applies",
           "annotators.yaml": "needs people grading in Label Studio; futility and the budget stop apply, not measured"}
LARGE_JOB = """name: templates-1000
data: {{path: {path}, human: loss_human, judge: loss_judge}}
objective: {{column: prompt_len, goal: minimize}}
policy: {{kind: r-autoeval+}}
procedure: holm
alpha: 0.3
delta: 0.1
budget: {{n: 500, r: 3}}
"""


def large_table(path: pathlib.Path, k: int = 1000, items: int = 2000, agree: float = 0.85, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    risk = rng.uniform(0.1, 0.6, k)
    human = (rng.random((k, items)) < risk[:, None]).astype(np.float64)
    judge = np.where(rng.random((k, items)) < agree, human, 1 - human)
    pq.write_table(pa.table({
        "candidate": np.repeat([f"t{i:04d}" for i in range(k)], items), "item": np.tile(np.arange(items), k),
        "loss_human": human.ravel(), "loss_judge": judge.ravel(),
        "prompt_len": np.repeat(rng.integers(50, 2000, k), items)}), path)


@contextlib.contextmanager
def cpu_server(port: int = 8000):
    """deploy/cpu/serve.sh on ``port`` (the address lm_eval_live.yaml names), until the block ends."""
    proc = subprocess.Popen(["bash", str(ROOT / "deploy" / "cpu" / "serve.sh"), str(ROOT / ".venv-vllm"),
                             str(ROOT / ".models" / "smollm2"), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit("deploy/cpu/serve.sh exited before it answered") from None
                time.sleep(1)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def run(job: pathlib.Path, sets: list[str], home: pathlib.Path) -> dict:
    """One `certsel run` in a fresh home: its certificate and wall time."""
    argv = [str(pathlib.Path(sys.executable).with_name("certsel")), "run", str(job), "--format", "json", "--no-tracking", "--home", str(home)]
    for s in sets:
        argv += ["--set", s]
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "RAY_DEDUP_LOGS": "0"}, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{job.name} {sets}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    cert = json.loads(out.stdout)
    return {"cert": cert, "seconds": seconds}


def certified(cert: dict) -> set[str]:
    """What the job certified: the certified candidates, or a ranking's certified pairs."""
    if cert.get("ranking"):
        rk = cert["ranking"]
        return ({f"{a} > {b}" for a, worse in rk["better"].items() for b in worse}
                | {f"tie {p}" for p in rk.get("tied", [])})
    return {c["candidate"] for c in cert["candidates"] if c.get("certified")}


def row(name: str, new: dict, old: dict) -> tuple[str, str | None]:
    # the configs before a pilot's start are not tested: a statement nobody needs (the heavier configs)
    skipped = set((new["cert"].get("pilot") or {}).get("skipped", []))
    cn, co = certified(new["cert"]), certified(old["cert"]) - skipped
    hn, ho = new["cert"]["labels"]["spent"]["human"], old["cert"]["labels"]["spent"]["human"]
    jn, jo = new["cert"]["labels"]["spent"]["judge"], old["cert"]["labels"]["spent"]["judge"]
    sn, so = new["cert"]["selected"], old["cert"]["selected"]
    same = "same" if cn == co else "differs"
    before = f"; {len(skipped)} before the pilot's start not tested" if skipped else ""
    line = (f"| {name} | {sn or 'none'} / {so or 'none'} | {len(cn)} / {len(co)} ({same}{before}) | {hn:,} / {ho:,} "
            f"({hn / max(ho, 1):.2f}x) | {jn:,} / {jo:,} | {new['seconds']:.1f} / {old['seconds']:.1f} |")
    diff = None
    if cn != co:
        diff = (f"{name}: certified only with the defaults: {', '.join(sorted(cn - co)) or 'none'}; only with the "
                f"old settings: {', '.join(sorted(co - cn)) or 'none'}")
    return line, diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    ap.add_argument("--skip-large", action="store_true", help="leave out the 1,000-candidate job")
    ap.add_argument("--live", action="store_true", help="also the live examples on the CPU vLLM (deploy/cpu/setup.sh)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, results_section("defaults", "Defaults against the old settings",
                                                               write=args.docs):
        tmp = pathlib.Path(tmp)
        print("Each bundled replay example and a 1,000-candidate job through `certsel run` (Ray, no MLflow, a "
              f"fresh home), with the defaults (`scheduling.futility: {DEFAULT_FUTILITY:g}` and "
              f"`scheduling.budget_stop: {DEFAULT_BUDGET_STOP:g}` for testing policies, "
              "`scheduling.start: pilot` for a fixed sequence with a judge) and with the old settings "
              f"(`--set {' --set '.join(OLD)}`). Cells: defaults / old. `certified`: the candidates certified "
              "(a ranking: its certified orders and ties), compared over the configs a pilot-started sequence tested. Wall time: the whole command, Ray's start "
              "included.\n")
        print("| job | selected | certified (same set?) | human labels (ratio) | judge labels | wall time, s |")
        print("|---|---|---|---|---|---|")
        diffs = []
        nothing = contextlib.nullcontext
        jobs = [(ex, ROOT / "examples" / ex, [], nothing) for ex in EXAMPLES]
        if args.live:
            jobs += [(ex, ROOT / "examples" / ex, [f"live.cache_dir={tmp / 'cache'}"], nothing) for ex in LIVE]
            jobs.append((LM_EVAL, ROOT / "examples" / LM_EVAL, [f"labels.cache_dir={tmp / 'cache'}"], cpu_server))
        if not args.skip_large:
            table = tmp / "templates_1000.parquet"
            large_table(table)
            job = tmp / "templates_1000.yaml"
            job.write_text(LARGE_JOB.format(path=table))
            jobs.append(("1,000 templates (Holm, alpha 0.3)", job, [], nothing))
        for i, (name, job, sets, around) in enumerate(jobs):
            with around():
                new = run(job, sets, tmp / f"new{i}")
                old = run(job, [*sets, *OLD], tmp / f"old{i}")
            line, diff = row(name, new, old)
            print(line, flush=True)
            if diff:
                diffs.append(diff)
        print()
        if diffs:
            print("Where the certified sets differ:\n")
            print("\n".join(f"- {d}" for d in diffs))
        else:
            print("Every job certified the same set with the defaults as with the old settings.")
        skipped = {**NOT_RUN, **({} if args.live else {ex: "live: run with --live" for ex in [*LIVE, LM_EVAL]})}
        print("\nNot run here: " + "; ".join(f"`{ex}` ({why})" for ex, why in skipped.items()) + ".")
        print(f"\nWall time of the whole benchmark: {time.perf_counter() - t0:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
