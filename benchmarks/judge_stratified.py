"""Judge-stratified human labelling against R-AutoEval+ and R-Eval on the TriviaQA frontier.

For the MX configurations whose drop against full precision is between 0.037 and 0.058
(the ones the quantization example's fixed sequence certifies last), at alpha = delta = 0.1
with a budget of n = 300 human labels, every scheme runs on its own random item orders:

* R-Eval and R-AutoEval+ (UP betting, r = 3 judge-only labels per human label): the
  product's testing policies, on the first n items of a random order;
* judge-stratified (``policy.kind: judge-stratified``, UP betting): the judge's loss on
  every item first, then human labels drawn by judge strata
  (:class:`certsel.policies.judge_stratified.StratifiedTest`).

Reported per candidate and judge: human labels spent until certification (n when never
certified), the rate of certification within n, and the saving against R-AutoEval+.
Validity: each candidate's own table mean taken as alpha (the least favourable null,
mu = alpha), the rate at which each scheme certifies (must be <= delta), also with an
adversarial judge (1 - the human loss) and a judge of pure noise.

    python benchmarks/judge_stratified.py [--reps 1000]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]

from certsel.policies import certify  # noqa: E402
from certsel.orchestrator.audit.stratified import run_to_budget  # noqa: E402
from certsel.policies.judge_stratified import StratifiedTest  # noqa: E402

DATA = ROOT / "examples" / "data" / "triviaqa_llama31_8b_mx.parquet"
JUDGES = ("best", "med", "bad")
ALPHA, DELTA, N_LABELS, R, BATCH = 0.1, 0.1, 300, 3, 25


def load():
    t = pq.read_table(DATA, columns=["candidate", "item", "loss_human", "loss_judge_best", "loss_judge_med",
                                     "loss_judge_bad"]).to_pandas().sort_values(["candidate", "item"])
    risks = t.groupby("candidate").loss_human.mean()
    names = [c for c, r in risks.sort_values().items() if 0.037 <= round(r, 3) <= 0.058]
    return {c: t[t.candidate == c] for c in names}


def spent(certified, first, n=N_LABELS):
    return np.where(certified, first, n)


def baseline(h, j, reps, rhos, seed):
    """Labels to certify for R-Eval (rhos [0]) or R-AutoEval+ on ``reps`` random orders."""
    rng = np.random.default_rng(seed)
    N = h.size
    H, JL, JU = np.empty((reps, N_LABELS)), np.empty((reps, N_LABELS)), np.empty((reps, R * N_LABELS))
    for r in range(reps):
        p = rng.permutation(N)
        H[r], JL[r], JU[r] = h[p[:N_LABELS]], j[p[:N_LABELS]], j[p[N_LABELS:(R + 1) * N_LABELS]]
    kw = dict(alpha=ALPHA, delta=DELTA, horizon=N_LABELS)
    res = certify(H, alpha=ALPHA, delta=DELTA, rhos=[0.0], horizon=N_LABELS) if rhos == "r-eval" else \
        certify(H, JL, JU, **kw)
    return spent(res.certified, res.labels_to_certify), res.certified


def stratified(h, j, reps, seed, alpha=ALPHA):
    labels, cert = np.empty(reps), np.empty(reps, dtype=bool)
    for r in range(reps):
        test = StratifiedTest(j, alpha=alpha, delta=DELTA, horizon=N_LABELS, seed=seed + r)
        labels[r], _ = run_to_budget(test, h, BATCH, np.log(1 / DELTA), stop_at_crossing=True)
        cert[r] = test.certified
    return labels, cert


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tables = load()
    print(f"alpha = delta = {ALPHA}, n = {N_LABELS} human labels, r = {R}, batch {BATCH}, {args.reps} runs per cell; "
          "labels: mean human labels until certified (n if never) ± s.e.; cert: certified within n\n")
    print("| candidate | R | judge | R-Eval labels (cert) | R-AutoEval+ labels (cert) | judge-stratified labels (cert) "
          "| saved vs R-AutoEval+ | saved vs R-Eval |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda x, c: f"{x.mean():.1f} ± {x.std(ddof=1) / np.sqrt(x.size):.1f} ({c.mean():.3f})"  # noqa: E731
    for name, d in tables.items():
        h = d.loss_human.to_numpy(np.float64)
        ev, ec = baseline(h, h, args.reps, "r-eval", 0)
        for judge in JUDGES:
            j = d[f"loss_judge_{judge}"].to_numpy(np.float64)
            ap_, apc = baseline(h, j, args.reps, "r-autoeval+", 0)
            st, stc = stratified(h, j, args.reps, 10_000)
            print(f"| {name} | {h.mean():.4f} | {judge} | {fmt(ev, ec)} | {fmt(ap_, apc)} | {fmt(st, stc)} | "
                  f"{1 - st.mean() / ap_.mean():.1%} | {1 - st.mean() / ev.mean():.1%} |", flush=True)
    print("\nValidity: alpha = the candidate's own mean (mu = alpha, the least favourable null); rate of "
          f"certification within n (must be <= delta = {DELTA}), {args.reps} runs per cell\n")
    print("| candidate | judge | R-AutoEval+ | judge-stratified |")
    print("|---|---|---|---|")
    worst = 0.0
    for name, d in tables.items():
        h = d.loss_human.to_numpy(np.float64)
        mu = float(h.mean())
        rng = np.random.default_rng(1)
        judges = {**{k: d[f"loss_judge_{k}"].to_numpy(np.float64) for k in JUDGES},
                  "adversarial (1 - human)": 1.0 - h, "noise": rng.random(h.size)}
        for judge, j in judges.items():
            H = np.empty((args.reps, N_LABELS)); JL = np.empty_like(H); JU = np.empty((args.reps, R * N_LABELS))
            for r in range(args.reps):
                p = rng.permutation(h.size)
                H[r], JL[r], JU[r] = h[p[:N_LABELS]], j[p[:N_LABELS]], j[p[N_LABELS:(R + 1) * N_LABELS]]
            a = certify(H, JL, JU, alpha=mu, delta=DELTA, horizon=N_LABELS).certified.mean()
            _, sc = stratified(h, j, args.reps, 50_000, alpha=mu)
            worst = max(worst, sc.mean())
            print(f"| {name} | {judge} | {a:.3f} | {sc.mean():.3f} |", flush=True)
    print(f"\nworst judge-stratified rate {worst:.3f} (delta {DELTA}); {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
