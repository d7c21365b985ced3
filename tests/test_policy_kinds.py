"""certsel.policies.kinds: the declarations the layers above read, the registry's errors, and
a new policy kind defined in this file, registered through the public API and run end to end
through a real local Ray and a real MLflow store."""

import json
import math

import numpy as np
import pytest
from certsel.config import ConfigError, parse_config
from certsel.orchestrator.commands.job import execute
from certsel.policies.estimation import EstimationPolicy
from certsel.policies.kinds import (
    POLICY_KINDS,
    Family,
    JudgeUse,
    Labels,
    PolicyInputs,
    PolicyKind,
    PolicySettings,
    get_policy_kind,
    register_policy_kind,
)
from certsel.workers.replay import DATA_DIR, load_loss_table
from mlflow.tracking import MlflowClient

TABLE = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
FIVE = ["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m6_r8_k16", "mx_m4_r2_k16", "mx_m3_r2_k64"]


class StitchedHoeffding(EstimationPolicy):
    """Uniform sampling without replacement with a stitched Hoeffding bound: after t labels,
    mean -/+ sqrt(log(1/delta_t) / (2 t)) with delta_t = delta / (t (t + 1)), one-sided,
    each side valid at every t at once (a union bound over t; Hoeffding's inequality holds
    for draws without replacement); the exact mean once every item is labelled."""

    name = "stitched-hoeffding"

    def __init__(self, n_items, *, delta, threshold=None, seed=None, strict=False):
        super().__init__(n_items, delta=delta, threshold=threshold, seed=seed, strict=strict)
        self._order = self._rng.permutation(self.n_items)

    def _radius(self, level: float) -> float:
        t = self.n_labeled
        return math.sqrt(math.log(t * (t + 1) / level) / (2 * t))

    def bounds(self):
        t = self.n_labeled
        if t == 0:
            return (0.0, 1.0, 0.0, 1.0)
        m = float(np.mean(self._losses))
        if self.exhausted:
            return (m, m, m, m)
        one, two = self._radius(self.delta), self._radius(self.delta / 2)
        return (max(m - one, 0.0), min(m + one, 1.0), max(m - two, 0.0), min(m + two, 1.0))

    def _choose(self, batch):
        start = self.n_labeled + len(self._pending)
        return self._order[start : start + batch].tolist()

    def _observe(self, items, losses):
        pass

    def state_dict(self) -> dict:
        return {**self._base_state(), "order": self._order.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict):
        p = cls(state["n_items"], delta=state["delta"], threshold=state["threshold"])
        p._restore_base(state)
        p._order = np.asarray(state["order"], dtype=np.int64)
        return p


class HoeffdingKind(PolicyKind):
    name = "hoeffding-test"
    family = Family.ESTIMATION
    labels = Labels.CHOSEN
    guarantee = ("Uniform draws without replacement and a Hoeffding bound stitched over every label count with "
                 "delta_t = delta / (t (t + 1)): valid at any stopping time by a union bound.")

    def build(self, settings: PolicySettings, inputs: PolicyInputs) -> StitchedHoeffding:
        return StitchedHoeffding(inputs.n_items, delta=settings.delta, threshold=settings.alpha, seed=settings.seed,
                                 strict=settings.strict)


@pytest.fixture()
def hoeffding():
    kind = register_policy_kind(HoeffdingKind)
    yield kind
    POLICY_KINDS.pop(kind.name, None)


# -- declarations ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, family, labels, judge, judge_partition, features", [
    ("r-eval", Family.TESTING, Labels.ORDER, JudgeUse.NONE, JudgeUse.NONE, False),
    ("r-autoeval", Family.TESTING, Labels.ORDER, JudgeUse.PAIRED, JudgeUse.PAIRED, False),
    ("r-autoeval+", Family.TESTING, Labels.ORDER, JudgeUse.PAIRED, JudgeUse.PAIRED, False),
    ("judge-stratified", Family.TESTING, Labels.CHOSEN, JudgeUse.FIRST, JudgeUse.FIRST, False),
    ("seq", Family.ESTIMATION, Labels.CHOSEN, JudgeUse.NONE, JudgeUse.NONE, False),
    ("cer-eval", Family.ESTIMATION, Labels.CHOSEN, JudgeUse.NONE, JudgeUse.FIRST, True),
])
def test_built_in_kinds_declare_what_they_need(name, family, labels, judge, judge_partition, features):
    kind = get_policy_kind(name)
    assert (kind.family, kind.labels) == (family, labels)
    assert kind.judge_use("embeddings") is judge and kind.judge_use("judge") is judge_partition
    assert kind.needs_features("embeddings") is features and not kind.needs_features("judge")


def test_config_reads_the_declarations():
    base = {"data": {"path": str(TABLE), "judge": "loss_judge_best", "order": "rank"},
            "objective": {"column": "avg_bitwidth"}}
    cfg = parse_config({**base, "policy": {"kind": "judge-stratified"}})
    assert cfg.policy.is_testing and cfg.policy.judge_first and not cfg.policy.uses_judge
    with pytest.raises(ConfigError, match=r"policy.kind must be one of r-eval, r-autoeval, r-autoeval\+, "
                                          r"judge-stratified, seq, cer-eval, got 'x'"):
        parse_config({**base, "policy": {"kind": "x"}})
    with pytest.raises(ConfigError, match="policy.partition 'judge' applies to policy.kind 'cer-eval' only, not 'seq'"):
        parse_config({**base, "policy": {"kind": "seq", "partition": "judge"}, "procedure": "bonferroni"})
    with pytest.raises(ConfigError, match="policy.observation 'paper' applies to policy.kind 'r-eval', 'r-autoeval', "
                                          "'r-autoeval\\+' only, not 'judge-stratified'"):
        parse_config({**base, "policy": {"kind": "judge-stratified", "observation": "paper"}})
    with pytest.raises(ConfigError, match="needs data.judge"):
        parse_config({**base, "data": {**base["data"], "judge": None}, "policy": {"kind": "judge-stratified"}})


def test_registry_refuses_malformed_kinds():
    class NoFamily(PolicyKind):
        name = "broken"

    with pytest.raises(ValueError, match="family must be a Family"):
        register_policy_kind(NoFamily)

    class OrderedEstimate(PolicyKind):
        name = "broken"
        family, labels = Family.ESTIMATION, Labels.ORDER

    with pytest.raises(ValueError, match="an estimation policy chooses its items"):
        register_policy_kind(OrderedEstimate)
    with pytest.raises(TypeError, match="must subclass PolicyKind"):
        register_policy_kind(object())
    assert "broken" not in POLICY_KINDS


def test_the_new_policy_is_anytime_valid_by_simulation():
    """Its one-sided upper bound covers R at every label count in >= 1 - delta of 400 runs on a
    candidate whose losses make the bound tight."""
    rng = np.random.default_rng(0)
    losses = (rng.random(400) < 0.3).astype(float)
    R = losses.mean()
    misses = 0
    for rep in range(400):
        p = StitchedHoeffding(400, delta=0.1, seed=rep)
        ever = False
        while not p.exhausted:
            items = p.next_items(10)
            p.update(items, losses[items])
            ever |= p.upper_bound < R
        misses += ever
    assert misses / 400 <= 0.1


# -- a new kind end to end -----------------------------------------------------------------------------
@pytest.mark.integration
def test_a_policy_kind_from_user_code_runs_through_ray_and_mlflow(ray_session, tmp_path, hoeffding):
    uri = f"sqlite:///{tmp_path}/store.db"
    cfg = parse_config({
        "data": {"path": str(TABLE)}, "candidates": FIVE, "policy": {"kind": "hoeffding-test"},
        "alpha": 0.2, "delta": 0.1, "procedure": "bonferroni", "objective": {"column": "avg_bitwidth"},
        "budget": {"n": 900, "batch": 150}, "seed": 3,
        "tracking": {"uri": uri}, "state": {"dir": str(tmp_path / "jobs"), "snapshot_every": 2},
        "runtime": "ray",  # the user's policy travels to Ray's actors by value: what this test is about
    })
    assert not cfg.policy.is_testing and cfg.policy.policy_kind is hoeffding
    result, run_id = execute(cfg, output=tmp_path / "report")

    # each candidate equals the policy run directly at its Bonferroni level, in the job's rounds
    table = load_loss_table(TABLE)
    for r in result.records:
        losses = table.human[list(table.candidates).index(r.name)]
        ref = StitchedHoeffding(table.items.size, delta=0.1 / 5, threshold=0.2, seed=(3, r.index))
        while not ref.done and ref.n_labeled < 900:
            items = ref.next_items(min(150, 900 - ref.n_labeled))
            ref.update(items, losses[items])
        assert (r.t, r.decision) == (ref.n_labeled, ref.decision)
        assert r.ci == pytest.approx(ref.ci, abs=1e-12)
    decided = [r.decision for r in result.records]
    assert -1 in decided and 1 in decided  # not vacuous: some certified below alpha, some above
    assert result.certified == [r.name for r in result.records if r.decision == -1]

    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["policy"] == "hoeffding-test"
    cert = json.loads((tmp_path / "report" / "selection.json").read_text())
    assert cert["certified_set"] == result.certified and cert["policy"]["kind"] == "hoeffding-test"
    assert "stitched over every label count" in json.dumps(cert)

    # restored from its snapshot: the kind's restore gives the same policy
    ref = StitchedHoeffding(100, delta=0.1, threshold=0.2, seed=1)
    ref.update(ref.next_items(30), np.zeros(30))
    back = hoeffding.restore(hoeffding.build(PolicySettings(alpha=0.2, delta=0.1, budget=100, seed=1),
                                             PolicyInputs(100)), ref.state_dict())
    assert back.ci == ref.ci and back.next_items(5).tolist() == ref.next_items(5).tolist()
