"""Aggregate jobs (``tasks:`` with ``aggregate:``): the stacked table against an independent
computation of the weighted risk, the config's one-line errors, the stacked test's error at the
boundary and where an unweighted stack would be wrong (simulation), and whole jobs through a
real Ray and MLflow, risk and recovery."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from certsel.config import ConfigError, parse_config
from certsel.errors import InputError
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.workers.replay import DATA_DIR

SENTIMENT, SUM = DATA_DIR / "prompts_sentiment.parquet", DATA_DIR / "prompts_sum.parquet"
SLOTS = ["prompt_012", "prompt_032", "prompt_060", "prompt_088", "prompt_096"]


def _write(path, losses: dict, judge_noise=0.0, seed=0):
    """A loss table: candidate -> per-item losses (a judge column = the losses, perturbed)."""
    rng = np.random.default_rng(seed)
    rows = {"candidate": [], "item": [], "loss_human": [], "loss_judge": [], "size": []}
    for k, (name, x) in enumerate(losses.items()):
        x = np.asarray(x, dtype=float)
        rows["candidate"] += [name] * x.size
        rows["item"] += [f"i{i}" for i in range(x.size)]
        rows["loss_human"] += x.tolist()
        rows["loss_judge"] += np.clip(x + judge_noise * rng.normal(size=x.size), 0, 1).tolist()
        rows["size"] += [float(k)] * x.size
    pq.write_table(pa.table(rows), path)
    return str(path)


def _raw(tmp_path, paths: dict, **over):
    raw = {"name": "agg", "tasks": [{"name": n, "data": {"path": p, "judge": "loss_judge"}} for n, p in paths.items()],
           "aggregate": {"weights": "equal"}, "alpha": 0.2, "policy": {"kind": "r-eval"}, "procedure": "bonferroni",
           "delta": 0.1, "budget": {"n": 100}, "seed": 0, "objective": {"column": "size"},
           "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, "state": {"dir": str(tmp_path / "jobs")}}
    return {**raw, **over}


@pytest.mark.parametrize("weights", ["equal", "size", {"a": 3.0, "b": 1.0, "c": 0.5}])
def test_the_stacked_mean_times_m_is_the_weighted_risk(tmp_path, weights):
    rng = np.random.default_rng(1)
    sizes = {"a": 37, "b": 400, "c": 123}
    tables = {t: {c: rng.beta(1, 3, size=n) for c in ("x", "y", "z")} for t, n in sizes.items()}
    paths = {t: _write(tmp_path / f"{t}.parquet", tables[t], judge_noise=0.1) for t in sizes}
    cfg = parse_config(_raw(tmp_path, paths, aggregate={"weights": weights}))
    data = load_job_data(cfg)
    raw = {"equal": [1, 1, 1], "size": list(sizes.values())}.get(weights) if isinstance(weights, str) \
        else [weights[t] for t in sizes]
    w = np.array(raw, dtype=float) / sum(raw)
    # the weighted risk, computed directly from each task's table
    want = np.array([sum(wt * tables[t][c].mean() for wt, t in zip(w, sizes, strict=True)) for c in ("x", "y", "z")])
    np.testing.assert_allclose(data.true_risk, want, rtol=1e-12)
    np.testing.assert_allclose(data.table.human.mean(axis=1) * data.unit, want, rtol=1e-12)
    N = sum(sizes.values())
    c = w * N / np.array(list(sizes.values()))
    assert data.unit == pytest.approx(c.max())
    assert data.table.human.max() <= 1.0 and data.table.judge.max() <= 1.0
    parts = data.aggregate.parts
    assert [p.start for p in parts] == [0, 37, 437] and max(p.factor for p in parts) == 1.0
    prefix = np.char.partition(data.table.items.astype(str), "/")[:, 0]
    assert (prefix[:37] == "a").all() and (prefix[37:437] == "b").all() and (prefix[437:] == "c").all()
    # judge losses are scaled with the human ones, item by item
    factors = np.repeat([p.factor for p in parts], list(sizes.values()))
    judge_b = pq.read_table(paths["b"]).to_pandas().query("candidate == 'y'").set_index("item").loss_judge
    ids = np.char.partition(data.table.items[37:437].astype(str), "/")[:, 2]
    np.testing.assert_allclose(data.table.judge[1, 37:437], judge_b[ids].to_numpy() * factors[37:437])
    assert data.policy_config(cfg).alpha == pytest.approx(0.2 / data.unit)
    if weights == "size":  # the micro average: nothing scaled
        assert data.unit == pytest.approx(1.0) and data.policy_config(cfg) is cfg
    np.testing.assert_array_equal(data.aggregate.task_of(np.array([0, 36, 37, 436, 437, 559])), [0, 0, 1, 1, 2, 2])


def test_a_recovery_aggregate_is_the_ratio_of_weighted_scores(tmp_path):
    import pyarrow.compute as pc

    table = pq.read_table(DATA_DIR / "triviaqa_llama31_8b_mx.parquet")
    items = sorted(set(table["item"].to_pylist()))
    halves = {"small": items[:300], "large": items[300:]}
    paths = {}
    for name, keep in halves.items():
        paths[name] = str(tmp_path / f"{name}.parquet")
        pq.write_table(table.filter(pc.is_in(table["item"], pa.array(keep))), paths[name])
    raw = _raw(tmp_path, paths, alpha=None, recovery=0.9, policy={"kind": "r-eval"}, objective={"column": "avg_bitwidth"})
    raw.pop("alpha")
    for t in raw["tasks"]:
        t["data"] = {"path": t["data"]["path"], "score": "score_human", "reference": "score_fp_human"}
    cfg = parse_config(raw)
    data = load_job_data(cfg)
    df = table.to_pandas()
    rec = []
    for name in data.names:
        s = [df[(df.candidate == name) & df["item"].isin(halves[h])] for h in ("small", "large")]
        rec.append((s[0].score_human.mean() + s[1].score_human.mean())
                   / (s[0].score_fp_human.mean() + s[1].score_fp_human.mean()))
    np.testing.assert_allclose(data.recovery.on_table, rec, rtol=1e-6)  # the table stores float32
    # the stacked recovery losses' weighted mean is <= 1 / (1 + r) exactly when the weighted recovery is >= r
    assert np.array_equal(data.true_risk <= 1 / 1.9, np.array(rec) >= 0.9)
    assert cfg.recovery_reference == "score_fp_human"


@pytest.mark.parametrize("change, message", [
    ({"tasks": None, "data": {"path": str(SUM)}}, "aggregate: weighs the tasks of a multi-task job"),
    ({"aggregate": {"weights": {"a": 1.0}}}, "aggregate.weights: give a weight for every task and only for tasks "
                                             "\\(missing: b\\)"),
    ({"aggregate": {"weights": {"a": 1.0, "b": 1.0, "c": 2.0}}}, "\\(not a task: c\\)"),
    ({"aggregate": {"weights": {"a": 1.0, "b": 0.0}}}, "weights must be finite and > 0, got b: 0.0"),
    ({"aggregate": {"weights": "mean"}}, "aggregate.weights"),
    ({"tasks": [{"name": "a", "data": {"path": str(SUM), "judge": "loss_judge_icl5"}, "alpha": 0.1}]},
     "aggregate: task 'a' sets its own target"),
    ({"tasks": [{"name": "a", "data": {"path": str(SUM), "judge": "loss_judge_icl5"}, "budget": {"n": 50}}]},
     "aggregate: task 'a' sets its own budget"),
])
def test_config_mistakes_are_one_line_errors(tmp_path, change, message):
    raw = _raw(tmp_path, {"a": str(SENTIMENT), "b": str(SUM)}, policy={"kind": "r-eval"})
    with pytest.raises(ConfigError, match=message) as err:
        parse_config({**raw, **change})
    assert "\n" not in str(err.value)


def test_the_budget_is_checked_on_the_stacked_table(tmp_path):
    paths = {"a": _write(tmp_path / "a.parquet", {"x": np.zeros(30), "y": np.zeros(30)}),
             "b": _write(tmp_path / "b.parquet", {"x": np.zeros(50), "y": np.zeros(50)})}
    load_job_data(parse_config(_raw(tmp_path, paths, budget={"n": 80})))  # more than either task alone
    with pytest.raises(InputError, match="budget: n\\*\\(1\\+r\\) = 81 items needed per candidate but the stacked "
                                         "tasks have 80|the stacked tasks has 80"):
        load_job_data(parse_config(_raw(tmp_path, paths, budget={"n": 81})))


def _certified_rate(tmp_path, tables: dict, alpha: float, reps: int, n: int, weights="equal", seed: int = 0):
    """How often each candidate is certified over ``reps`` random orders of the stacked table
    (R-Eval, Bonferroni), by the audit's vectorised repetitions."""
    from certsel.orchestrator.audit.job_audit import betting_repetitions
    from certsel.policies.procedures import get_procedure

    paths = {t: _write(tmp_path / f"{t}.parquet", x) for t, x in tables.items()}
    cfg = parse_config(_raw(tmp_path, paths, alpha=alpha, budget={"n": n}, aggregate={"weights": weights}))
    data = load_job_data(cfg)
    pcfg = data.policy_config(cfg)
    max_log_e = betting_repetitions(pcfg, data.table, data.table.true_risk, reps, np.random.default_rng(seed))[0]
    levels = get_procedure("bonferroni").candidate_deltas(0.1, len(data.names))
    return (max_log_e >= -np.log(levels)).mean(axis=0), data


def test_the_stacked_test_keeps_its_level_where_an_unweighted_stack_would_not(tmp_path):
    """Three candidates on a small task (200 items) and a large one (1800), equal weights, alpha
    = 0.2: 'skewed' is bad on the small task (0.5) and good on the large (0.02): R = 0.26 > alpha,
    although its mean over all 2000 items is 0.068; 'edge' has R = 0.2 exactly (a null at alpha =
    0.2 - 1e-9); 'good' has R = 0.05. Only 'good' may be certified more than its level allows."""
    from certsel.orchestrator.audit.base import clopper_pearson

    def ones(n, k):
        x = np.zeros(n)
        x[:k] = 1.0
        return x

    tables = {"small": {"skewed": ones(200, 100), "edge": ones(200, 60), "good": ones(200, 10)},
              "large": {"skewed": ones(1800, 36), "edge": ones(1800, 180), "good": ones(1800, 90)}}
    reps = 300
    rates, data = _certified_rate(tmp_path, tables, 0.2 - 1e-9, reps, n=1000)
    rate, risk = dict(zip(data.names, rates, strict=True)), dict(zip(data.names, data.true_risk, strict=True))
    assert risk == pytest.approx({"skewed": 0.26, "edge": 0.2, "good": 0.05}, abs=1e-12)
    level = 0.1 / 3
    for k in ("skewed", "edge"):  # the nulls: each certified at most at its level (not shown to exceed it)
        assert clopper_pearson(round(rate[k] * reps), reps, 0.99)[0] <= level, rate
    assert rate["skewed"] <= 0.02  # R / alpha = 1.3, but in stacked units a rare loss of 1 on a small task
    assert rate["good"] >= 0.9  # and the test has power where R is well below alpha
    # stacked without the weights (weights: size, the micro average) 'skewed' is a different claim,
    # R = 0.068, certified nearly every time: the scaling is what keeps the equal-weight claim
    micro, data = _certified_rate(tmp_path, tables, 0.2 - 1e-9, 50, n=1000, weights="size")
    k = data.names.index("skewed")
    assert data.true_risk[k] == pytest.approx(0.068) and micro[k] >= 0.9


@pytest.mark.integration
def test_an_aggregate_job_runs_through_ray_and_mlflow(tmp_path):
    from certsel.orchestrator.commands.job import execute
    from mlflow.tracking import MlflowClient

    raw = _raw(tmp_path, {"sentiment": str(SENTIMENT), "sum": str(SUM)}, candidates=SLOTS, alpha=0.25,
               policy={"kind": "r-autoeval+"}, budget={"n": 400, "r": 3, "batch": 50},
               objective={"column": "prompt_len"})
    for t in raw["tasks"]:
        t["data"]["judge"] = "loss_judge_icl5"
    cfg = parse_config(raw)
    result, run_id = execute(cfg, output=tmp_path / "out")
    cert = json.loads((tmp_path / "out" / "selection.json").read_text())
    agg = cert["aggregate"]
    assert agg["kind"] == "aggregate" and [t["name"] for t in agg["tasks"]] == ["sentiment", "sum"]
    assert agg["unit"] == pytest.approx((1167 + 4950) / (2 * 1167)) and agg["policy_alpha"] == pytest.approx(0.25 / agg["unit"])
    df = {t: pq.read_table(p).to_pandas().groupby("candidate").loss_human.mean() for t, p in
          (("sentiment", SENTIMENT), ("sum", SUM))}
    rows = {c["candidate"]: c for c in cert["candidates"]}
    for name, c in rows.items():
        weighted = (df["sentiment"][name] + df["sum"][name]) / 2
        assert c["risk_on_full_table"] == pytest.approx(weighted, abs=1e-6)
        assert c["tasks"]["sum"]["risk_on_full_table"] == pytest.approx(df["sum"][name], abs=1e-6)
        assert sum(f["labels_human"] for f in c["tasks"].values()) == c["labels_human"]
        if c["certified"]:  # every certified bound holds on the table, in R's own units
            assert weighted <= c["simultaneous_bound"] <= 0.25 and c["upper_bound"] <= 0.25
    # prompt_088 is good on sentiment (0.087), bad on sum (0.905): R = 0.496, not certified
    assert not rows["prompt_088"]["certified"] and rows["prompt_088"]["simultaneous_bound"] > 0.25
    assert cert["certified_set"] and result.selected in cert["certified_set"]
    assert "R = 0.5 R_sentiment + 0.5 R_sum (equal weights)" in cert["certificate"]
    assert "weighted risk over its tasks" in cert["guarantee"]
    # the label log holds the stacked table's scaled losses, each item named by its task
    labels = pq.read_table(tmp_path / "out" / "labels.parquet").to_pandas()
    factor = {t["name"]: t["factor"] for t in agg["tasks"]}
    task = labels["item_id"].str.split("/").str[0]
    assert set(task) == {"sentiment", "sum"}
    assert (labels["loss"] <= task.map(factor) + 1e-12).all()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| sentiment | 0.5 | 1167 | 1 |" in report and "sum: R on table (human labels)" in report
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and float(run.data.params["aggregate_unit"]) == pytest.approx(agg["unit"])
    assert run.data.params["source"] == "tasks"
