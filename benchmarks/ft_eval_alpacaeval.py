"""FT-Eval audit of Active Bayesian Assessment vs random sampling on AlpacaEval (ft-eval §6).

For each model: 100 runs of each estimator at labelling budgets 1..100, ground truth = the
model's mean loss over all 805 items. Reports, at budgets 20/60/80, bias, standard
deviation, RMSE and the two-sided t-test p-value, then Algorithm 1's margin delta* and how
many budgets each estimator passes FT-Eval (TOST with the dynamic tolerance) at delta*.
Also: certified pairwise comparisons and the certified ranking of all 12 models.

    python benchmarks/ft_eval_alpacaeval.py
"""

from __future__ import annotations

import numpy as np

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the fixtures shared with the tests

from helpers.active_testing import active_bayesian_assessment, random_sampling_estimates, silhouette_clusters
from certsel.policies.ft_eval import bias_variance, select_margin, t_test
from helpers.alpacaeval import load_preference_table
from helpers.sign_tests import paired_losses, sign_test_paths

MODELS = ["FuseChat-Llama-3.2-1B-Instruct", "claude", "gpt-3.5-turbo-1106_verbose", "gpt4_gamed"]


def ft_eval_table(t):
    groups, k = silhouette_clusters(t.features)
    print(f"k-means groups chosen by silhouette: k = {k}\n")
    print("| model | budget | ABA bias | ABA sd | ABA RMSE | ABA t-test p | RS bias | RS sd | RS RMSE | RS t-test p |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    margins = []
    for name in MODELS:
        z = t.losses[t.models.index(name)]
        truth = z.mean()
        aba = active_bayesian_assessment(z, t.features, 100, reps=100, seed=0, groups=groups)
        rs = random_sampling_estimates(z, 100, reps=100, seed=1)
        for b in (20, 60, 80):
            ba, br = bias_variance(aba[:, b - 1], truth), bias_variance(rs[:, b - 1], truth)
            pa, pr = t_test(aba[:, b - 1], truth).p_value, t_test(rs[:, b - 1], truth).p_value
            print(f"| {name} | {b} | {ba.bias:+.4f} | {np.sqrt(ba.variance):.4f} | {ba.rmse:.4f} | {pa:.2g} "
                  f"| {br.bias:+.4f} | {np.sqrt(br.variance):.4f} | {br.rmse:.4f} | {pr:.2g} |")
        ms = select_margin(aba, rs, truth)
        pass_a = ms.passes(aba, truth).passed if ms.margin else np.zeros(100, bool)
        pass_r = ms.passes(rs, truth).passed if ms.margin else np.zeros(100, bool)
        margins.append((name, ms.margin, int(pass_a.sum()), int(pass_r.sum()),
                        float(np.abs(bias_variance(aba[:, 49:], truth).bias).min())))
    print("\n| model | delta* (Algorithm 1) | budgets ABA passes | budgets RS passes | min abs ABA bias, budgets 50-100 |")
    print("|---|---|---|---|---|")
    for name, m, a, r, b in margins:
        print(f"| {name} | {m if m is None else f'{m:.4f}'} | {a}/100 | {r}/100 | {b:.4f} |")


def pairwise_table(t, shuffles=200, delta=0.05):
    print(f"\nPairwise sign certification, delta = {delta}, {shuffles} shuffles: mean items used (correct sign rate)\n")
    print("| A | B | gap | betting (UP) | Seq betting radius | Seq paper radius |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for a, b in [("FuseChat-Llama-3.2-1B-Instruct", "claude"), ("claude", "gpt4_gamed"),
                 ("FuseChat-Llama-3.2-1B-Instruct", "gpt4_gamed"), ("gpt-3.5-turbo-1106_verbose", "vicuna-13b")]:
        za, zb = t.losses[t.models.index(a)], t.losses[t.models.index(b)]
        u = paired_losses(za, zb)
        perms = np.argsort(rng.random((shuffles, u.size)), axis=1)
        truth = np.sign(zb.mean() - za.mean())
        cells = []
        for method, radius in (("betting", "betting"), ("seq", "betting"), ("seq", "paper")):
            r = sign_test_paths(u[perms], delta=delta, method=method, radius=radius)
            cells.append(f"{r.n_used.mean():.0f} ({np.mean(r.winner == truth):.2f})")
        print(f"| {a} | {b} | {zb.mean() - za.mean():+.3f} | " + " | ".join(cells) + " |")
    # the certified ranking of all 12 models: the engine's pairwise job (examples/alpacaeval_ranking.yaml) with
    # Seq (betting radius) on every pair until its sign is certified
    import certsel

    job = pathlib.Path(__file__).resolve().parents[1] / "examples" / "alpacaeval_ranking.yaml"
    cert = certsel.run(str(job), track=False, fresh=True, delta=delta, policy={"kind": "seq", "radius": "betting"},
                       pairwise={"goal": "all"}).selection
    rk, lab = cert.ranking, cert.labels
    print(f"\nCertified ranking of {len(rk.order)} models (the pairwise job, Seq per pair, goal all, family-wise "
          f"delta = {delta}): {rk.pairs_certified} of {rk.pairs} pair orders certified, {lab.spent.human} of "
          f"{lab.full_budget.human} model-item evaluations used ({1 - lab.spent.human / lab.full_budget.human:.1%} "
          "saved).\n")
    print("| rank | model | mean loss | certified better than | certified worse than |")
    print("|---|---|---|---|---|")
    for pos, m in enumerate(rk.order, 1):
        worse = sum(m in b for b in rk.better.values())
        print(f"| {pos} | {m} | {t.losses[t.models.index(m)].mean():.3f} | {len(rk.better[m])} | {worse} |")


def main():
    t = load_preference_table()
    ft_eval_table(t)
    pairwise_table(t)


if __name__ == "__main__":
    main()
