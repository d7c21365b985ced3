"""Labels to reach epsilon for Seq, Cer-Eval and Oracle on S1-S3 (section 6.1) and on SEP.

n = 5000 items, d = 10, delta = 0.05, 20 replications (a fresh test set and a fresh seed
each), epsilon on a geometric grid from epsilon* = sqrt(ln(1/delta)/(2n)) to 0.1 (as in
Tables 4-5 of the paper). SEP (``make_separated``) has three well-separated groups with
means 0.1 / 0.5 / 0.9 and standard deviations 0.03 / 0.3 / 0.03. Every policy runs once to
exhaustion with the path recorded: its choices do not depend on epsilon, so the stopping
time for each epsilon is the first step whose radius is <= epsilon. Saving ratio =
1 - labels / n (Base labels all n). Policies: ``/paper`` the paper's closed-form radii,
``/betting`` the stratified betting sequence; ``cer-eval`` learns its partition (1-NN on the
features), ``oracle`` is given the true groups.

Failure: the interval at the stopping time excludes the test-set mean (what the betting
policies certify); "ever-miss" counts runs whose interval misses it at any step.

    python benchmarks/cer_eval_simulation.py [--reps 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the fixtures shared with the tests

from certsel.policies import CerEval, NearestNeighborPartition, Seq, epsilon_star, oracle
from helpers.scenarios import make_scenario, make_separated

N, DELTA = 5000, 0.05
POLICIES = ["seq/paper", "cer-eval/paper", "oracle/paper", "seq/betting", "cer-eval/betting", "oracle/betting"]
GRID = np.geomspace(float(epsilon_star(N, DELTA)), 0.1, 10)


def one(args):
    scenario, rep = args
    if scenario == "SEP":
        sc = make_separated(n=N, seed=1000 * rep + 4)
    else:
        sc = make_scenario(scenario, n=N, seed=1000 * rep + int(scenario[1]))
    mu = float(sc.losses.mean())
    out = {}
    for name in POLICIES:
        kind, radius = name.split("/")
        if kind == "seq":
            p = Seq(N, delta=DELTA, radius=radius, seed=rep)
        elif kind == "oracle":
            p = oracle(N, sc.groups, delta=DELTA, radius=radius, seed=rep)
        else:
            p = CerEval(N, NearestNeighborPartition(sc.features), delta=DELTA, radius=radius, seed=rep)
        t0 = time.perf_counter()
        path = p.run(sc.losses, record=True).path
        secs = time.perf_counter() - t0
        rad = (path[:, 3] - path[:, 2]) / 2
        miss = (path[:, 2] > mu + 1e-12) | (path[:, 3] < mu - 1e-12)
        stop = np.array([np.argmax(rad <= e) if (rad <= e).any() else N - 1 for e in GRID])
        out[name] = (1.0 - (stop + 1) / N, miss[stop], bool(miss.any()), secs, getattr(p, "n_groups", 1))
    return scenario, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    scenarios = ("S1", "S2", "S3", "SEP")
    jobs = [(s, r) for s in scenarios for r in range(args.reps)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as ex:
        results = list(ex.map(one, jobs))
    print(f"<!-- {len(jobs)} test sets, {time.perf_counter() - t0:.0f} s -->")
    for scenario in scenarios:
        rows = [o for s, o in results if s == scenario]
        print(f"\n**{scenario}**: mean labels to reach epsilon (saving ratio) over {len(rows)} test sets; failures "
              "at the stopping time over all epsilons\n")
        print("| policy | " + " | ".join(f"{e:.4f}" for e in GRID) + " | failures | ever-miss runs | final K | s/run |")
        print("|---|" + "---|" * (len(GRID) + 4))
        for name in POLICIES:
            rho = np.mean([o[name][0] for o in rows], axis=0)
            fails = int(np.sum([o[name][1].sum() for o in rows]))
            ever = int(np.sum([o[name][2] for o in rows]))
            k = np.mean([o[name][4] for o in rows])
            secs = np.mean([o[name][3] for o in rows])
            print(f"| {name} | " + " | ".join(f"{N * (1 - x):.0f} ({x:.3f})" for x in rho)
                  + f" | {fails}/{len(rows) * len(GRID)} | {ever}/{len(rows)} | {k:.1f} | {secs:.2f} |")


if __name__ == "__main__":
    main()
