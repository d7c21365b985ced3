"""The long error-rate simulations of the test suite, at the size the tests used to run them.

The tests keep smaller versions of each (fewer runs, the same data, seeds and checks; see the
"tests" column); this script runs the same simulation functions, imported from the test
modules, at full size and prints, for each case, how many runs made the error the guarantee
bounds (a certification under the null, an interval or bound that missed the risk, a wrong
decision), the measured rate with a 95% Clopper-Pearson interval, and the level it is stated
at. Groups:

* ``stratified-test``: judge-stratified testing (policies/judge_stratified.py) at mu = alpha
  exactly, 300 items all labelled, a good, an adversarial and a noise judge (delta = 0.2);
* ``cer-eval``: Seq and Cer-Eval's anytime intervals and decisions (tests/test_stratified.py):
  isolated outliers under a 1-NN partition, a partition refitted after every label, judge
  strata, an exact null pair, threshold decisions below / at / above the mean (delta = 0.1);
* ``pairs``: the sign tests of certsel.policies.comparison on AlpacaEval's claude vs
  claude-2 made an exact null (every item twice, once swapped; delta = 0.1);
* ``bounds``: the upper bound next to a certificate (policies/bounds.py) at a data-dependent
  stop (Bernoulli, R = 0.3, alpha = 0.32) for three schemes / observations and four betting
  strategies, and the judge-stratified bound on the real TriviaQA configuration 34;
* ``agreement``: not an error rate but an exact check (stated level 0): on 50 seeded orders of
  TriviaQA configuration 35, for four policies and four strategies, the bound is <= alpha
  exactly when the recorded evidence passed the level (delta and delta/48), and recomputing
  it without the recorded decision gives the same bound;
* ``validity``: R-Eval / R-AutoEval / R-AutoEval+ under the null on Bernoulli data and on
  TriviaQA resamples, their intervals' anytime coverage, and the split observation at the
  boundary with four judges and on TriviaQA resamples with the best and the bad judge.

The selected candidate's bounds after a selection (tests/test_procedures.py) have their own
script, benchmarks/selection_bounds.py.

    python benchmarks/validity_simulations.py [--scale 1.0] [--workers 2] [--only GROUP ...]

``--scale`` multiplies every case's runs (0.5 halves them); ``--workers`` runs cases in that
many processes. At full size it takes about 4 minutes on two cores with ``--workers 2``; the
table is in docs/statistics.md ("Error-rate simulations kept out of the test suite").
"""

from __future__ import annotations

import argparse
import functools
import importlib
import pathlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from scipy import stats

TESTS = pathlib.Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))  # the simulation functions live in the test modules


def cp(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    a = (1 - conf) / 2
    lo = 0.0 if k == 0 else stats.beta.ppf(a, k, n - k + 1)
    hi = 1.0 if k == n else stats.beta.ppf(1 - a, k + 1, n - k)
    return lo, hi


@functools.lru_cache(maxsize=None)
def _fixture(name: str):
    if name == "alpaca":
        from helpers.alpacaeval import load_preference_table

        return load_preference_table()
    from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

    judge = {"trivia_best": "loss_judge_best", "trivia_bad": "loss_judge_bad"}[name]
    return load_loss_table(DEFAULT_TABLE, judge=judge)


def _call(module: str, func: str, *args, fixtures=(), **kw):
    fn = getattr(importlib.import_module(module), func)
    return fn(*[_fixture(f) for f in fixtures], *args, **kw)


# --------------------------------------------------------------------------- the cases
# Each task: (group, runs at full size, runs the test keeps, function) where the function
# takes the number of runs and returns [(case, errors, stated level), ...].

def _strat_test(judge, runs):
    return [(f"mu = alpha, {judge} judge", _call("test_judge_stratified", "boundary_certifications", judge, runs), 0.2)]


def _outliers(runs):
    return [("isolated outliers, 1-NN partition: interval ever missed", _call("test_stratified", "outliers_misses",
                                                                            runs), 0.1)]


def _refit(runs):
    return [("partition refitted after every label: interval ever missed", _call("test_stratified", "refit_misses",
                                                                               runs), 0.1)]


def _strata(runs):
    return [("judge-score strata: interval ever missed", _call("test_stratified", "judge_strata_misses", runs), 0.1)]


def _null_pair(runs):
    out = _call("test_stratified", "exact_null_pair_errors", runs)
    return [(f"exact null pair: {what} {'ever missed' if 'interval' in what else 'certified'}", k, lv)
            for what, (k, lv) in out.items()]


def _threshold(side, runs):
    wrong, decided = _call("test_stratified", "threshold_errors", side, runs)
    return [(f"threshold {side} the mean: wrong decision ({decided} decided)", wrong, 0.1)]


def _pairs(method, runs):
    return [(f"exact null pair, {method}: winner certified",
             _call("test_comparison", "null_pair_winners", method, runs, fixtures=("alpaca",)), 0.1)]


def _strategy(name):
    import test_bounds

    return test_bounds.STRATEGIES[test_bounds.IDS.index(name)]  # "user": the tests' FollowTheSign


def _stop(scheme, observation, name, runs):
    import numpy as np

    _, _, _, hit, U = _call("test_bounds", "stopped_bounds", scheme, observation, _strategy(name), runs)
    return [(f"stopped at E >= 1/delta, {scheme} ({observation}), {name}: U < R (stopped in {hit.any(-1).mean():.0%})",
             int(np.sum(U < 0.3)), 0.1)]


def _judge_bound(name, runs):
    return [(f"judge-stratified bound, TriviaQA k = 34, {name}: U < R",
             _call("test_bounds", "judge_stratified_bound_misses", _strategy(name), runs, fixtures=("trivia_best",)),
             0.1)]


def _agreement(policy, name, runs):
    c = _call("test_bounds", "agreement_counts", policy, _strategy(name), runs, fixtures=("trivia_best",))
    wrong = c["certified_above"] + c["uncertified_at_or_below"] + c["unseeded"]
    return [(f"bound <= alpha exactly when certified, TriviaQA k = 35, {policy}, {name} "
             f"({c['certified']} passed / {c['uncertified']} not, of {2 * runs} order-levels): disagreements",
             wrong, 0)]


def _type_one(scheme, betting, runs):
    return [(f"type I, Bernoulli R = 0.105 > alpha = 0.1, {scheme}, {betting}",
             _call("test_validity", "type_one_bernoulli", scheme, betting, runs), 0.1)]


def _type_one_real(scheme, betting, runs):
    return [(f"type I, TriviaQA k = 36 at alpha = R - 0.002, {scheme}, {betting}",
             _call("test_validity", "type_one_real", scheme, betting, runs, fixtures=("trivia_best",)), 0.1)]


def _coverage(scheme, betting, runs):
    missed, _ = _call("test_validity", "coverage_runs", scheme, betting, runs)
    return [(f"anytime coverage, Bernoulli R = 0.3, {scheme}, {betting}: ever excluded", int(missed.sum()), 0.1)]


def _coverage_real(runs):
    out = _call("test_validity", "coverage_real", runs, fixtures=("trivia_best",))
    return [(f"anytime coverage, TriviaQA k = 33, r-autoeval+, {b}: ever excluded", k, 0.1) for b, k in out.items()]


def _split_boundary(scheme, betting, runs):
    out = _call("test_validity", "split_boundary_certified", scheme, betting, runs)
    return [(f"split at R = alpha, {scheme}, {betting}, {judge} judge", k, 0.1) for judge, k in out.items()]


def _split_real(judge, betting, runs):
    return [(f"split, TriviaQA k = 36 at alpha = R - 0.002, {judge} judge, {betting}",
             _call("test_validity", "split_real", betting, runs, fixtures=(f"trivia_{judge}",)), 0.1)]


def tasks():
    import test_bounds
    import test_validity

    out = []
    for judge in ("good", "adversarial", "noise"):
        out.append(("stratified-test", 300, 100, functools.partial(_strat_test, judge)))
    out += [("cer-eval", 400, 200, _outliers), ("cer-eval", 400, 200, _refit), ("cer-eval", 400, 200, _strata),
            ("cer-eval", 400, 200, _null_pair)]
    for side in ("below", "at", "above"):
        out.append(("cer-eval", 400, 200, functools.partial(_threshold, side)))
    for method in ("betting", "seq"):
        out.append(("pairs", 1000, 250, functools.partial(_pairs, method)))
    for scheme, observation in (("r-eval", "paper"), ("r-autoeval+", "paper"), ("r-autoeval+", "split")):
        for name in test_bounds.IDS:
            out.append(("bounds", 600, 200, functools.partial(_stop, scheme, observation, name)))
    for name in test_bounds.IDS:
        out.append(("bounds", 200, 150, functools.partial(_judge_bound, name)))
    for policy in ("r-eval", "r-autoeval", "r-autoeval+", "judge-stratified"):
        for name in test_bounds.IDS:
            out.append(("agreement", 50, 25, functools.partial(_agreement, policy, name)))
    for scheme in test_validity.SCHEMES:
        for betting in test_validity.BETTINGS:
            out.append(("validity", 2000, 500, functools.partial(_type_one, scheme, betting)))
            out.append(("validity", 2000, 500, functools.partial(_type_one_real, scheme, betting)))
            out.append(("validity", 2000, 500, functools.partial(_coverage, scheme, betting)))
    out.append(("validity", 2000, 500, _coverage_real))
    for scheme in ("r-autoeval", "r-autoeval+"):
        for betting in test_validity.BETTINGS:
            out.append(("validity", 1000, 300, functools.partial(_split_boundary, scheme, betting)))
    for judge in ("best", "bad"):
        for betting in test_validity.BETTINGS:
            out.append(("validity", 2000, 500, functools.partial(_split_real, judge, betting)))
    return out


def _run(i, fn, runs):
    t0 = time.perf_counter()
    rows = fn(runs)
    return i, rows, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every case's number of runs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", nargs="*",
                    choices=["stratified-test", "cer-eval", "pairs", "bounds", "agreement", "validity"])
    args = ap.parse_args()
    todo = [t for t in tasks() if not args.only or t[0] in args.only]
    sizes = [max(1, round(full * args.scale)) for _, full, _, _ in todo]
    t0 = time.perf_counter()
    results = {}
    with ProcessPoolExecutor(args.workers) as pool:
        # the longest first: the cer-eval and stratified-test loops, then the bounds
        rank = {"cer-eval": 0, "stratified-test": 1, "bounds": 2, "agreement": 3, "pairs": 4, "validity": 5}
        order = sorted(range(len(todo)), key=lambda i: rank[todo[i][0]])
        futures = [pool.submit(_run, i, todo[i][3], sizes[i]) for i in order]
        for f in futures:
            i, rows, secs = f.result()
            results[i] = (rows, secs)
            print(f"  done: {todo[i][0]} {rows[0][0]} ({secs:.0f} s)", file=sys.stderr, flush=True)
    print(f"{len(todo)} simulations, scale {args.scale:g}, {args.workers} workers, "
          f"{time.perf_counter() - t0:.0f} s in all\n")
    print("| group | case | runs (tests keep) | stated level | errors | measured rate (95% CP) | seconds |")
    print("|---|---|---|---|---|---|---|")
    for i, (group, _, keep, _) in enumerate(todo):
        rows, secs = results[i]
        for j, (case, k, level) in enumerate(rows):
            lo, hi = cp(k, sizes[i])
            flag = " **above**" if lo > level else ""  # the whole 95% interval above the stated level
            seconds = f"{secs:.0f}" if j == 0 else ""  # one simulation can give several rows
            print(f"| {group} | {case} | {sizes[i]} ({keep}) | {level:g} | {k} | {k / sizes[i]:.4f} "
                  f"[{lo:.4f}, {hi:.4f}]{flag} | {seconds} |")


if __name__ == "__main__":
    main()
