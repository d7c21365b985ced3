"""Reproduce the quantization experiment of R-AutoEval+ (Fig. 4(a)) on the bundled table.

Prints Markdown tables: (1) FST selection of the lightest MX configuration with at most
alpha = 10% performance drop, mean selected average bitwidth over replications, for every
judge, betting and scheme: the paper's settings (its observation, eq. 10, with UP under eq.
19's Beta(1/2, 1/2) prior, or WSR) and certsel's defaults (the split observation, UP's default
prior); (2) human labels needed to certify the frontier candidates, in both settings. Used
for docs/results.md.

    python benchmarks/reproduce_quantization.py [--reps 200]
"""

from __future__ import annotations

import argparse

import numpy as np

from certsel.orchestrator.engine.replicated import replicated_selection
from certsel.policies import UP, certify, scheme_rhos
from certsel.workers.replay import load_loss_table, sample_replications

SCHEMES = ("r-eval", "r-autoeval", "r-autoeval+")
JUDGES = {"best (Llama-3.3-70B BF16)": "loss_judge_best", "medium (MX6)": "loss_judge_med", "bad (MX4)": "loss_judge_bad"}
# (betting, observation): the paper's two settings, then certsel's defaults
SETTINGS = {"up, paper": (UP(prior="exact"), "paper"), "wsr, paper": ("wsr", "paper"),
            "up, certsel defaults": ("up", "split")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    print(f"### FST selection, alpha = delta = 0.1, r = 3, {args.reps} replications\n")
    print("Mean selected average bitwidth (± standard error; lower is better), and the fraction of")
    print("replications whose selected model has true risk above alpha (must be <= delta).\n")
    print("| judge | betting | n | " + " | ".join(SCHEMES) + " | violations (max over schemes) |")
    print("|---|---|---|" + "---|" * len(SCHEMES) + "---|")
    for jname, jcol in JUDGES.items():
        table = load_loss_table(judge=jcol)
        for setting, (betting, observation) in SETTINGS.items():
            for n in (100, 200, 300):
                cells, viol = [], 0.0
                for s in SCHEMES:
                    o = replicated_selection(table, n=n, r=3, reps=args.reps, seed=args.seed, scheme=s, betting=betting,
                                             observation=observation)
                    b = o.selected_objective
                    cells.append(f"{np.nanmean(b):.3f} ± {np.nanstd(b) / np.sqrt(b.size):.3f}")
                    viol = max(viol, float(np.mean(o.selected_risk > 0.1)))
                print(f"| {jname} | {setting} | {n} | " + " | ".join(cells) + f" | {viol:.3f} |", flush=True)

    print(f"\n### Human labels to certify R <= 0.1 (UP, r = 3, budget 600, {args.reps} replications)\n")
    table = load_loss_table(judge="loss_judge_best")
    ranks = list(range(28, 36))
    print("Mean labels until E >= 1/delta (601 = not certified within the budget).\n")
    print("| judge | setting | scheme | " + " | ".join(f"{table.candidates[k]} (R={table.true_risk[k]:.3f})"
                                                  for k in ranks) + " |")
    print("|---|---|---|" + "---|" * len(ranks))
    for jname, jcol in JUDGES.items():
        table = load_loss_table(judge=jcol)
        h, jl, ju = sample_replications(table, args.reps, 600, 1800, seed=args.seed)
        sub = (slice(None), slice(ranks[0], ranks[-1] + 1))
        for setting in ("up, paper", "up, certsel defaults"):
            betting, observation = SETTINGS[setting]
            for s in SCHEMES:
                res = certify(h[sub], jl[sub], ju[sub], alpha=0.1, delta=0.1, rhos=scheme_rhos(s), betting=betting,
                              observation=observation)
                lab = np.where(res.certified, res.labels_to_certify, 601).mean(axis=0)
                print(f"| {jname} | {setting} | {s} | " + " | ".join(f"{v:.0f}" for v in lab) + " |", flush=True)


if __name__ == "__main__":
    main()
