"""The policy audits of docs/reliability.md: ``certsel audit`` on the bundled data.

TriviaQA (48 MX configurations, alpha = 0.1, delta = 0.1, n = 300, r = 3, FST in
decreasing bitwidth): R-Eval, R-AutoEval, R-AutoEval+ with UP and with WSR betting.
AlpacaEval (12 models, alpha = 0.5, delta = 0.05, up to 805 items): Seq and Cer-Eval.

    python benchmarks/audit_report.py [--reps 1000] [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from certsel.config import load_config
from certsel.orchestrator.audit import audit, write_audit
from certsel.orchestrator.jobdata import load_job_data

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
RUNS = [
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-eval", "policy.betting=up"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval", "policy.betting=up"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval+", "policy.betting=up"]),
    ("TriviaQA", "quantization.yaml", ["policy.kind=r-autoeval+", "policy.betting=wsr"]),
    ("AlpacaEval", "alpacaeval_ranking.yaml", ["policy.kind=seq", "alpha=0.5"]),
    ("AlpacaEval", "alpacaeval_ranking.yaml", ["policy.kind=cer-eval", "alpha=0.5"]),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--out", type=pathlib.Path, help="keep each audit's json/md/png here")
    args = ap.parse_args(argv)
    print(f"{args.reps} repetitions each; failure = certifying a candidate whose true risk is above alpha "
          "(testing policies) or an anytime interval that ever misses the true risk (Seq, Cer-Eval)\n")
    print("| data | policy | betting | candidates with H0 | worst failure (99% CP upper) | family-wise failure "
          "(99% CP upper) | delta | min coverage | mean labels to decide | FT-Eval TOST pass | ok | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ok_all = True
    for data_name, file, sets in RUNS:
        cfg = load_config(EXAMPLES / file, sets)
        data = load_job_data(cfg)
        t = time.perf_counter()
        res = audit(cfg, data, reps=args.reps, seed=0)
        secs = time.perf_counter() - t
        if args.out is not None:
            write_audit(res, args.out / f"{data_name}-{cfg.policy.kind}-{cfg.policy.betting}")
        rated = [r for r in res.rows if r["failure"] is not None]
        worst = max(rated, key=lambda r: r["failure"]) if rated else None
        o = res.overall
        ft = [r["ft_pass"] for r in res.rows if r["ft_pass"] is not None]
        w = "-" if worst is None else f"{worst['failure']:.3f} ({worst['failure_upper']:.3f})"
        print(f"| {data_name} | {cfg.policy.kind} | {cfg.policy.betting if cfg.policy.kind not in ('seq', 'cer-eval') else '-'}"
              f" | {sum(r['h0'] for r in res.rows)}/{len(res.rows)} | {w} | {o['familywise_failure']:.3f} "
              f"({o['failure_upper']:.3f}) | {cfg.delta:g} | {min(r['coverage'] for r in res.rows):.3f} | "
              f"{sum(r['labels_mean'] for r in res.rows) / len(res.rows):.1f} | {sum(ft)}/{len(ft)} | "
              f"{'yes' if o['ok'] else 'NO'} | {secs:.0f} |", flush=True)
        ok_all &= o["ok"]
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
