"""Rankings with certified ties, top-k and rank intervals (policies/comparison.py, the pairwise
rounds): the pure functions against brute force, the config's one-line errors, the tie test's
error rate by simulation, and a job through Ray whose every order, tie and rank interval holds
on the table."""

import itertools

import numpy as np
import pytest
from certsel.config import ConfigError, load_config
from certsel.policies.comparison import (
    implied_orders,
    pairs_needed,
    rank_groups,
    rank_intervals,
    tied_pairs,
    topk_status,
)
from certsel.workers.replay import DATA_DIR

EXAMPLE = DATA_DIR.parent / "alpacaeval_ranking.yaml"


def test_a_tie_needs_both_one_sided_bounds_inside_epsilon():
    # u-bounds [lo, hi] -> the difference 2u - 1 lies in [2 lo - 1, 2 hi - 1]
    lo = np.array([0.49, 0.49, 0.48, 0.40, 0.50])
    hi = np.array([0.51, 0.53, 0.51, 0.52, 0.50])
    assert tied_pairs(lo, hi, 0.05).tolist() == [True, False, True, False, True]
    assert tied_pairs(lo, hi, 0.02).tolist() == [False, False, False, False, True]
    assert not tied_pairs(lo, hi, None).any()
    with pytest.raises(ValueError, match="epsilon must be in \\(0, 1\\)"):
        tied_pairs(lo, hi, 0.0)


def _random_order(rng, K):
    """A random set of certified orders consistent with some true order, and that order."""
    truth = rng.permutation(K)  # truth[r] is the model at rank r + 1
    pos = np.argsort(truth)
    better = np.zeros((K, K), dtype=bool)
    for a, b in itertools.permutations(range(K), 2):
        if pos[a] < pos[b] and rng.random() < 0.3:
            better[a, b] = True
    return implied_orders(better), pos + 1


def test_rank_intervals_and_groups_hold_whenever_the_orders_do():
    rng = np.random.default_rng(0)
    for _ in range(150):
        K = int(rng.integers(2, 8))
        closure, rank = _random_order(rng, K)
        best, worst = rank_intervals(closure)
        assert np.all(best <= rank) and np.all(rank <= worst)
        # brute force: the ranks every total order consistent with the closure allows
        possible = [set() for _ in range(K)]
        for perm in itertools.permutations(range(K)):
            at = np.argsort(perm)
            if all(at[a] < at[b] for a, b in zip(*np.nonzero(closure), strict=True)):
                for m in range(K):
                    possible[m].add(int(at[m]) + 1)
        assert [min(p) for p in possible] == best.tolist() and [max(p) for p in possible] == worst.tolist()
        groups = rank_groups(closure)
        assert sorted(m for g in groups for m in g) == list(range(K))
        for g, h in itertools.combinations(groups, 2):  # earlier groups are truly better, model by model
            assert all(rank[a] < rank[b] for a in g for b in h)
            assert max(worst[a] for a in g) < min(best[b] for b in h)


def test_topk_status_and_the_pairs_topk_needs():
    K = 5
    better = np.zeros((K, K), dtype=bool)
    better[0, 1:] = True  # 0 beats everyone
    better[1, 3] = better[1, 4] = better[2, 3] = better[2, 4] = True  # {1, 2} beat {3, 4}
    closure = implied_orders(better)
    in_, out = topk_status(closure, 3)
    assert in_.tolist() == [True, True, True, False, False] and out.tolist() == [False, False, False, True, True]
    in_, out = topk_status(closure, 2)
    assert in_.tolist() == [True, False, False, False, False] and out.tolist() == [False, False, False, True, True]
    ii, jj = np.triu_indices(K, 1)
    need = pairs_needed("topk", closure, ii, jj, k=2)
    assert {(int(a), int(b)) for a, b in zip(ii[need], jj[need], strict=True)} == {(1, 2)}  # who is second
    tied = (ii == 1) & (jj == 2)  # certified tied: nothing left to compare
    assert not pairs_needed("topk", closure, ii, jj, tied=tied, k=2).any()
    assert not pairs_needed("topk", closure, ii, jj, k=3).any()
    with pytest.raises(ValueError, match="goal 'topk' needs k"):
        pairs_needed("topk", closure, ii, jj)
    with pytest.raises(ValueError, match="k must be in \\[1, 4\\]"):
        topk_status(closure, 5)


def test_ties_end_pairs_in_every_goal_but_all():
    K = 3
    closure = np.zeros((K, K), dtype=bool)
    ii, jj = np.triu_indices(K, 1)
    tied = np.array([True, False, False])
    assert pairs_needed("ranking", closure, ii, jj, tied=tied).tolist() == [False, True, True]
    assert pairs_needed("best", closure, ii, jj, tied=tied).tolist() == [False, True, True]
    assert pairs_needed("all", closure, ii, jj, tied=tied).all()


@pytest.mark.parametrize("sets, message", [
    (["pairwise.epsilon=0"], "epsilon must be in \\(0, 1\\)"),
    (["pairwise.epsilon=1.5"], "epsilon must be in \\(0, 1\\)"),
    (["pairwise.goal=topk"], "goal 'topk' needs topk: K"),
    (["pairwise.topk=3"], "topk is for goal 'topk', not 'ranking'"),
    (["pairwise.goal=all", "pairwise.epsilon=0.02"], "goal 'all' runs every pair until its sign is certified"),
    (["pairwise.goal=topk", "pairwise.topk=4", "candidates=[claude, claude-2, gpt4_gamed, ultralm-13b]"],
     "pairwise.topk must be below the number of models \\(4\\)"),
    (["procedure=bonferroni", "policy.kind=r-eval", "pairwise.epsilon=0.02", "objective.column=loss"],
     "pairwise: options of a ranking"),
    (["pairwise.bet=margin", "policy.kind=cer-eval"], "pairwise.bet 'margin' needs pair policies that take a bet"),
    (["pairwise.bet=kelly"], "pairwise.bet"),
])
def test_ranking_mistakes_are_one_line_errors(sets, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(EXAMPLE, sets)
    assert "\n" not in str(err.value)


def test_topk_of_all_the_models_is_refused_when_the_table_is_read():
    from certsel.errors import InputError
    from certsel.orchestrator.inputs.sources import load_job_data

    with pytest.raises(InputError, match="pairwise.topk must be below the number of models \\(12\\), got 12"):
        load_job_data(load_config(EXAMPLE, ["pairwise.goal=topk", "pairwise.topk=12"]))


@pytest.mark.slow
def test_false_ties_and_wrong_orders_stay_below_delta_at_the_boundary():
    """Three models whose differences sit just outside epsilon (|Delta| = 0.05 + 1e-3 on the
    table, a null for 'tied') and one clear gap: over 200 shuffles the job claims a false tie or
    a wrong order in at most delta of them (not shown to exceed it), and its rank intervals
    cover the true ranks in the rest."""
    from certsel.config import parse_config
    from certsel.orchestrator.audit.base import clopper_pearson
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from helpers.boundary import shifted_table
    import tempfile
    import pathlib

    n = 1000
    with tempfile.TemporaryDirectory() as tmp:
        path = shifted_table(pathlib.Path(tmp) / "t.parquet", {"b": 51, "c": 102, "d": 300}, n)
        cfg = parse_config({"data": {"path": str(path), "candidate": "model", "human": "loss"},
                            "policy": {"kind": "seq"}, "procedure": "pairwise", "delta": 0.1,
                            "pairwise": {"goal": "ranking", "epsilon": 0.05}, "budget": {"n": n, "batch": 50},
                            "tracking": {"intervals": "none"}})
        data = load_job_data(cfg)
        truth = dict(zip(data.names, data.table.true_risk, strict=True))
        assert truth["b"] - truth["a"] == pytest.approx(0.051) and truth["c"] - truth["b"] == pytest.approx(0.051)
        reps, fails, covered, orders = 200, 0, 0, 0
        for seed in range(reps):
            rk = run_job(cfg.model_copy(update={"seed": seed}), data, LocalRuntime(1), collect_labels=False).ranking
            wrong = any(truth[a] >= truth[b] for a, bs in rk.better.items() for b in bs)
            false_tie = any(abs(truth[a] - truth[b]) >= 0.05 for a, b in (p.split(" ~ ") for p in rk.tied))
            fails += wrong or false_tie
            orders += rk.pairs_certified
            rank = {m: 1 + sum(truth[j] < truth[m] for j in truth) for m in truth}
            covered += all(lo <= rank[m] <= hi for m, (lo, hi) in rk.rank_intervals.items())
    assert clopper_pearson(fails, reps, 0.99)[0] <= 0.1, fails
    assert covered >= reps - fails  # intervals fail only where an order does
    assert orders / reps >= 3  # the clear gaps (d against the rest) are ordered: the job is not idle


def test_a_ranking_resumed_after_a_crash_keeps_its_ties(tmp_path):
    """The driver dies after round 14 of 18 (claude ~ claude-2 and ultralm-13b ~ vicuna-13b are
    certified tied by then, after 325 and 250 items);
    the rerun resumes from its checkpoint with the ties as they were and ends where an
    uninterrupted run ends."""
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job

    cfg = load_config(EXAMPLE, ["policy.kind=seq", "pairwise.epsilon=0.05", "tracking.intervals=none",
                                "state.snapshot_every=1",
                                "candidates=[claude, claude-2, gpt4_gamed, ultralm-13b, vicuna-13b]"])
    data = load_job_data(cfg)
    ref = run_job(cfg, data, LocalRuntime(1), collect_labels=False)

    class Crash(Exception):
        pass

    def crash(records, n):
        if n == 14:
            raise Crash

    with pytest.raises(Crash):
        run_job(cfg, data, LocalRuntime(1), collect_labels=False, job_dir=str(tmp_path), progress=crash)
    res = run_job(cfg, data, LocalRuntime(1), collect_labels=False, job_dir=str(tmp_path))
    assert res.resume is not None and res.resume.from_round == 14
    assert "claude ~ claude-2" in ref.ranking.tied
    assert res.ranking.tied == ref.ranking.tied and res.ranking.better == ref.ranking.better
    assert res.spent == ref.spent and res.ranking.items_per_pair == ref.ranking.items_per_pair


@pytest.fixture
def seq_per_pair():
    """Seq without its bank: one policy object per pair (the path other kinds take)."""
    from certsel.policies.kinds import POLICY_KINDS, SeqKind, register_policy_kind

    class SeqPerPair(SeqKind):
        name = "seq-per-pair"

        def banks(self, radius):
            return False

        def build_bank(self, settings, n_items, n_runs, bet=None):
            return None

    register_policy_kind(SeqPerPair())
    yield "seq-per-pair"
    POLICY_KINDS.pop("seq-per-pair")


@pytest.mark.parametrize("sets", [["pairwise.epsilon=0.02"], ["pairwise.goal=topk", "pairwise.topk=3",
                                                             "pairwise.epsilon=0.05"], ["pairwise.goal=best"]])
def test_banked_pairs_equal_one_policy_per_pair(seq_per_pair, sets):
    """Seq's pairs run as one vectorised bank: with Seq's own bet (pairwise.bet: plug-in) the
    ranking, the labels and every record's rounds are those of one Seq object per pair, number
    for number."""
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    import dataclasses

    out = []
    for kind in ("seq", seq_per_pair):
        cfg = load_config(EXAMPLE, [f"policy.kind={kind}", "tracking.intervals=none", "pairwise.bet=plug-in", *sets])
        res = run_job(cfg, load_job_data(cfg), LocalRuntime(1), collect_labels=False)
        out.append((dataclasses.asdict(res.ranking), res.spent, [r.rounds for r in res.records],
                    [r.status for r in res.records]))
    assert out[0] == out[1]


def test_pair_checkpoints_restore_in_their_own_form():
    """A per-pair checkpoint (also the bare list older checkpoints hold) restores one policy per
    pair; a bank refuses it in one line rather than misreading it."""
    from certsel.orchestrator.engine.pair_policies import BankedPairs, PolicyList
    from certsel.policies.kinds import POLICY_KINDS, PolicyInputs, PolicySettings

    kind, settings = POLICY_KINDS["seq"], PolicySettings(alpha=0.5, delta=0.05, budget=40, seed=3, strict=True)
    pairs = PolicyList(kind, [kind.build(settings, PolicyInputs(40)) for _ in range(3)])
    items = pairs.next_items(1, 10)
    pairs.feed({1: (items, np.linspace(0.2, 0.8, 10))})
    for saved in (pairs.state_dict(), pairs.state_dict()["pairs"]):
        back = pairs.restore(saved)
        assert np.array_equal(back.bounds(), pairs.bounds()) and np.array_equal(back.n_labeled, [0, 10, 0])
    bank = BankedPairs(kind.build_bank(settings, 40, 3))
    for saved in (pairs.state_dict(), pairs.state_dict()["pairs"]):
        with pytest.raises(ValueError, match="one policy per pair; this job runs the pairs as a bank"):
            bank.restore(saved)
    with pytest.raises(ValueError, match="as a bank; this job runs one policy per pair"):
        pairs.restore(bank.state_dict())


def test_pair_rounds_are_sized_from_their_bounds():
    """A pair asks for about what its bounds say it still needs: with half-width h after n of N
    items and the margin m of the claim it is closest to, the n' with (N - n') / n' =
    (m / h)^2 (N - n) / n, less n, between the smallest round and the batch."""
    from certsel.orchestrator.engine.pairwise import pair_round_sizes
    from certsel.policies.pair_bets import pair_claims

    bounds = np.array([[0.0, 1.0], [0.46, 0.54], [0.52, 0.60], [0.50, 0.58], [0.44, 0.56], [0.30, 0.70]])
    n = np.array([0, 100, 100, 400, 100, 100])
    got = pair_round_sizes(bounds, n, pair_claims(0.1), batch=25, smallest=5, n_items=1000)
    # no labels: a whole batch; centre 1/2, h = 0.04, the tie's margin 0.05: n' = 1000 / (1 +
    # 1.5625 * 9) = 66 < 100, the smallest round; "> 1/2" 0.06 away, h = 0.04: n' = 47, the
    # smallest round; h = m = 0.04 at n = 400: n' = 400, the smallest round; h = 0.06 against the
    # tie's 0.05: n' = 1000 / (1 + 6.25) = 138, 38 more -> the batch; h = 0.2: the batch
    assert got.tolist() == [25, 5, 5, 5, 25, 25]
    # centre 0.498, h = 0.05, the tie's margin 0.048: n' = 1000 / (1 + 0.9216 * 9) = 107.6 -> 8
    mid = pair_round_sizes(np.array([[0.448, 0.548]]), np.array([100]), pair_claims(0.1), batch=25, smallest=5,
                           n_items=1000)
    assert mid.tolist() == [8]


def test_fixed_rounds_give_every_pair_the_batch():
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job

    out = {}
    for rounds in ("fixed", "predicted"):
        cfg = load_config(EXAMPLE, ["policy.kind=seq", "pairwise.epsilon=0.05", "tracking.intervals=none",
                                    f"scheduling.rounds={rounds}"])
        res = run_job(cfg, load_job_data(cfg), LocalRuntime(1), collect_labels=False)
        out[rounds] = res.ranking.items_per_pair
    assert all(n % 25 == 0 or n == 805 for n in out["fixed"].values())
    assert any(n % 25 for n in out["predicted"].values())  # some pair stopped between batches


def test_the_pair_bet_enters_a_jobs_identity_only_when_set():
    """Ranking folders from before pairwise.bet keep their identity; a job that names a bet is
    another job."""
    from certsel.orchestrator.engine.state import config_fingerprint
    from certsel.orchestrator.engine.pairwise import pair_bet

    default = load_config(EXAMPLE, ["policy.kind=seq"])
    assert "bet" not in default.model_dump(mode="json", exclude={"pairwise": {"bet"}})["pairwise"]
    plug = load_config(EXAMPLE, ["policy.kind=seq", "pairwise.bet=plug-in"])
    margin = load_config(EXAMPLE, ["policy.kind=seq", "pairwise.bet=margin"])
    assert len({config_fingerprint(c, "d") for c in (default, plug, margin)}) == 3
    assert pair_bet(default) == pair_bet(margin) and pair_bet(plug) is None
    assert pair_bet(load_config(EXAMPLE, [])) is None  # Cer-Eval's pairs: one policy each, their own bets
