"""The policy audits of docs/reliability.md: ``certsel audit`` on the bundled data.

TriviaQA (48 MX configurations, alpha = 0.1, delta = 0.1, n = 300, r = 3, FST in
decreasing bitwidth): R-Eval, R-AutoEval, R-AutoEval+ with UP, WSR and ONS betting, and
judge-stratified (``--stratified-reps`` repetitions, default 200: it judges every item first).
AlpacaEval: the ranking example (12 models, 66 pairs, delta = 0.05, up to 805 items per
pair) with Seq and with Cer-Eval pairs, audited as the ranking (a row's "candidates" are
the pairs; failure = a wrong certified order); ``--ranking-reps`` repetitions (default 200:
a Cer-Eval ranking repetition runs 66 pair policies).

    python benchmarks/audit_report.py [--reps 1000] [--ranking-reps 200] [--stratified-reps 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from certsel.config import load_config
from certsel.orchestrator.audit.job_audit import write_audit
from certsel.orchestrator.commands.audit import audit
from certsel.orchestrator.inputs.sources import load_job_data

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
RUNS = [
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-eval", "policy.betting=up"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval", "policy.betting=up"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval+", "policy.betting=up"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval+", "policy.betting=wsr"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval+", "policy.betting=ons"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=judge-stratified"]),
    ("AlpacaEval ranking", "alpacaeval_ranking.yaml", ["policy.kind=seq"]),
    ("AlpacaEval ranking", "alpacaeval_ranking.yaml", ["policy.kind=cer-eval"]),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--ranking-reps", type=int, default=200)
    ap.add_argument("--stratified-reps", type=int, default=200)
    ap.add_argument("--out", type=pathlib.Path, help="keep each audit's json/md/png here")
    ap.add_argument("--only", help="run only the rows whose data name contains this (e.g. TriviaQA)")
    args = ap.parse_args(argv)
    print(f"{args.reps} repetitions each ({args.ranking_reps} for the rankings); failure = certifying a candidate "
          "whose true risk is above alpha (testing policies) or a wrong certified order (rankings, whose "
          "'candidates' are the pairs and whose coverage is the pairs' anytime intervals)\n")
    print("| data | policy | betting | candidates with H0 | worst failure (99% CP upper) | family-wise failure "
          "(99% CP upper) | delta | min coverage | mean labels to decide | FT-Eval abs(bias) < margin | verdict | reps | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ok_all = True
    summaries = []
    for data_name, file, sets in RUNS:
        if args.only and args.only not in data_name:
            continue
        cfg = load_config(EXAMPLES / file, sets)
        data = load_job_data(cfg)
        t = time.perf_counter()
        reps = (args.ranking_reps if cfg.procedure == "pairwise"
                else args.stratified_reps if cfg.policy.kind == "judge-stratified" else args.reps)
        res = audit(cfg, data, reps=reps, seed=0)
        secs = time.perf_counter() - t
        if args.out is not None:
            write_audit(res, args.out / f"{data_name}-{cfg.policy.kind}-{cfg.policy.strategy.describe()}")
        rated = [r for r in res.rows if r["failure"] is not None]
        worst = max(rated, key=lambda r: r["failure"]) if rated else None
        o = res.overall
        ft = [r["ft_pass"] for r in res.rows if r["ft_pass"] is not None]
        w = "-" if worst is None else f"{worst['failure']:.3f} ({worst['failure_upper']:.3f})"
        print(f"| {data_name} | {cfg.policy.kind} | {cfg.policy.strategy.describe() if cfg.policy.is_testing else '-'}"
              f" | {sum(r['h0'] for r in res.rows)}/{len(res.rows)} | {w} | {o['familywise_failure']:.3f} "
              f"({o['failure_upper']:.3f}) | {cfg.delta:g} | {min(r['coverage'] for r in res.rows):.3f} | "
              f"{sum(r['labels_mean'] for r in res.rows) / len(res.rows):.1f} | {sum(ft)}/{len(ft)} | "
              f"{o['verdict']} | {reps} | {secs:.0f} |", flush=True)
        ok_all &= o["verdict"] != "failed"
        if res.unit == "pair":
            summaries.append(res.summary())
    for line in summaries:
        print(f"\n- {line}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
