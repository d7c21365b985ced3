"""The label store's identity is complete by construction: two jobs whose candidates share an identity are served the
same labels, whatever key of the job schema differs between them.

The walk visits every leaf key of :class:`~certsel.config.RunConfig` (found from the schema itself, so a key added later
is visited too), changes it to each value it can take here, and checks on the real plan and the real replay source: an
unchanged identity means the same item ids and the same human and judge losses on every item. Keys that cannot be walked
on a table (another source's section) are named with the reason, and the walk fails on a key that is neither walked nor
named. The lm-eval source gets the same walk over its options."""

from __future__ import annotations

import types
import typing
from typing import Literal, get_args, get_origin

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel

from certsel.config import ConfigError, RunConfig, parse_config
from certsel.errors import InputError

# sections of other label sources: a replay job has none of them, and their kinds' identities are checked on their own
# (live, python and label-studio sources have none: they never reuse a label; lm-eval: the walk below)
OTHER_SOURCES = {"live": "live servers: no identity, never reused (LiveKind)",
                 "source": "a Python function: no identity, never reused (PythonKind)",
                 "labels": "a registered source's options: walked per kind (lm-eval below)",
                 "tasks": "multi-task jobs: each task is a job of its own, or an aggregate without identity",
                 "aggregate": "multi-task aggregates: no identity, never reused (TasksKind)"}
# leaves whose values are not scalars the walk can vary on its own: the reason they cannot change a replay label
NOT_VARIED = {"plugins": "modules imported before validation (registries), not the table's rows",
              "candidates": "which candidates run; each keeps its identity (varied below by hand)",
              "order": "the fixed sequence's order (varied below by hand)",
              "policy.betting": "the bet (a strategy spec): the test, not the labels",
              "aggregate.weights": "multi-task aggregates",
              "ray.address": "where Ray runs", "tracking.uri": "where the job is tracked",
              "state.dir": "where the job's folder is", "state.store": "the store itself",
              "series.releases": "filled in from the store's series ledger: each claim's place in its series, not "
                                 "its labels"}

COLUMNS = {
    "candidate": ["candidate", "cand2"], "item": ["item", "item2"], "human": ["loss_human", "loss2"],
    "judge": ["judge", "judge2"], "order": ["rank", "rank2"], "score": ["score", "score2"],
    "reference": ["reference", "reference2"], "judge_score": ["judge_score", "judge_score2"],
    "judge_reference": ["judge_reference", "judge_reference2"], "column": ["cost", "cost2"],
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """Four candidates on 60 items, every column with a twin of other values: cand2 names the rows of another
    candidate, item2 is another id per row, the loss and score twins differ on some items."""
    tmp = tmp_path_factory.mktemp("identity")
    rng = np.random.default_rng(5)
    names, n = ["a", "b", "c", "d"], 60
    rows = {k: [] for k in ("candidate", "cand2", "item", "item2", "loss_human", "loss2", "judge", "judge2", "rank",
                            "rank2", "score", "score2", "reference", "reference2", "judge_score", "judge_score2",
                            "judge_reference", "judge_reference2", "cost", "cost2")}
    ref = (rng.random(n) < 0.8).astype(float)
    for k, name in enumerate(names):
        score = np.where(rng.random(n) < 0.2, 1 - ref, ref)
        rows["candidate"] += [name] * n
        rows["cand2"] += [names[(k + 1) % 4]] * n
        rows["item"] += list(range(n))
        rows["item2"] += [f"q{(i * 7) % n}" for i in range(n)]
        for col, twin in (("loss_human", "loss2"), ("judge", "judge2")):
            x = (rng.random(n) < 0.1 + 0.1 * k).astype(float)
            rows[col] += x.tolist()
            rows[twin] += np.where(rng.random(n) < 0.3, 1 - x, x).tolist()
        rows["score"] += score.tolist()
        rows["score2"] += np.where(rng.random(n) < 0.3, 1 - score, score).tolist()
        rows["reference"] += ref.tolist()
        rows["reference2"] += np.where(rng.random(n) < 0.3, 1 - ref, ref).tolist()
        rows["judge_score"] += np.where(rng.random(n) < 0.1, 1 - score, score).tolist()
        rows["judge_score2"] += np.where(rng.random(n) < 0.4, 1 - score, score).tolist()
        rows["judge_reference"] += np.where(rng.random(n) < 0.1, 1 - ref, ref).tolist()
        rows["judge_reference2"] += np.where(rng.random(n) < 0.4, 1 - ref, ref).tolist()
        rows["rank"] += [k] * n
        rows["rank2"] += [3 - k] * n
        rows["cost"] += [float(k)] * n
        rows["cost2"] += [float(10 - k)] * n
    path = tmp / "t.parquet"
    pq.write_table(pa.table(rows), path)
    feats = {"item": list(range(n)), **{f"e{j}": rng.normal(size=n).tolist() for j in range(3)}}
    pq.write_table(pa.table(feats), tmp / "f.parquet")
    pq.write_table(pa.table({**feats, "e0": (np.asarray(feats["e0"]) + 1).tolist()}), tmp / "f2.parquet")
    other = pa.table({**rows, "loss_human": np.where(np.arange(4 * n) == 3, 1 - np.asarray(rows["loss_human"]),
                                                     rows["loss_human"]).tolist()})
    pq.write_table(other, tmp / "t2.parquet")  # one loss changed
    pq.write_table(pa.table(rows), tmp / "copy.parquet")  # the same content elsewhere
    return tmp


def _bases(tmp):
    store = {"store": str(tmp / "labels.db")}
    risk = {"data": {"path": str(tmp / "t.parquet"), "judge": "judge", "order": "rank", "features": str(tmp / "f.parquet")},
            "objective": {"column": "cost"}, "budget": {"n": 10, "r": 1}, "state": store}
    recovery = {"data": {"path": str(tmp / "t.parquet"), "score": "score", "reference": "reference", "order": "rank",
                         "judge_score": "judge_score", "judge_reference": "judge_reference"},
                "recovery": {"at_least": 0.9}, "policy": {"kind": "r-eval"}, "budget": {"n": 10}, "state": store}
    return {"risk": risk, "recovery": recovery}


def _model(annotation):
    """The BaseModel inside an annotation (Optional[M], M), else None."""
    for a in (annotation, *get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def leaves(model: type[BaseModel], prefix: str = "") -> dict[str, object]:
    """Every leaf key of a config model (dotted path -> its annotation), sections of sub-models walked."""
    out = {}
    for name, field in model.model_fields.items():
        path = prefix + name
        sub = _model(field.annotation)
        if sub is not None and get_origin(field.annotation) not in (list, dict):
            out.update(leaves(sub, path + "."))
        else:
            out[path] = field.annotation
    return out


def _scalars(annotation) -> list[type]:
    args = get_args(annotation) if get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    return [a for a in args if a is not type(None)]


def variants(path: str, annotation, value, tmp) -> list:
    """The values a leaf is changed to: every other choice of a Literal, the other truth value, nearby numbers, the twin
    columns of the table, other files."""
    last = path.split(".")[-1]
    if path.startswith(("data.", "objective.")) and last in COLUMNS:
        return [c for c in COLUMNS[last] if c != value] + ([None] if value is not None else [])
    if path == "data.path":
        return [str(tmp / "t2.parquet"), str(tmp / "copy.parquet")]
    if path == "data.features":
        return [str(tmp / "f2.parquet"), None]
    out = []
    for a in _scalars(annotation):
        if get_origin(a) is Literal:
            out += [c for c in get_args(a) if c != value]
        elif a is bool:
            out.append(not value)
        elif a is int:
            out += [1 if value is None else value + 1, 2 if value is None else value * 2]
        elif a is float:
            out += [0.05 if value is None else value * 0.9, 0.2 if value is None else min(value * 1.1, 0.99)]
        elif a is str:
            out.append("other" if value is None else f"{value}x")
        elif get_origin(a) is tuple:
            out.append([0.0, 5.0])
    if value is not None and _scalars(annotation) != [type(None)] and type(None) in get_args(annotation):
        out.append(None)
    return out


def _get(raw: dict, cfg: RunConfig, path: str):
    obj = cfg
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj


def _set(raw: dict, path: str, value) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    node = out
    parts = path.split(".")
    for part in parts[:-1]:
        node[part] = dict(node.get(part) or {})
        node = node[part]
    node[parts[-1]] = value
    return out


def served(raw: dict) -> dict | None:
    """name -> (identity, item ids, human losses, judge losses or None) of every candidate of the job, from its real
    plan and the candidates' real replay sources; None when the job is not one (bad input)."""
    from certsel.orchestrator.engine.plan import JobPlan
    from certsel.orchestrator.inputs.sources import load_job_data

    try:
        cfg = parse_config(raw)
        data = load_job_data(cfg)
        plan = JobPlan(cfg, data, None)
    except (ConfigError, InputError, ValueError):
        return None
    every = np.arange(data.n_items)
    out = {}
    for spec in plan.specs:
        human, judge = data.table.human[data.names.index(spec.name)], data.table.judge
        rows = (human, None if judge is None else judge[data.names.index(spec.name)])
        src = spec.source.build(plan.arrays, rows)
        out[spec.name] = (spec.identity, tuple(data.item_ids), src.human(every).tobytes(),
                          None if judge is None else src.judge(every).tobytes())
    return out


def _same_labels(a, b) -> bool:
    return a[1] == b[1] and a[2] == b[2] and (a[3] is None or b[3] is None or a[3] == b[3])


def test_every_key_of_the_job_schema_changes_the_identity_or_no_label(table):
    """For each leaf key and each value it can take, on a risk and a recovery job: a candidate whose identity did not
    change is served the same labels. Every leaf is walked or named with its reason."""
    walked, changed = set(), set()
    for kind, base_raw in _bases(table).items():
        base = served(base_raw)
        assert base is not None and all(v[0] is not None for v in base.values()), kind
        cfg = parse_config(base_raw)
        for path, annotation in leaves(RunConfig).items():
            if path.split(".")[0] in OTHER_SOURCES or path in NOT_VARIED:
                continue
            for value in variants(path, annotation, _get(base_raw, cfg, path), table):
                got = served(_set(base_raw, path, value))
                walked.add(path)
                if got is None:
                    continue  # not a job: nothing is labelled
                for name in base.keys() & got.keys():
                    if got[name][0] == base[name][0]:
                        assert _same_labels(got[name], base[name]), (kind, path, value, name)
                    elif not _same_labels(got[name], base[name]):
                        changed.add(path)
    every = set(leaves(RunConfig))
    named = {p for p in every if p.split(".")[0] in OTHER_SOURCES} | set(NOT_VARIED)
    assert set(NOT_VARIED) <= every, "a named key is no longer in the schema"
    assert every - named - walked == set(), "keys neither walked nor named with a reason"
    # the keys that choose which rows, ids and values a candidate gets do change its labels, and so its identity
    assert {"data.candidate", "data.item", "data.human", "data.judge", "data.path", "data.score", "data.reference",
            "data.judge_score", "data.judge_reference", "recovery.at_least"} <= changed


def test_the_keys_walked_by_hand_keep_each_candidates_identity(table):
    base_raw = _bases(table)["risk"]
    base = served(base_raw)
    for change in ({"candidates": ["b", "a"]}, {"order": ["c", "a", "b"]}, {"state": {"store": str(table / "o.db")}}):
        got = served({**base_raw, **change})
        for name in got:
            assert got[name][0] == base[name][0] and _same_labels(got[name], base[name]), change
    # the same rows under another file name are the same labels: the identity follows the values, not the path
    assert served(_set(base_raw, "data.path", str(table / "copy.parquet"))) == base


def test_an_lm_eval_identity_covers_every_option_but_names_and_plumbing():
    """The lm-eval identity is its worker spec less the candidate's name, cache folder and batch size: every option of
    the source that reaches the spec changes it."""
    from certsel.orchestrator.inputs.jobdata import JobData
    from certsel.orchestrator.inputs.lm_eval_kind import LmEvalCandidate, LmEvalKind, LmEvalOptions

    plumbing = {"cache_dir", "candidates.id", "candidates.batch_size", "candidates.objective", "reference.id",
                "reference.batch_size", "reference.objective"}
    cand = {"id": "a", "model": "local-completions", "model_args": "base_url=http://127.0.0.1:9/v1,model=m"}
    base_opts = {"kind": "lm-eval", "task": "t", "candidates": [cand], "reference": {**cand, "id": "ref"}}

    def identity(opts):
        cfg = parse_config({"labels": opts, "policy": {"kind": "r-eval"}, "alpha": 0.3})
        # what loading the task gives (a fingerprint of its config and documents, the metric it resolves)
        data = JobData(table=None, features=None, fingerprint=f"content of {opts['task']} {opts.get('include_path')}",
                       live=(LmEvalCandidate(**opts["candidates"][0]),), function=(opts.get("metric") or "acc", True),
                       n_source_items=10)
        return LmEvalKind().label_identity(cfg, data, 0)

    base = identity(base_opts)
    fields = {f"{sec}.{k}": a for sec in ("candidates", "reference") for k, a in
              ((k, f.annotation) for k, f in LmEvalCandidate.model_fields.items())}
    fields.update({k: f.annotation for k, f in LmEvalOptions.model_fields.items() if k not in ("candidates", "reference")})
    for path, annotation in fields.items():
        sec, _, key = path.rpartition(".")
        for value in variants(path, annotation, (cand if sec else base_opts).get(key), None):
            opts = dict(base_opts)
            if sec == "candidates":
                opts["candidates"] = [{**cand, key: value}]
            elif sec == "reference":
                opts["reference"] = {**base_opts["reference"], key: value}
            else:
                opts[key] = value
            if path in plumbing:
                assert identity(opts) == base, path
            else:
                assert identity(opts) != base, (path, value)


def _swap_table(path, n=400):
    """cfgY under ``candidate`` has recovery about 1.0; under ``cand2`` the name cfgY marks the rows of a config with
    recovery about 0.85; ``item2`` numbers the items in another order."""
    rng = np.random.default_rng(11)
    ref = (rng.random(n) < 0.7).astype(float)
    good = ref.copy()
    bad = np.where((ref == 1) & (rng.random(n) < 0.15), 0.0, ref)
    rows = {"candidate": ["cfgY"] * n + ["cfgZ"] * n, "cand2": ["cfgZ"] * n + ["cfgY"] * n,
            "item": list(range(n)) * 2, "item2": list(rng.permutation(n)) * 2,
            "score": good.tolist() + bad.tolist(), "reference": ref.tolist() * 2}
    pq.write_table(pa.table(rows), path)


@pytest.mark.integration
@pytest.mark.parametrize("key, value", [("candidate", "cand2"), ("item", "item2")])
def test_a_gate_that_reads_other_rows_for_the_same_name_reuses_nothing(tmp_path, ray_session, key, value):
    """The measured false PASS: a gate reading other rows (data.candidate) or other ids (data.item) for cfgY reused the
    labels bought for cfgY's first rows. Now it reuses none and decides as it does with an empty store."""
    from certsel.gates import gate

    _swap_table(tmp_path / "t.parquet")
    job = {"data": {"path": str(tmp_path / "t.parquet"), "score": "score", "reference": "reference"},
           "recovery": 0.95, "policy": {"kind": "r-eval"}, "budget": {"n": 150}, "seed": 1,
           "state": {"dir": str(tmp_path / "jobs")}}
    store = tmp_path / "labels.db"
    first = gate(job, only=["cfgY"], labels=store, track=False)
    assert first.rows[0].labels > 0
    swapped = {**job, "data": {**job["data"], key: value}}
    shared = gate(swapped, only=["cfgY"], labels=store, track=False, fresh=True)
    alone = gate(swapped, only=["cfgY"], labels=tmp_path / "empty.db", track=False, fresh=True)
    assert shared.rows[0].reused == 0
    assert shared.outcomes == alone.outcomes
    assert (shared.rows[0].labels, shared.rows[0].e_value, shared.rows[0].bound) == \
        (alone.rows[0].labels, alone.rows[0].e_value, alone.rows[0].bound)
    if key == "candidate":  # the other rows are a worse config: no pass
        assert first.outcomes == {"cfgY": "pass"} and shared.outcomes["cfgY"] != "pass"
