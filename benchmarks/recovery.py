"""Recovery certificates on the bundled TriviaQA table (examples/quantization_recovery.yaml).

For each r it prints:

* the job itself (seed 0, through Ray, no tracking): the selected configuration, how many of
  the 48 are certified, the human labels bought, the selected one's joint and own bounds;
* the audit (``certsel audit``'s machinery, ``--reps`` random item orders): the family-wise
  failure of FST (a configuration whose recovery on the whole table is below r in the
  certified set) and the worst per-configuration failure, each with its 99% Clopper-Pearson
  upper bound;
* the coverage of the recovery lower bound (R-Eval's own test inverted over r', at level
  delta): P(L <= true recovery) per configuration, at the full budget and at each order's
  stop (the first label at which the e-value reached 1/delta, else the budget). Both are
  stopping times, so both must cover at >= 1 - delta.

    python benchmarks/recovery.py --reps 1000
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def coverage(data, cfg, reps: int, seed: int, chunk: int = 10) -> dict:
    """Coverage of the recovery lower bound at the budget and at the stop, per configuration."""
    from certsel.policies.autoeval import log_evalue_paths
    from certsel.policies.recovery import recovery_decision_bound

    rec, n, delta = data.recovery, cfg.budget.n, cfg.delta
    truth = rec.on_table
    rng = np.random.default_rng(seed)
    covered_end = np.zeros(truth.size)
    covered_stop = np.zeros(truth.size)
    for start in range(0, reps, chunk):
        m = min(chunk, reps - start)
        orders = np.argsort(rng.random((m, rec.score.shape[1])), axis=1)[:, :n]
        s = rec.score[:, orders].transpose(1, 0, 2)  # (m, K, n)
        ref = rec.reference[:, orders].transpose(1, 0, 2)
        log_e = log_evalue_paths(rec.claim.losses(s, ref), alpha=rec.claim.alpha, delta=delta, rhos=(0.0,),
                                 betting=cfg.policy.strategy, horizon=n, observation=cfg.policy.observation)
        crossed = log_e >= -np.log(delta)
        stop = np.where(crossed.any(axis=-1), crossed.argmax(axis=-1) + 1, n)
        kw = dict(at_least=rec.claim.at_least, level=delta, delta=delta, betting=cfg.policy.strategy, horizon=n,
                  observation=cfg.policy.observation)
        end = recovery_decision_bound(s, ref, max_log_evalue=log_e.max(axis=-1), **kw)
        at_stop = recovery_decision_bound(s, ref, n_used=stop,
                                          max_log_evalue=np.where(np.arange(n) < stop[..., None], log_e,
                                                                  -np.inf).max(axis=-1), **kw)
        covered_end += (end <= truth).sum(axis=0)
        covered_stop += (at_stop <= truth).sum(axis=0)
    return {"end": covered_end / reps, "stop": covered_stop / reps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--at-least", type=float, nargs="+", default=[0.95, 0.9])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-job", action="store_true", help="skip the Ray job (audit and coverage only)")
    args = ap.parse_args(argv)

    import certsel
    from certsel.config import load_config
    from certsel.orchestrator.audit.base import clopper_pearson
    from certsel.orchestrator.audit.job_audit import audit
    from certsel.orchestrator.inputs.sources import load_job_data

    job_file = ROOT / "examples" / "quantization_recovery.yaml"
    for r in args.at_least:
        t0 = time.perf_counter()
        cfg = load_config(job_file, overrides=[f"recovery.at_least={r}"])
        data = load_job_data(cfg)
        truth = data.recovery.on_table
        print(f"\n## recovery >= {r:g} of 'full precision' (alpha = 1/(1+r) = {cfg.alpha:.4f}), delta = {cfg.delta:g}, "
              f"n = {cfg.budget.n}")
        print(f"configurations with true recovery >= r: {int(np.sum(truth >= r))} of {truth.size}")
        if not args.no_job:
            res = certsel.run(cfg, track=False)
            sel = next((c.recovery for c in res.selection.candidates if c.selected), None)
            spent = res.selection.labels.spent.human
            print(f"job (seed {cfg.seed}): selected {res.selected} (true recovery {sel.on_full_table:.4f}, "
                  f"joint bound {sel.simultaneous_lower_bound}, own bound {sel.lower_bound}, "
                  f"estimate {sel.estimate}), {len(res.certified)} certified, {spent} human labels")
        au = audit(cfg, data, reps=args.reps, seed=args.seed)
        ov = au.overall
        h0 = [row for row in au.rows if row["h0"]]
        worst = max(h0, key=lambda row: row["failure"]) if h0 else None
        print(f"audit ({args.reps} orders): family-wise failure {ov['familywise_failure']:.4f} (99% CP upper "
              f"{ov['failure_upper']:.4f}) against delta = {cfg.delta:g}: {ov['verdict']}")
        if worst is not None:
            print(f"worst configuration below r: {worst['candidate']} (true recovery "
                  f"{truth[data.names.index(worst['candidate'])]:.4f}) failure {worst['failure']:.4f} (99% CP upper "
                  f"{worst['failure_upper']:.4f})")
        cov = coverage(data, cfg, args.reps, args.seed)
        for key, words in (("end", "at the budget"), ("stop", "at the stop")):
            k = int(np.argmin(cov[key]))
            lo = clopper_pearson(int(round(cov[key][k] * args.reps)), args.reps, 0.99)[0]
            print(f"recovery bound coverage {words}: lowest {cov[key][k]:.4f} ({data.names[k]}, true recovery "
                  f"{truth[k]:.4f}; 99% CP lower {lo:.4f}), mean {cov[key].mean():.4f}; target >= {1 - cfg.delta:g}")
        print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
