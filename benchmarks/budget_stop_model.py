"""The budget stop's model against full-budget paths: how its growth estimate errs, and what other rules would trade.

policies/budget_stop.py models the rest of a candidate's log e-value path as Brownian motion whose drift is the path's
slope over its later half. A betting e-process whose bet is learned (UP is a mixture over bets) grows like
t g - (1/2) log t + O(1): its slope keeps rising toward g, so the later half's slope understates the rest's by about
(1/2) log(t/h) / (t - h) - (1/2) log((t + m)/t) / m (h = t/2, m labels left). A stop that underrates the rest's growth
stops candidates the full budget would certify more often than its level says.

Each job here runs as a real job in ``scheduling.mode: full`` (nothing stops early, so every candidate's path, and its
futility test's, runs to the whole budget n) over ``--seeds`` seeds. On those paths:

- **bias**: at t labels, the later half's slope against the slope the path then actually took to n, averaged over the
  candidates, next to the regret term above;
- **rules**, replayed on the paths every ``--step`` labels from 40 on (a job's rounds are about 25 labels): both
  tests (2: a candidate stops when its own test is unlikely to reach its threshold and, with a futility test, that test
  too; a gate's rule) and the own test alone (3: a selection's), each with the slope as it is and with the regret term
  added (the default since policies/budget_stop.RULE_VERSION 3). Per rule and level: human labels against no stop (a
  candidate's labels end at its certification, its futility stop, the budget stop or n), certified-by-the-full-budget
  candidates the stop ends first (lost / certified, pooled), and candidates certified in at least 5 seeds whose own
  rate is above the level.

Thresholds: FST log(1/delta), Bonferroni log(K/delta), Holm the final step-down's log((K - C)/delta) with C the
candidates the full budget certifies (a job's Holm threshold starts higher and falls to it). The replay ignores what
decides which candidates a job tests (a fixed sequence's end, the pilot's start), so its labels are per candidate, not
a job's; benchmarks/budget_stop.py measures the current rule on whole jobs, to compare the replay of its rule 3 with
the regret term with. :func:`unlikely` with the regret term is the rule of policies/budget_stop.stops on many rows at
once; tests/test_budget_stop.py checks it against that function.

    python benchmarks/budget_stop_model.py [--seeds 10] [--docs]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import pathlib
import sys
import tempfile
import time
from collections import Counter

import numpy as np
from scipy.stats import norm

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from budget_stop import LARGE, NO_INTERVALS  # noqa: E402
from results_doc import results_section  # noqa: E402

from certsel.config import load_config  # noqa: E402
from certsel.orchestrator.engine.driver import LocalRuntime, run_job  # noqa: E402
from certsel.orchestrator.inputs.sources import load_job_data  # noqa: E402
from certsel.policies.budget_stop import MIN_WINDOW, reach_probability  # noqa: E402
from certsel.policies.procedures import PROCEDURES  # noqa: E402

EXAMPLES = ["quantization.yaml", "quantization_recovery.yaml", "prompts.yaml", "prompts_aggregate.yaml"]
LEVELS = (0.1, 0.2)
MIN_CERTIFIED = 5  # seeds a candidate must be certified in for its own rate to be judged


def full_paths(task):
    """One job at one seed with nothing stopping early: (names, own paths (K, n), futility paths or None, thresholds
    (K,), futility's log level or None)."""
    path, seed = task
    cfg = load_config(path, [f"seed={seed}", "scheduling.budget_stop=null", "scheduling.mode=full", *NO_INTERVALS])
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(1), collect_labels=False)
    n = cfg.budget.n
    own = np.array([np.asarray(r.path, dtype=np.float64)[:n] for r in res.records])
    fut = (np.array([np.asarray(r.futility_path, dtype=np.float64)[:n] for r in res.records])
           if cfg.scheduling.futility is not None else None)
    certified_names = set(res.certified)
    certified = np.array([r.name in certified_names for r in res.records])
    thresholds = PROCEDURES.lookup(cfg.procedure).log_thresholds(cfg.delta, certified)
    return ([r.name for r in res.records], own, fut, thresholds,
            None if cfg.scheduling.futility is None else math.log(1.0 / cfg.scheduling.futility))


def _first(mask: np.ndarray, n: int) -> np.ndarray:
    """Labels at the first True of each row (n + 1 where none)."""
    return np.where(mask.any(1), np.argmax(mask, 1) + 1, n + 1)


def unlikely(paths: np.ndarray, t: int, n: int, log_threshold, level: float, regret: bool) -> np.ndarray:
    """The rule of policies/budget_stop.stops on every row at t labels (vectorised); without the regret term, the rule
    before RULE_VERSION 3."""
    h = t // 2
    rate = (paths[:, t - 1] - paths[:, h - 1]) / (t - h)
    spread = np.diff(paths[:, h - 1:t], axis=1).std(axis=1, ddof=1)
    m = n - t
    drift = rate + norm.ppf(1 - level / 2) * spread / math.sqrt(t - h)
    if regret:
        drift = drift + 0.5 * math.log(t / h) / (t - h) - 0.5 * math.log((t + m) / t) / m
    return (reach_probability(log_threshold - paths[:, t - 1], drift, spread, m) < level / 2) & (spread > 0)


def replay(names, own, fut, thr, fut_level, level, rule, regret, step):
    """One rule's labels, lost and per-candidate rates on stacked paths (rows: candidate x seed)."""
    n = own.shape[1]
    cert_at = _first(np.maximum.accumulate(own, 1) >= thr[:, None], n)
    fut_at = (_first(np.maximum.accumulate(fut, 1) >= fut_level, n) if fut is not None
              else np.full(len(own), n + 1))
    ends = np.minimum(np.minimum(cert_at, fut_at), n)
    stop_at = np.full(len(own), n + 1)
    for t in range(2 * MIN_WINDOW, n, step):
        fire = unlikely(own, t, n, thr, level, regret)
        if rule == 2 and fut is not None:
            fire &= unlikely(fut, t, n, fut_level, level, regret)
        stop_at[fire & (stop_at > n) & (t < ends)] = t
    labels = np.minimum(ends, stop_at).sum()
    certified = cert_at <= n
    lost = certified & (stop_at < cert_at)
    seen, cost = Counter(), Counter()
    for i in np.flatnonzero(certified):
        seen[names[i]] += 1
        cost[names[i]] += int(lost[i])
    judged = [c for c in seen if seen[c] >= MIN_CERTIFIED]
    above = sum(cost[c] / seen[c] > level for c in judged)
    return labels, ends.sum(), int(lost.sum()), int(certified.sum()), above, len(judged)


def bias_row(own, checks) -> str:
    """Mean later-half slope at each t against the slope actually taken from t to n, and the regret term."""
    n = own.shape[1]
    cells = []
    for t in checks:
        h = t // 2
        est = ((own[:, t - 1] - own[:, h - 1]) / (t - h)).mean()
        took = ((own[:, n - 1] - own[:, t - 1]) / (n - t)).mean()
        theory = 0.5 * math.log(t / h) / (t - h) - 0.5 * math.log(n / t) / (n - t)
        cells.append(f"{est:.4f} / {took:.4f} ({took - est:+.4f}; {theory:+.4f})")
    return " | ".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--step", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    t0 = time.time()
    checks = (50, 100, 200)
    with tempfile.TemporaryDirectory() as tmp, results_section(
            "budget-stop-model", "Budget stop: its model against full-budget paths", write=args.docs), \
            mp.get_context("spawn").Pool(args.workers) as pool:
        from defaults import LARGE_JOB, large_table

        table, job = pathlib.Path(tmp) / "templates_1000.parquet", pathlib.Path(tmp) / "templates_1000.yaml"
        large_table(table)
        job.write_text(LARGE_JOB.format(path=table))
        jobs = [(ex, ROOT / "examples" / ex) for ex in EXAMPLES] + [(LARGE, job)]
        print(f"Each job in `scheduling.mode: full` over {args.seeds} seeds (every path to the whole budget), the rules "
              f"replayed on the paths every {args.step} labels; see the script's docstring for what each column "
              "holds.\n")
        print("Slopes, averaged over every candidate and seed: the later half's at t labels / the one the path then "
              "took to the budget (their difference; the regret term's).\n")
        print("| job | " + " | ".join(f"t = {t}" for t in checks) + " |")
        print("|---|" + "---|" * len(checks))
        rows = []
        for name, path in jobs:
            runs = pool.map(full_paths, [(path, s) for s in range(args.seeds)])
            names = [nm for r in runs for nm in r[0]]
            own = np.concatenate([r[1] for r in runs])
            fut = None if runs[0][2] is None else np.concatenate([r[2] for r in runs])
            thr = np.concatenate([r[3] for r in runs])
            print(f"| {name} | {bias_row(own, [t for t in checks if t < own.shape[1]])} |", flush=True)
            for level in LEVELS:
                for rule in (2, 3):
                    for regret in (False, True):
                        labels, base, lost, cert, above, judged = replay(names, own, fut, thr, runs[0][4], level,
                                                                         rule, regret, args.step)
                        rows.append(f"| {name} | {level:g} | {rule} | {'with' if regret else 'without'} | "
                                    f"{labels / base:.3f}x | {lost} / {cert} = {lost / max(cert, 1):.4f} | "
                                    f"{above} / {judged} |")
        print("\nRules replayed. 'rule': 2 needs both tests unlikely to reach their levels (a gate's), 3 the own "
              "test alone; 'regret term': the rest's gain with - (1/2) log((t + m)/t) and the slope with its "
              "(1/2) log(t/h)/(t - h) back.\n")
        print("| job | level | rule | regret term | labels vs no stop | lost / certified | candidates above the "
              f"level (certified in >= {MIN_CERTIFIED} seeds) |")
        print("|---|---:|---:|---|---:|---:|---:|")
        print("\n".join(rows))
        print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
