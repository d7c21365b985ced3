"""Labels to certify against the information-theoretic limit, on the TriviaQA frontier.

For each of the MX configurations whose drop against full precision is between 0.037 and
0.058 (the ones the quantization example certifies last), at alpha = delta = 0.1, every
policy runs on ``--orders`` random orders of the 9,960 items (drawn without replacement, r = 3
judge-only labels per human label for R-AutoEval(+), the best judge) and reports the mean
number of human labels until its e-value first reaches 1/delta, the limit and their ratio:

* R-Eval against log(1/delta) / KL_inf of the human losses (range [0, 1]);
* R-AutoEval+ and judge-stratified against the prediction-powered floor: the same bound on
  h - rho j + rho mu_J with the judge's mean known and the best rho
  (:func:`certsel.policies.limits.ppi_limit`);
* R-AutoEval+ (split) also against the split observation's oracle with r judge-only labels
  (:func:`certsel.policies.limits.split_limit`).

The mean ratios are the ``efficiency`` of each policy kind (``policies/kinds.py``): how far each
kind is from its limit (``certsel plan`` forecasts a job by running it on simulated tables instead).

The planned budget (``horizon``, which sizes the exact UP prior and WSR's bet) is ``--horizon``
human labels, so that nearly every order certifies; "cert" is the fraction that did (an
order that did not counts its whole horizon). The last rows give each policy's mean ratio.

    python benchmarks/limit.py [--orders 500] [--horizon 600] [--judge best] [--docs]

With ``--docs`` (and the default policies) what it prints becomes the section "limit" of docs/results.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

from certsel.orchestrator.audit.stratified import run_to_budget
from certsel.policies import certify, get_strategy
from certsel.policies.limits import label_limit, ppi_limit, split_limit
from certsel.policies.judge_stratified import DEFAULT_RHOS as STRATIFIED_RHOS, StratifiedTest
from certsel.workers.replay import load_loss_table

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from results_doc import results_section  # noqa: E402

ALPHA = DELTA = 0.1
R = 3


def frontier(table) -> list[int]:
    risks = table.true_risk
    return [k for k in np.argsort(risks) if 0.037 <= round(float(risks[k]), 3) <= 0.058]


def orders(n_items: int, reps: int, m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((reps, n_items)), axis=1)[:, :m]


def testing(h, j, order, horizon, *, rhos, betting, observation):
    """Labels to the first crossing of R-Eval / R-AutoEval+ on each order (horizon if none)."""
    H = h[order[:, :horizon]]
    if np.all(np.asarray(rhos) == 0):
        res = certify(H, alpha=ALPHA, delta=DELTA, rhos=[0.0], betting=betting, horizon=horizon)
    else:
        res = certify(H, j[order[:, :horizon]], j[order[:, horizon:horizon * (1 + R)]], alpha=ALPHA, delta=DELTA,
                      rhos=rhos, betting=betting, horizon=horizon, observation=observation)
    return np.where(res.certified, res.labels_to_certify, horizon), res.certified


def stratified(h, j, reps, horizon, *, rhos, betting, seed):
    labels, cert = np.empty(reps), np.empty(reps, dtype=bool)
    for r in range(reps):
        test = StratifiedTest(j, alpha=ALPHA, delta=DELTA, horizon=horizon, betting=betting, seed=seed + r, rhos=rhos)
        labels[r], _ = run_to_budget(test, h, 25, -np.log(DELTA), stop_at_crossing=True)
        cert[r] = test.certified
    return labels, cert


RHOS = np.linspace(0, 1, 10)
POLICIES = {  # name: (kind, rhos or None, betting, observation)
    "R-Eval (up)": ("testing", [0.0], "up", "paper"),
    "R-AutoEval+ (up, paper)": ("testing", RHOS, "up", "paper"),
    "R-AutoEval+ (up, split; the default)": ("testing", RHOS, "up", "split"),
    "R-AutoEval+ (wsr, split)": ("testing", RHOS, "wsr", "split"),
    "R-AutoEval+ (ons, split)": ("testing", RHOS, "ons", "split"),
    "judge-stratified (up, controls in full)": ("stratified", [1.0], "up", None),
    "judge-stratified (up, control scales 0, 1/2, 1; the default)": ("stratified", STRATIFIED_RHOS, "up", None),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=500)
    ap.add_argument("--horizon", type=int, default=600)
    ap.add_argument("--judge", default="best")
    ap.add_argument("--policies", nargs="*", default=list(POLICIES))
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args(argv)
    with results_section("limit", "Labels against the limit, and certsel plan's efficiencies", write=args.docs):
        return run(args)


def run(args) -> int:
    t0 = time.perf_counter()
    table = load_loss_table(judge=f"loss_judge_{args.judge}")
    ks = frontier(table)
    order = orders(table.human.shape[1], args.orders, args.horizon * (1 + R), seed=0)
    print(f"alpha = delta = {ALPHA}, judge {args.judge}, {args.orders} orders, horizon {args.horizon} human labels, "
          f"r = {R}: mean human labels to the first crossing of 1/delta (cert: fraction certified within the "
          "horizon), the limit, and the ratio\n")
    print("| candidate | R | policy | labels (cert) | limit | ratio | ratio to the split oracle |")
    print("|---|---|---|---|---|---|---|")
    ratios: dict = {p: [] for p in args.policies}
    split_ratios: dict = {p: [] for p in args.policies}
    for k in ks:
        h, j = table.human[k], table.judge[k]
        reval_limit = label_limit(h, ALPHA, DELTA)
        floor = ppi_limit(h, j, ALPHA, DELTA)
        oracle = split_limit(h, j, ALPHA, DELTA, r=R, rhos=RHOS)
        for name in args.policies:
            kind, rhos, betting, observation = POLICIES[name]
            strategy = get_strategy(betting)
            if kind == "testing":
                labels, cert = testing(h, j, order, args.horizon, rhos=rhos, betting=strategy, observation=observation)
            else:
                labels, cert = stratified(h, j, args.orders, args.horizon, rhos=rhos, betting=strategy,
                                          seed=1000 * int(k))
            limit = reval_limit if kind == "testing" and np.all(np.asarray(rhos) == 0) else floor.labels
            ratios[name].append(labels.mean() / limit)
            split = observation == "split"
            if split:
                split_ratios[name].append(labels.mean() / oracle.labels)
            print(f"| {table.candidates[k]} | {h.mean():.4f} | {name} | {labels.mean():.1f} ({cert.mean():.3f}) | "
                  f"{limit:.1f} | {labels.mean() / limit:.2f} | "
                  f"{f'{labels.mean() / oracle.labels:.2f}' if split else ''} |", flush=True)
    print("\n| policy | mean ratio over the frontier | to the split oracle |")
    print("|---|---|---|")
    for name, r in ratios.items():
        print(f"| {name} | {np.mean(r):.2f} | {f'{np.mean(split_ratios[name]):.2f}' if split_ratios[name] else ''} |")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
