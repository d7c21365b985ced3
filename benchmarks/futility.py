"""Futility stops for e-value tests: labels saved on failing candidates, error and power.

A candidate runs until its e-process certifies R <= alpha (at Bonferroni's K/delta), its
futility e-process on the mirrored losses certifies R >= alpha at delta_f, or its budget
runs out (decisions checked after every human label, R-AutoEval+ with UP betting, the
job's item protocol: n human labels, r*n judge-only). Each repetition is a fresh random item
order. Reported with and without futility:

* labels spent on the failing candidates (true R > alpha) and on all candidates;
* the family-wise error (a repetition certifying any failing candidate), unchanged by
  construction since futility never certifies;
* the power lost: good candidates (R <= alpha) that the full run certifies but futility
  stopped first, and how often a good candidate is stopped at all (bounded by delta_f);
* how often the selection (the certified candidate with the best objective) changes.

Cases: the bundled prompt table (the 25 templates of examples/prompts.yaml, and all 100)
and a simulation with Bernoulli losses and a judge that flips 10% of the verdicts.

    python benchmarks/futility.py [--reps 200]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.simulate import bernoulli  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

from certsel.config import load_config  # noqa: E402
from certsel.orchestrator.inputs.sources import load_job_data  # noqa: E402
from certsel.policies import log_evalue_paths, scheme_rhos  # noqa: E402


def first_hit(log_e: np.ndarray, level: float) -> np.ndarray:
    """First label (1-based) at which log E reached ``level``; n + 1 if never."""
    hit = log_e >= level
    return np.where(hit.any(-1), hit.argmax(-1) + 1, log_e.shape[-1] + 1)


def simulate(h, jl, ju, truth, objective, *, alpha, delta, futility, betting="up"):
    """(reps, K) label counts and certifications without and with futility."""
    reps, K, n = h.shape
    rhos = scheme_rhos("r-autoeval+")
    kw = dict(delta=delta, rhos=rhos, betting=betting, horizon=n)
    t_cert = first_hit(log_evalue_paths(h, jl, ju, alpha=alpha, **kw), np.log(K / delta))
    mirrored = log_evalue_paths(1 - h, 1 - jl, 1 - ju, alpha=1 - alpha, **{**kw, "delta": futility})
    t_fut = first_hit(mirrored, np.log(1 / futility))
    base_cert = t_cert <= n
    fut_cert = base_cert & (t_cert <= t_fut)  # certification is checked before futility
    base_labels = np.minimum(t_cert, n)
    fut_labels = np.minimum(np.minimum(t_cert, t_fut), n)
    bad = truth > alpha

    def selection(cert):
        masked = np.where(cert, objective[None, :], np.inf)
        return np.where(cert.any(1), masked.argmin(1), -1)

    good = ~bad
    return {
        "labels_failing": (base_labels[:, bad].sum(), fut_labels[:, bad].sum()),
        "labels_all": (base_labels.sum(), fut_labels.sum()),
        "fwer": ((base_cert & bad).any(1).mean(), (fut_cert & bad).any(1).mean()),
        "power_lost": ((base_cert & ~fut_cert)[:, good].sum() / max(1, base_cert[:, good].sum())),
        "good_stopped": ((t_fut <= np.minimum(t_cert, n))[:, good].mean() if good.any() else 0.0),
        "selection_changed": (selection(base_cert) != selection(fut_cert)).mean(),
        "K": K, "failing": int(bad.sum()),
    }


def table_case(names, reps, seed, futility):
    cfg = load_config(ROOT / "examples" / "prompts.yaml", [] if names else ["candidates=null"])
    data = load_job_data(cfg)
    t = data.table
    n, r = cfg.budget.n, cfg.budget.r
    rng = np.random.default_rng(seed)
    orders = np.argsort(rng.random((reps, t.items.size)), axis=1)[:, : n * (1 + r)]
    h = t.human[:, orders[:, :n]].transpose(1, 0, 2)
    jl = t.judge[:, orders[:, :n]].transpose(1, 0, 2)
    ju = t.judge[:, orders[:, n:]].transpose(1, 0, 2)
    return simulate(h, jl, ju, t.true_risk, t.objective, alpha=cfg.alpha, delta=cfg.delta, futility=futility)


def bernoulli_case(reps, seed, futility, K=20, n=200, r=4, alpha=0.2, risks=None):
    rng = np.random.default_rng(seed)
    risks = np.linspace(0.05, 0.6, K) if risks is None else np.asarray(risks, dtype=float)
    K = risks.size
    parts = [bernoulli(rng, reps, n, r * n, p, flip=0.1) for p in risks]
    h, jl, ju = (np.stack([p[i] for p in parts], axis=1) for i in range(3))
    return simulate(h, jl, ju, risks, np.arange(K, dtype=float), alpha=alpha, delta=0.1, futility=futility)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with results_section("futility", "Futility stops (`scheduling.futility`)", write=args.docs):
        print(f"{args.reps} repetitions per case; alpha = 0.2, delta = 0.1 (Bonferroni), n = 200, r = 4, R-AutoEval+ "
              "(UP), decisions after every label, no pruning. `good candidates stopped`: the share of candidates "
              "with R <= alpha that the futility test stopped (at most delta_f by Ville's inequality); `power "
              "lost`: the share of the good candidates certified without futility that it stopped first; "
              "`selection changed`: repetitions whose selection (the certified candidate with the best objective) "
              "differs. Futility never certifies, so the family-wise error cannot grow.\n")
        print("| case | K (failing) | delta_f | labels on failing candidates: without -> with (cut) | all labels (cut) "
              "| family-wise error without / with | good candidates stopped | power lost | selection changed |")
        print("|---|---|---|---|---|---|---|---|---|")
        for futility in (0.05, 0.1):
            cases = [("prompts, 25 templates", lambda f: table_case(True, args.reps, 1, f)),
                     ("prompts, all 100 templates", lambda f: table_case(False, args.reps, 2, f)),
                     ("Bernoulli, R = 0.05..0.6", lambda f: bernoulli_case(args.reps, 3, f)),
                     ("Bernoulli near the boundary: 5 at R = 0.205, 5 at 0.12",
                      lambda f: bernoulli_case(args.reps, 4, f, risks=[0.205] * 5 + [0.12] * 5))]
            for name, run in cases:
                o = run(futility)
                lf, la, fw = o["labels_failing"], o["labels_all"], o["fwer"]
                print(f"| {name} | {o['K']} ({o['failing']}) | {futility:g} | {lf[0] / args.reps:.0f} -> "
                      f"{lf[1] / args.reps:.0f} ({1 - lf[1] / max(lf[0], 1):.0%}) | {la[0] / args.reps:.0f} -> "
                      f"{la[1] / args.reps:.0f} ({1 - la[1] / la[0]:.0%}) | {fw[0]:.3f} / {fw[1]:.3f} | "
                      f"{o['good_stopped']:.4f} | {o['power_lost']:.4f} | {o['selection_changed']:.3f} |", flush=True)
        print(f"\nWall time: {time.perf_counter() - t0:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
