"""Sampling without replacement from a finite table (certsel.policies.sampling and the
``sampling=WithoutReplacement(N)`` of the betting tests): the transform's conditional mean by enumeration, the
e-values against a literal loop, batches and checkpoints, and the type-I error at the
boundary when the whole table is drawn (longer simulations: benchmarks/without_replacement.py)."""

import itertools

import numpy as np
import pytest
from certsel.policies import SequentialTest, log_evalue_paths, scheme_rhos
from certsel.policies.autoeval import effective_observations
from certsel.policies.autoeval_bounds import decision_upper_bound
from certsel.policies.betting import DEFAULT_CAP_MASS, alternatives_prior
from certsel.policies.sampling import Stream
from certsel.policies.sampling import WithoutReplacement
from helpers.reference import reference_wor_split_evalue_path


def test_each_draw_has_the_tables_mean_given_any_past():
    """Enumerate every ordered prefix of a 6-item table: averaged over the items left, the next
    transformed draw equals the table's mean (to rounding), and it lies in its stated range."""
    values = np.array([0.0, 1.0, 0.25, 0.9, 0.5, 0.05])
    N, mu = values.size, values.mean()
    for k in range(N):
        for prefix in itertools.permutations(range(N), k):
            past = Stream(N).draw(values[list(prefix)], (0.0, 1.0)).after if k else Stream(N)
            left = [i for i in range(N) if i not in prefix]
            nxt = [past.draw(values[[i]], (0.0, 1.0)) for i in left]
            assert np.mean([d.y[0] for d in nxt]) == pytest.approx(mu, abs=1e-12)
            assert all(d.low[0] - 1e-12 <= d.y[0] <= d.high[0] + 1e-12 for d in nxt)
    last = Stream(N).draw(values[::-1], (0.0, 1.0))
    assert last.y[-1] == pytest.approx(mu, abs=1e-12)  # the last draw is the table's mean itself


def test_a_stream_refuses_more_draws_than_the_table_holds():
    with pytest.raises(ValueError, match="3 more draws without replacement from a 4-item table that has 2 left"):
        Stream(4, 2, 1.0).draw(np.zeros(3), (0.0, 1.0))
    with pytest.raises(ValueError, match="population"):
        log_evalue_paths(np.zeros(5), alpha=0.1, delta=0.1, rhos=[0.0], sampling=WithoutReplacement(0))


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(3)
    N = 400
    h = (rng.random(N) < 0.06).astype(float)
    j = np.where(rng.random(N) < 0.85, h, 1.0 - h)
    return h, j, rng.permutation(N), rng.permutation(N)


def alternatives(alpha, horizon, delta=0.1):
    def of(rho):
        p = alternatives_prior(alpha, horizon=horizon, cap_mass=DEFAULT_CAP_MASS if rho > 0 else 0.0, delta=delta)
        return p.nodes, p.weights
    return of


@pytest.mark.parametrize("scheme", ["r-eval", "r-autoeval", "r-autoeval+"])
@pytest.mark.parametrize("drawn", [0.5, 1.0])
def test_matches_the_literal_loop(table, scheme, drawn):
    """The vectorised split e-values without replacement equal a per-label loop that keeps the
    streams' sums itself, until the table runs out (the certainty at the end included)."""
    h, j, order, judge_order = table
    N, r = h.size, 2
    n = int(drawn * N) // r if scheme != "r-eval" else int(drawn * N)
    rhos = scheme_rhos(scheme)
    ju = None if scheme == "r-eval" else j[judge_order[: r * n]]
    jl = None if scheme == "r-eval" else j[order[:n]]
    ours = np.exp(log_evalue_paths(h[order[:n]], jl, ju, alpha=0.1, delta=0.1, rhos=rhos, observation="split",
                                   sampling=WithoutReplacement(N), horizon=n))
    ref = reference_wor_split_evalue_path(h[order[:n]], jl if jl is not None else np.zeros(n),
                                          ju if ju is not None else np.zeros(0), alpha=0.1, rhos=rhos,
                                          prior=alternatives(0.1, n), population=N)
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


def test_a_huge_table_is_the_iid_test(table):
    h, j, order, judge_order = table
    for rhos, jl, ju in (([0.0], None, None), (scheme_rhos("r-autoeval+"), j[order[:100]], j[judge_order[:200]])):
        iid = log_evalue_paths(h[order[:100]], jl, ju, alpha=0.1, delta=0.1, rhos=rhos, observation="split")
        wor = log_evalue_paths(h[order[:100]], jl, ju, alpha=0.1, delta=0.1, rhos=rhos, observation="split",
                               sampling=WithoutReplacement(10**12))
        np.testing.assert_allclose(wor, iid, atol=1e-6)


def test_the_whole_table_drawn_certifies_what_it_knows(table):
    """Once the items left cannot bring the table's mean up to alpha, R-Eval's e-value takes off
    (its bet is no longer bounded); the i.i.d. test has no such knowledge."""
    h, _, order, _ = table
    iid = log_evalue_paths(h[order], alpha=0.1, delta=0.1, rhos=[0.0], observation="split")
    wor = log_evalue_paths(h[order], alpha=0.1, delta=0.1, rhos=[0.0], observation="split", sampling=WithoutReplacement(h.size))
    assert wor.max() > iid.max() + 50


@pytest.mark.parametrize("scheme", ["r-eval", "r-autoeval+"])
def test_batches_stacks_and_checkpoints_continue_exactly(table, scheme):
    h, j, order, judge_order = table
    N, r, n = h.size, 2, 150
    rhos = scheme_rhos(scheme)
    jl = None if scheme == "r-eval" else j[order[:n]]
    ju = None if scheme == "r-eval" else j[judge_order[: r * n]]
    whole = log_evalue_paths(h[order[:n]], jl, ju, alpha=0.1, delta=0.1, rhos=rhos, observation="split",
                             sampling=WithoutReplacement(N), horizon=n)
    test = SequentialTest(alpha=0.1, delta=0.1, horizon=n, rhos=rhos, r=r, observation="split", sampling=WithoutReplacement(N))
    got = []
    for a, b in ((0, 40), (40, 41), (41, 150)):
        if a == 40:  # through a checkpoint and a stack of one
            test = SequentialTest.from_state_dict(test.state_dict())
            test = SequentialTest.stack([test]).split()[0]
        got.append(test.update(h[order[a:b]], None if jl is None else jl[a:b],
                               None if ju is None else ju[r * a: r * b]))
    np.testing.assert_allclose(np.concatenate(got), whole, rtol=1e-12, atol=1e-12)
    assert test.state_dict()["draws"]["human"]["count"] == n
    with pytest.raises(ValueError, match="exactly r judge-only losses per human label"):
        effective_observations(h[:4], j[:4], j[:9], sampling=WithoutReplacement(N), observation="split")


def _boundary_tables(reps, N, alpha, rng):
    """Tables whose mean is alpha exactly (the least favourable null), with a judge that agrees
    with the human on 85% of the items, and two independent orders per table."""
    ones = int(round(alpha * N))
    h = np.zeros((reps, N))
    h[:, :ones] = 1.0
    h = rng.permuted(h, axis=1)
    j = np.where(rng.random(h.shape) < 0.85, h, 1.0 - h)
    return h, j, rng.permuted(np.tile(np.arange(N), (reps, 1)), axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["r-eval", "r-autoeval+"])
def test_type_one_error_at_the_tables_mean_with_every_item_drawn(scheme):
    """R = alpha on every table (mean exactly alpha), every item drawn: the test certifies in at
    most delta of the runs (99% Clopper-Pearson bound not above delta), and so does the
    one-sided bound's coverage of the table's mean."""
    from scipy.stats import beta

    rng = np.random.default_rng(11)
    reps, N, alpha, delta = 1000, 120, 0.1, 0.1
    h, j, judge_order = _boundary_tables(reps, N, alpha, rng)  # the item order is the table's own (random)
    rhos = scheme_rhos(scheme)
    ju = None if scheme == "r-eval" else np.take_along_axis(j, judge_order, axis=1)
    log_e = log_evalue_paths(h, None if ju is None else j, ju, alpha=alpha, delta=delta, rhos=rhos,
                             observation="split", sampling=WithoutReplacement(N), horizon=N)
    wrong = int((log_e.max(axis=-1) >= np.log(1 / delta)).sum())
    assert beta.ppf(0.005, wrong, reps - wrong + 1) <= delta if wrong else True
    assert wrong / reps <= delta + 0.02
    # the bound that inverts the test, stopped halfway: covers the table's mean as often
    half = N // 2
    bound = decision_upper_bound(h[:, :half], None if ju is None else j[:, :half], None if ju is None else ju[:, :half],
                                 level=delta, delta=delta, alpha=alpha, rhos=rhos, observation="split",
                                 sampling=WithoutReplacement(N), horizon=N)
    assert np.mean(bound < h.mean(axis=1) - 1e-12) <= delta + 0.02


EXAMPLE_TABLE = "prompts_sentiment.parquet"


def _raw(**policy):
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / EXAMPLE_TABLE
    return {"data": {"path": str(path), "judge": "loss_judge_icl5"}, "alpha": 0.3, "delta": 0.1,
            "candidates": ["prompt_000", "prompt_004", "prompt_008"], "objective": {"column": "prompt_len"},
            "policy": {"kind": "r-autoeval+", "sampling": "without-replacement", **policy}, "procedure": "holm",
            "budget": {"n": 300, "r": 2, "batch": 50}, "seed": 7}


def test_a_job_drawn_without_replacement_certifies_the_tables_mean():
    """A replay job with ``policy.sampling: without-replacement``: human items in the job's
    order, judge-only items in an order of their own (some items in both), every candidate's
    e-values those of the finite-population test on its label log, and a certificate that says
    it is about the table's mean."""
    from certsel.config import parse_config
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.certificate import certificate
    from certsel.workers.replay import label_orders

    cfg = parse_config(_raw())
    data = load_job_data(cfg)
    res = run_job(cfg, data, LocalRuntime(1))
    N = data.n_items
    human_order, judge_order = label_orders(N, 7, 300, 2, True)
    assert np.intersect1d(human_order, judge_order).size > 0  # independent orders: they meet
    for rec in res.records:
        rows = res.labels[rec.name]
        h_items = rows.item[rows.role == "human"]
        assert np.array_equal(h_items, human_order[: h_items.size])
        k = data.names.index(rec.name)
        t = h_items.size
        h, j = data.table.human[k], data.table.judge[k]
        log_e = log_evalue_paths(h[h_items], j[h_items], j[judge_order[: 2 * t]], alpha=0.3, delta=0.1,
                                 rhos=scheme_rhos("r-autoeval+"), observation="split", sampling=WithoutReplacement(N), horizon=300)
        assert max(log_e.max(), 0.0) == pytest.approx(max(rec.max_log_e, 0.0), abs=1e-9)
    cert = certificate(res)
    assert "a finite population" in cert.guarantee and "conditional mean is R exactly" in cert.guarantee
    assert cert.policy.sampling == "without-replacement" and cert.as_json()["policy"]["sampling"] == cert.policy.sampling
    assert res.certified  # not vacuous


def test_sampling_enters_a_jobs_identity_only_when_it_is_not_iid():
    """Job folders from before policy.sampling existed keep their identity (resume finds them):
    the i.i.d. default is left out of the fingerprint, as it is out of the certificate."""
    import hashlib
    import json

    from certsel.config import parse_config
    from certsel.config.sections import PILOT_KEYS
    from certsel.orchestrator.engine.state import config_fingerprint

    iid = parse_config({**_raw(), "policy": {"kind": "r-autoeval+"}})
    body = iid.model_dump(mode="json", exclude={"name": True, "tracking": True, "ray": True, "runtime": True, "state": True})
    for key in PILOT_KEYS:  # the keys a job without a pilot leaves out, as before
        body["scheduling"].pop(key)
    body["policy"].pop("sampling")
    body["pairwise"].pop("bet")  # likewise pairwise.bet when not set
    from certsel.policies.budget_stop import DEFAULT_LEVEL, RULE_VERSION

    assert body["scheduling"]["budget_stop"] == DEFAULT_LEVEL  # the budget stop, on by default, is part of it
    body["data"].pop("measures")  # wording, never part of the identity

    # and, while the stop is on, its rule's version
    canon = json.dumps({"config": body, "data": "d", "budget_stop_rule": RULE_VERSION}, sort_keys=True,
                       separators=(",", ":"))
    assert config_fingerprint(iid, "d") == hashlib.sha256(canon.encode()).hexdigest()[:24]
    assert config_fingerprint(parse_config(_raw()), "d") != config_fingerprint(iid, "d")
    assert "sampling" not in certificate_policy(iid)


def certificate_policy(cfg) -> dict:
    """The certificate's policy block of a tiny job on ``cfg``."""
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.certificate import certificate

    small = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"n": 20, "batch": 20})})
    return certificate(run_job(small, load_job_data(small), LocalRuntime(1), collect_labels=False)).as_json()["policy"]


@pytest.mark.parametrize("change, message", [
    ({"policy": {"kind": "seq", "sampling": "without-replacement"}},
     "policy.sampling 'without-replacement' applies to policy.kind"),
    ({"budget": {"n": 700, "r": 2}}, "sampling without replacement draws n = 700 human and r\\*n = 1400 judge-only"),
    ({"policy": {"kind": "r-autoeval+", "sampling": "both"}}, "policy.sampling: Input should be 'iid' or"),
])
def test_sampling_mistakes_are_one_line(change, message):
    from certsel.config import parse_config
    from certsel.orchestrator.inputs.sources import load_job_data

    from certsel.errors import InputError  # a config error is one too

    with pytest.raises(InputError, match=message) as err:
        load_job_data(parse_config({**_raw(), **change}))
    assert "\n" not in str(err.value)


def test_the_sampling_object_is_what_a_test_takes():
    """One object says how a test's items are drawn: a bare size is refused with a line that
    names the two forms, and a checkpoint of release 0.1 (the table's size under
    ``population``) continues as the same without-replacement test."""
    from certsel.policies.sampling import IID, sampling_named

    with pytest.raises(ValueError, match=r"sampling must be IID\(\) or WithoutReplacement\(N\), got 40"):
        SequentialTest(alpha=0.1, delta=0.1, horizon=10, rhos=[0.0], sampling=40)
    with pytest.raises(ValueError, match="sampling must be one of iid, without-replacement, got 'wor'"):
        sampling_named("wor", 40)
    assert sampling_named("iid", 40) == IID() and sampling_named("without-replacement", 40) == WithoutReplacement(40)
    h = np.random.default_rng(0).random(30)
    test = SequentialTest(alpha=0.6, delta=0.1, horizon=30, rhos=[0.0], observation="split",
                          sampling=WithoutReplacement(30))
    test.update(h[:12])
    state = test.state_dict()
    assert state["config"]["population"] == 30 and "sampling" not in state["config"]
    again = SequentialTest.from_state_dict(state)
    assert again.sampling == WithoutReplacement(30)
    np.testing.assert_array_equal(again.update(h[12:]), test.update(h[12:]))
    whole = log_evalue_paths(h, alpha=0.6, delta=0.1, rhos=[0.0], observation="split", horizon=30,
                             sampling=WithoutReplacement(30))
    assert float(again.max_log_evalue) == pytest.approx(float(whole.max()), abs=1e-12)
