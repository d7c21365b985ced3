"""Release series: regression gates of >= 20 successive releases against the last shipped one, the baseline's labels
reused from the label store.

Each stream starts from a baseline drawn from a bundled table (the quantization configs' TriviaQA scores, or the
prompt templates' sentiment scores) and gates ``--releases`` releases in order. Release k is drawn, relative to the
current baseline's true score on the table, as a regression beyond the margin, a regression within it or an
improvement (a third each, where the table has one), and gated as ``certsel gate --baseline --margin M --series``
does: R-Eval's test (the product's policy functions, betting "up") on the paired losses (l - l_base + 1) / 2 at
(1 + M) / 2, its fail test on the mirrored losses, both at the release's series level delta / (k (k + 1)), on at most
``--budget`` items of one i.i.d. item sequence per stream (every gate of a series asks its items in the same seeded
order). A release that passes ships and is the next baseline.

Labels: a gate buys the candidate's labels on the items its test used, and the baseline's on those of them the store
does not hold (the store holds a model's labels on the prefix of the order any earlier gate used, as candidate or as
baseline). Gating each release from scratch buys both sides. The point test is the fixed rule on 1,000 items, mean
score >= the baseline's - M, on two independent draws of items (its flip rate), run on the same releases.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import beta

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import results_section  # noqa: E402

from certsel.orchestrator.engine.series import release_level  # noqa: E402
from certsel.policies.autoeval import log_evalue_paths  # noqa: E402
from certsel.policies.regression import Regression  # noqa: E402

DATA = ROOT / "examples" / "data"
TABLES = {"quantization (TriviaQA, 48 configs)": ("triviaqa_llama31_8b_mx.parquet", "score_human", False),
          "prompt templates (sentiment, 100)": ("prompts_sentiment.parquet", "loss_human", True)}


def scores(file: str, column: str, is_loss: bool) -> np.ndarray:
    """Models x items scores in [0, 1]."""
    t = pq.read_table(DATA / file, columns=["candidate", "item", column]).to_pandas()
    wide = t.pivot(index="candidate", columns="item", values=column).to_numpy(dtype=np.float64)
    return 1.0 - wide if is_loss else wide


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = beta.ppf(a, k, n - k + 1) if k else 0.0
    hi = beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def first_crossing(log_e: np.ndarray, threshold: float) -> np.ndarray:
    """The 1-based index of each row's first log e-value >= threshold (n + 1: never)."""
    hit = log_e >= threshold
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, log_e.shape[1] + 1)


def gate_step(u: np.ndarray, claim: Regression, level: float, n: int):
    """(outcome per stream: +1 pass, -1 fail, 0 undecided; items used) of the gate on paired losses ``u`` (S, n)."""
    kw = dict(delta=level, rhos=(0.0,), betting="up", horizon=n, observation="split")
    passes = first_crossing(log_evalue_paths(u, alpha=claim.alpha, **kw), np.log(1 / level))
    fails = first_crossing(log_evalue_paths(1.0 - u, alpha=1.0 - claim.alpha, **kw), np.log(1 / level))
    stop = np.minimum(passes, fails)
    outcome = np.where(stop > n, 0, np.where(passes <= fails, 1, -1))
    return outcome, np.minimum(stop, n)


def run_table(s: np.ndarray, args, rng):
    M, n, S, R = args.margin, args.budget, args.streams, args.releases
    claim = Regression(M)
    K, I = s.shape
    mean = s.mean(axis=1)
    items = rng.integers(0, I, size=(S, n))  # each stream's i.i.d. item sequence, shared by its gates
    point = [rng.integers(0, I, size=(S, 1000)) for _ in range(2)]  # the point test's two draws
    base = rng.integers(0, K, size=S)
    stored = np.zeros((S, K), dtype=np.int64)  # labels the store holds per stream and model (a prefix of the order)
    false_pass = np.zeros(S, dtype=bool)
    false_fail = np.zeros(S, dtype=bool)
    point_false = np.zeros(S, dtype=bool)
    flips, bought, scratch, used = [], 0, 0, []
    kinds = {"beyond": 0, "within": 0, "better": 0}
    outcomes = {"pass": 0, "fail": 0, "undecided": 0}
    for k in range(1, R + 1):
        level = release_level(args.delta, k)
        d = mean[None, :] - mean[base][:, None]  # (S, K): each model's true difference from the stream's baseline
        groups = np.stack([(d < -M), (d >= -M) & (d <= 0), (d > 0)])  # (3, S, K)
        groups[:, np.arange(S), base] = False
        # each stream's wanted kind, else the next one it has; a uniform member of it (the largest of random keys)
        want, noise = rng.integers(0, 3, size=S), rng.random((S, K))
        cand, kind = np.full(S, -1), np.full(S, -1)
        for shift in range(3):
            j = (want + shift) % 3
            members = groups[j, np.arange(S)]
            take = (kind < 0) & members.any(axis=1)
            cand[take] = np.where(members, noise, -1.0).argmax(axis=1)[take]
            kind[take] = j[take]
        for j, name in enumerate(("beyond", "within", "better")):
            kinds[name] += int(np.sum(kind == j))
        u = claim.losses(1.0 - s[cand[:, None], items], 1.0 - s[base[:, None], items])
        outcome, t = gate_step(u, claim, level, n)
        true_d = mean[cand] - mean[base]
        false_pass |= (outcome == 1) & (true_d < -M)
        false_fail |= (outcome == -1) & (true_d >= -M)
        # labels: the candidate's and the baseline's beyond what the store holds on the stream's order
        got_c, got_b = stored[np.arange(S), cand], stored[np.arange(S), base]
        bought += int(np.maximum(t - got_c, 0).sum() + np.maximum(t - got_b, 0).sum())
        scratch += int(2 * t.sum())
        used.append(t)
        stored[np.arange(S), cand] = np.maximum(got_c, t)
        stored[np.arange(S), base] = np.maximum(got_b, t)
        for name, code in (("pass", 1), ("fail", -1), ("undecided", 0)):
            outcomes[name] += int(np.sum(outcome == code))
        # the point test on two draws of 1,000 items
        verdicts = [(s[cand[:, None], p].mean(axis=1) - s[base[:, None], p].mean(axis=1)) >= -M for p in point]
        flips.append(verdicts[0] != verdicts[1])
        point_false |= verdicts[0] & (true_d < -M)
        base = np.where(outcome == 1, cand, base)
    used = np.concatenate(used)
    return {"false_pass": int(false_pass.sum()), "false_fail": int(false_fail.sum()), "bought": bought,
            "scratch": scratch, "median_items": float(np.median(used)), "flip": float(np.mean(np.concatenate(flips))),
            "point_false": int(point_false.sum()), "kinds": kinds, "outcomes": outcomes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--releases", type=int, default=20)
    ap.add_argument("--margin", type=float, default=0.02)
    ap.add_argument("--budget", type=int, default=1000, help="items a gate may label (each a paired label)")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", action="store_true", help="write what this prints as its section of docs/results.md")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    with results_section("release-series", "Release series: regression gates against the last release",
                         write=args.docs):
        print(f"{args.streams} streams of {args.releases} releases per table, each release gated against the last "
              f"shipped one with margin {args.margin:g} (pass: score >= baseline's - {args.margin:g}), R-Eval on "
              f"the paired losses, at most {args.budget} items per gate, series level delta = {args.delta:g} "
              f"(release k at delta / (k (k + 1))). `python benchmarks/release_series.py --docs`.\n")
        print("| table | releases drawn (beyond / within / better) | pass / fail / undecided | streams with a false "
              "pass (95% CI) | with a false fail | median items per gate | labels bought / from scratch | point "
              "test: streams with a false pass | point test flip rate |")
        print("|---|---|---|---|---|---:|---:|---|---:|")
        for name, spec in TABLES.items():
            r = run_table(scores(*spec), args, rng)
            S = args.streams
            lo, hi = clopper_pearson(r["false_pass"], S)
            flo, fhi = clopper_pearson(r["false_fail"], S)
            k, o = r["kinds"], r["outcomes"]
            print(f"| {name} | {k['beyond']} / {k['within']} / {k['better']} | {o['pass']} / {o['fail']} / "
                  f"{o['undecided']} | {r['false_pass']} / {S} = {r['false_pass'] / S:.3f} [{lo:.3f}, {hi:.3f}] | "
                  f"{r['false_fail']} / {S} [{flo:.3f}, {fhi:.3f}] | {r['median_items']:.0f} | "
                  f"{r['bought']:,} / {r['scratch']:,} = {r['bought'] / r['scratch']:.2f}x | "
                  f"{r['point_false']} / {S} = {r['point_false'] / S:.3f} | {r['flip']:.3f} |")
        print(f"\nA stream's false pass is any release passed whose true score (on the whole table) is more than "
              f"{args.margin:g} below its baseline's; a false fail, any release failed that is not. The series' "
              f"guarantee is that each happens in at most delta = {args.delta:g} of the streams. Labels bought "
              "count the candidate's and the baseline's labels beyond what the store held; from scratch, both "
              "sides of every gate. The point test passes a release when its mean score on 1,000 items is at "
              "least the baseline's less the margin; its flip rate is how often two independent draws of 1,000 "
              "items disagree on a release.")


if __name__ == "__main__":
    main()
