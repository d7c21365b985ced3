"""The engine's observable behaviour, written down so that a refactoring can prove it changed nothing.

Runs every bundled replay example (and variants covering each policy kind, betting strategy,
observation and procedure), the vectorised replicated selection and ``certsel audit``
in-process, and records what a user can observe: the selection, the certified set, every
candidate's status, e-value path, bounds, interval, labels bought in order (item, role, loss),
the certificate (without its timestamp and run time), the ranking, and the audit's rows.

    python benchmarks/behaviour.py --write FILE     # before a change (FILE.json or FILE.json.gz)
    python benchmarks/behaviour.py --compare FILE   # after it: prints the largest numeric
                                                    # difference and every path that differs

``--compare`` exits 1 when anything differs (any discrete value, or a number by more than
``--tol``, default 0, measured as |a - b| / max(1, |a|, |b|): absolute below 1, relative above). ``--only NAME`` runs the cases whose name contains NAME.
``behaviour_baseline.json.gz`` (next to this script) is the recorded behaviour; a change that
is meant to alter results writes it again, and says so in its commit. tests/test_behaviour.py
compares a few cases with it in every test run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import pathlib
import sys
import time

import numpy as np

from certsel.config import load_config
from certsel.orchestrator.commands.audit import audit
from certsel.orchestrator.outputs.certificate import certificate
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.inputs.sources import load_job_data
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the tests' reference
from helpers.replicated import replicated_selection  # noqa: E402
from certsel.orchestrator.engine.runtime import LocalRuntime

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
QUANT = "quantization.yaml"
# (case name, example, overrides): every policy kind, betting strategy, observation and procedure
JOBS = [
    ("quantization-default", QUANT, []),
    ("quantization-r-eval-bonferroni", QUANT, ["policy.kind=r-eval", "procedure=bonferroni"]),
    ("quantization-r-autoeval-holm", QUANT, ["policy.kind=r-autoeval", "procedure=holm"]),
    ("quantization-paper-wsr", QUANT, ["policy.observation=paper", "policy.betting=wsr"]),
    ("quantization-ons-fixed-rounds", QUANT, ["policy.betting=ons", "scheduling.rounds=fixed"]),
    ("quantization-judge-stratified", QUANT, ["policy.kind=judge-stratified"]),
    ("quantization-seq", QUANT, ["policy.kind=seq", "procedure=bonferroni"]),
    ("prompts-default", "prompts.yaml", []),
    ("ranking-best", "alpacaeval_ranking.yaml", ["pairwise.goal=best"]),
    ("ranking-seq", "alpacaeval_ranking.yaml", ["policy.kind=seq", "budget.n=200"]),
]
AUDITS = [
    ("audit-r-autoeval+", QUANT, [], 20),
    ("audit-judge-stratified", QUANT, ["policy.kind=judge-stratified"], 10),
    ("audit-seq", QUANT, ["policy.kind=seq", "budget.n=100"], 10),
]
VOLATILE = {"created", "seconds", "job_id", "certsel_version"}  # differ between any two runs
# the file's format, not the job's behaviour: selection.json gained a schema version after the baseline
FORMAT = {"schema_version"}
# traces kept since the baseline, of numbers it compares already: a record's futility_path (the futility test's log E
# after each label, for the budget stop; its running maximum, max_log_futility, is compared)
TRACES = {"futility_path"}
# fields added after the baseline, left out where they hold the value every baseline job has
# (a record's exact: a table job never decides on an exact mean; True would still differ; a record's
# reused: no baseline job keeps labels across jobs; a record's claim: none continues a claim's test;
# a record's baseline: no baseline job gates against a baseline model)
ADDED = {"exact": False, "reused": 0, "claim": None, "baseline": None, "stop_minimum": None, "stopped": None, "stop": 0.0}


def plain(x):
    """JSON-ready data with every float kept exactly (repr round-trips) and NaN/inf as strings."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return plain(dataclasses.asdict(x))
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()
                if k not in VOLATILE | FORMAT | TRACES and not (k in ADDED and type(v) is type(ADDED[k]) and v == ADDED[k])}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else repr(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return str(x)


def job_case(file: str, sets: list[str]) -> dict:
    cfg = load_config(EXAMPLES / file, sets)
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(1))
    labels = {name: {c: getattr(tab, c).tolist() for c in ("item", "role", "loss")}
              for name, tab in (res.labels or {}).items()}
    ranking = None if res.ranking is None else res.ranking.as_dict()
    return plain({"selected": res.selected, "certified": res.certified, "level": res.level, "spent": res.spent,
                  "rounds": res.rounds, "ranking": ranking, "records": res.records, "labels": labels,
                  "certificate": portable(certificate(res).as_json())})


def portable(cert: dict) -> dict:
    """The certificate with its data path relative to the checkout, so that clones compare equal."""
    data = dict(cert["data"], path=pathlib.Path(cert["data"]["path"]).resolve().relative_to(ROOT).as_posix())
    return dict(cert, data=data)


def audit_case(file: str, sets: list[str], reps: int) -> dict:
    cfg = load_config(EXAMPLES / file, sets)
    res = audit(cfg, load_job_data(cfg), reps=reps, seed=0, workers=1)
    return plain({"rows": res.rows, "overall": res.overall})


def select_case() -> dict:
    cfg = load_config(EXAMPLES / QUANT)
    out = replicated_selection(load_job_data(cfg).table, n=300, r=3, reps=50, seed=0, alpha=0.1, delta=0.1)
    return plain({"max_evalue": out.max_evalue, "labels_to_certify": out.labels_to_certify,
                  "certified": out.certified, "selected": out.selected})


def cases():
    for name, file, sets in JOBS:
        yield name, lambda f=file, s=sets: job_case(f, s)
    for name, file, sets, reps in AUDITS:
        yield name, lambda f=file, s=sets, n=reps: audit_case(f, s, n)
    yield "select-replicated", select_case


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def differences(a, b, path="") -> list[tuple[str, float]]:
    """(path, |difference|) of every leaf that differs; inf for a discrete or structural one."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [(f"{path}.{k}", math.inf) for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [(f"{path}[len {len(a)} != {len(b)}]", math.inf)]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    if _number(a) and _number(b) and float in (type(a), type(b)):
        # relative to the numbers' size past 1: e-values reach 1e12, and CPUs whose BLAS kernels sum in
        # another order differ in the last bits (1e-14 relative seen between two x86 machines)
        d = abs(float(a) - float(b)) / max(1.0, abs(float(a)), abs(float(b)))
        return [(path, d)] if d > 0 else []
    return [] if a == b and type(a) is type(b) else [(path, math.inf)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=pathlib.Path)
    mode.add_argument("--compare", type=pathlib.Path)
    ap.add_argument("--only")
    ap.add_argument("--tol", type=float, default=0.0)
    args = ap.parse_args(argv)
    got = {}
    for name, run in cases():
        if args.only and args.only not in name:
            continue
        t = time.perf_counter()
        got[name] = run()
        print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)
    if args.write:
        write(args.write, got)
        print(f"wrote {len(got)} cases to {args.write}")
        return 0
    bad, worst = compare(read(args.compare), got, args.tol)
    print(f"\n{len(got)} cases, {len(bad)} differ; largest numeric difference {worst:.3g}")
    return 1 if bad else 0


def write(path: pathlib.Path, got: dict) -> None:
    text = json.dumps(got, sort_keys=True).encode()
    path.write_bytes(gzip.compress(text, mtime=0) if path.suffix == ".gz" else text)


def read(path: pathlib.Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def compare(want: dict, got: dict, tol: float = 0.0) -> tuple[list[str], float]:
    """The cases that differ (printing their first differences) and the largest numeric difference."""
    worst, bad = 0.0, []
    for name, value in got.items():
        if name not in want:
            print(f"{name}: not recorded")
            bad.append(name)
            continue
        diffs = differences(want[name], json.loads(json.dumps(value)), name)
        worst = max([worst, *(d for _, d in diffs if math.isfinite(d))])
        over = [(p, d) for p, d in diffs if d > tol]
        if over:
            bad.append(name)
        for p, d in over[:10]:
            print(f"  differs: {p} ({'discrete' if math.isinf(d) else f'{d:.3g}'})")
        print(f"{name}: {'same' if not over else f'{len(over)} differences'}")
    return bad, worst


if __name__ == "__main__":
    sys.exit(main())
