"""certsel.orchestrator.inputs.sources: the label-source registry, and a new label source defined in
this file (a JSON-lines annotation export), registered through the public API and run end to
end through a real local Ray and a real MLflow store: the same e-values, selection and
certificate as the replay job on the same losses."""

import json
from dataclasses import dataclass

import numpy as np
import pytest
from certsel.config import LiveCandidateRef, parse_config
from certsel.errors import InputError
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.inputs.jobdata import JobData, fingerprint, listed
from certsel.orchestrator.inputs.sources import (
    SOURCE_KINDS,
    Provides,
    SourceKind,
    get_source_kind,
    load_job_data,
    register_source_kind,
)
from certsel.workers.replay import DATA_DIR, load_loss_table
from mlflow.tracking import MlflowClient
from pydantic import BaseModel, ConfigDict

TABLE = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
FOUR = ["mx_m10_r8_k16", "mx_m6_r8_k16", "mx_m4_r2_k16", "mx_m3_r2_k64"]


class AnnotationSource:
    """One model's labels from an annotation export: every item's human and judge loss, read
    once; asking again for an item is free."""

    def __init__(self, path: str, model: str, has_judge: bool):
        rows = [r for r in map(json.loads, open(path)) if r["model"] == model]
        self._losses = {"human": np.zeros(len(rows)), "judge": np.zeros(len(rows))}
        for r in rows:
            self._losses["human"][r["item"]], self._losses["judge"][r["item"]] = r["human"], r["judge"]
        self.has_judge = has_judge
        self._seen = {"human": set(), "judge": set()}
        self.requests = 0
        self.log: list = []  # (items, role, losses) of every label bought, in order

    @property
    def n_items(self) -> int:
        return self._losses["human"].size

    @property
    def human_labels(self) -> int:
        return len(self._seen["human"])

    @property
    def judge_labels(self) -> int:
        return len(self._seen["judge"])

    def _labels(self, items, role):
        items = np.asarray(items, dtype=np.int64)
        new = np.array([i for i in dict.fromkeys(items.tolist()) if i not in self._seen[role]], dtype=np.int64)
        if new.size:
            self._seen[role].update(new.tolist())
            self.requests += int(new.size)
            self.log.append((new, role, self._losses[role][new]))
        return self._losses[role][items]

    def human(self, items):
        return self._labels(items, "human")

    def judge(self, items):
        if not self.has_judge:
            raise ValueError("this export has no judge")
        return self._labels(items, "judge")


@dataclass(frozen=True)
class AnnotationSpec:
    path: str
    model: str
    judge: bool

    def build(self, arrays, rows):
        return AnnotationSource(self.path, self.model, self.judge)


class AnnotationOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    judge: bool = False
    objectives: dict[str, float] = {}


class AnnotationsKind(SourceKind):
    name = "annotations-test"
    options = AnnotationOptions

    def provides(self, cfg):
        return Provides(self.settings(cfg).judge, False, "labels.judge: true", "labels.features")

    def load(self, cfg):
        opts = self.settings(cfg)
        models, items = {}, set()
        for r in map(json.loads, open(opts.path)):
            models.setdefault(r["model"], None)
            items.add(r["item"])
        cands = listed(cfg, [LiveCandidateRef(id=m, objective=opts.objectives.get(m)) for m in models], "the export")
        return JobData(table=None, features=None, fingerprint=fingerprint(opts.path), live=cands,
                       n_source_items=len(items))

    def spec(self, cfg, data, k, with_judge):
        opts = self.settings(cfg)
        return AnnotationSpec(opts.path, data.names[k], opts.judge and with_judge)

    def items_words(self, n_items):
        return f"the {n_items} items of the annotation export"


@pytest.fixture()
def annotations(tmp_path):
    register_source_kind(AnnotationsKind)
    table = load_loss_table(TABLE, judge="loss_judge_best", objective="avg_bitwidth")
    path = tmp_path / "export.jsonl"
    with open(path, "w") as f:
        for m in FOUR:
            k = list(table.candidates).index(m)
            for i in range(table.items.size):
                f.write(json.dumps({"model": m, "item": i, "human": float(table.human[k, i]),
                                    "judge": float(table.judge[k, i])}) + "\n")
    objectives = {m: float(table.objective[list(table.candidates).index(m)]) for m in FOUR}
    yield path, objectives
    SOURCE_KINDS.pop("annotations-test", None)


def _job(tmp_path, source: dict, **over):
    return parse_config({**source, "candidates": FOUR, "policy": {"kind": "r-autoeval+"}, "alpha": 0.1,
                         "delta": 0.1, "procedure": "bonferroni", "objective": {"column": "avg_bitwidth"},
                         "budget": {"n": 300, "r": 3}, "seed": 4, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
                         **over})


def test_registry_errors_are_one_line(tmp_path, annotations):
    path, _ = annotations
    with pytest.raises(InputError, match=r"labels.kind must be one of lm-eval, label-studio, annotations-test, got 'nope'"):
        load_job_data(_job(tmp_path, {"labels": {"kind": "nope"}}))
    with pytest.raises(InputError, match="labels.path: Field required"):
        load_job_data(_job(tmp_path, {"labels": {"kind": "annotations-test"}}))
    with pytest.raises(InputError, match=r"policy 'r-autoeval\+' needs labels.judge: true \(the judge\)"):
        load_job_data(_job(tmp_path, {"labels": {"kind": "annotations-test", "path": str(path)}}))
    good = {"labels": {"kind": "annotations-test", "path": str(path), "judge": True}}
    with pytest.raises(InputError, match="candidates: unknown candidate.s. not in the export: mx_x"):
        load_job_data(_job(tmp_path, good, candidates=[*FOUR, "mx_x"]))
    with pytest.raises(InputError, match=r"budget: n\*\(1\+r\) = 40000 items needed per candidate but the "
                                         r"annotations-test source has 9960"):
        load_job_data(_job(tmp_path, good, budget={"n": 10000, "r": 3}))
    with pytest.raises(InputError, match="objective: the annotations-test source gives no objective for candidate.s. "
                                         "mx_m10_r8_k16"):
        load_job_data(_job(tmp_path, good))
    with pytest.raises(ValueError, match="set options"):
        register_source_kind(type("NoOptions", (SourceKind,), {"name": "x"}))
    assert get_source_kind("replay").name == "replay" and "x" not in SOURCE_KINDS


@pytest.mark.integration
def test_a_label_source_from_user_code_runs_through_ray_and_mlflow(ray_session, tmp_path, annotations):
    path, objectives = annotations
    cfg = _job(tmp_path, {"labels": {"kind": "annotations-test", "path": str(path), "judge": True,
                                     "objectives": objectives}})
    result, run_id = execute(cfg, output=tmp_path / "report")
    replay, _ = execute(_job(tmp_path, {"data": {"path": str(TABLE), "judge": "loss_judge_best"}}),
                        output=tmp_path / "replay")

    # the same losses through another source: the same e-values, labels, selection
    by_name = {r.name: r for r in replay.records}
    assert sorted(by_name) == sorted(r.name for r in result.records)
    for a in result.records:
        b = by_name[a.name]
        assert (a.t, a.n_human, a.n_judge, a.status) == (b.t, b.n_human, b.n_judge, b.status)
        np.testing.assert_allclose(a.path, b.path, rtol=1e-12, atol=1e-12)  # hosts stack rows differently: BLAS ulps
    assert sorted(result.certified) == sorted(replay.certified) and result.selected == replay.selected
    assert result.certified and len(result.certified) < 4  # not vacuous

    run = MlflowClient(f"sqlite:///{tmp_path}/store.db").get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["source"] == "annotations-test"
    cert = json.loads((tmp_path / "report" / "selection.json").read_text())
    assert cert["data"]["path"] == str(path) and "of the annotation export" in json.dumps(cert)
    assert sorted(cert["certified_set"]) == sorted(replay.certified)
