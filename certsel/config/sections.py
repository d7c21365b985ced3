"""The sections of a job file: policy, objective, budget, costs, scheduling, pairwise, tracking, Ray, state, recovery,
tasks and aggregate (each checked on its own; :mod:`.schema`'s RunConfig checks them together)."""

from __future__ import annotations

import pathlib
from typing import Literal

from pydantic import Field, field_validator, model_validator

from certsel.policies.budget_stop import DEFAULT_LEVEL as BUDGET_STOP_LEVEL
from certsel.policies.procedures import PROCEDURES
from certsel.policies.betting import BettingStrategy, get_strategy
from certsel.policies.pair_bets import pair_bet
from certsel.policies.kinds import POLICY_KINDS, Family, JudgeUse, PolicyKind, get_policy_kind

from certsel.policies.recovery import Recovery
from certsel.policies.regression import Regression
from certsel.policies.sampling import SAMPLINGS, IID, Sampling, sampling_named

from .base import Strict
from certsel.home import jobs_dir
from .sources import DataConfig


class PolicyConfig(Strict):
    # a registered policy kind (certsel.policies.kinds.POLICY_KINDS): r-eval, r-autoeval, r-autoeval+,
    # judge-stratified, seq, cer-eval, or one added with register_policy_kind
    kind: str = "r-autoeval+"
    # a registered betting strategy (certsel.policies.BETS): a name or a mapping, e.g. {kind: up, prior: grid}
    betting: str | dict = "up"
    radius: Literal["betting", "paper"] = "betting"
    # R-Eval / R-AutoEval(+): "split" (two factors sharing each bet, so the largest bet does not pay for the
    # judge-only mean's range; docs/statistics.md) or "paper" (eq. 10 of R-AutoEval+, one factor)
    observation: Literal["split", "paper"] = "split"
    # R-Eval / R-AutoEval(+): "iid" certifies the risk of the items' distribution (the papers' setting);
    # "without-replacement" the exact mean over the table's items (docs/statistics.md, "Sampling without replacement")
    sampling: Literal[SAMPLINGS] = "iid"
    # Cer-Eval's groups: 1-NN on item embeddings (Algorithm 2), or strata of the judge's loss
    partition: Literal["embeddings", "judge"] = "embeddings"

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v):
        get_policy_kind(v)  # an unknown name is a one-line error listing the registered kinds
        return v

    @field_validator("betting")
    @classmethod
    def _known_strategy(cls, v):
        get_strategy(v)  # unknown names and bad parameters are one-line errors
        return v

    @property
    def strategy(self) -> BettingStrategy:
        """The betting strategy object (for the testing policies)."""
        return get_strategy(self.betting)

    @property
    def policy_kind(self) -> PolicyKind:
        """The registered kind (its declarations: family, labels, judge, features)."""
        return get_policy_kind(self.kind)

    @property
    def is_testing(self) -> bool:
        """An e-process policy (R-Eval, R-AutoEval, R-AutoEval+, judge-stratified), not an estimation one."""
        return self.policy_kind.family is Family.TESTING

    @property
    def uses_judge(self) -> bool:
        """A testing policy that pairs human labels with judge-only labels (rho > 0)."""
        return self.policy_kind.judge_use(self.partition) is JudgeUse.PAIRED

    @property
    def judge_first(self) -> bool:
        """The judge's loss on every item is bought before any human label (Cer-Eval judge strata, judge-stratified)."""
        return self.policy_kind.judge_use(self.partition) is JudgeUse.FIRST

    @property
    def needs_features(self) -> bool:
        return self.policy_kind.needs_features(self.partition)

    @property
    def without_replacement(self) -> bool:
        """A betting test of the finite table's mean (``sampling: without-replacement``)."""
        return self.sampling != IID.name

    def sampling_for(self, n_items: int | None) -> Sampling:
        """The sampling object of a betting test on a table of ``n_items`` (i.i.d. where unknown)."""
        return sampling_named(self.sampling, n_items) if n_items else IID()

    @model_validator(mode="after")
    def _options_apply(self):
        kind = self.policy_kind
        for key, default in (("partition", "embeddings"), ("observation", "split"), ("sampling", "iid")):
            if getattr(self, key) != default and key not in kind.takes:
                takers = [n for n, k in POLICY_KINDS.items() if key in k.takes]
                raise ValueError(f"policy.{key} {getattr(self, key)!r} applies to policy.kind "
                                 f"{', '.join(repr(n) for n in takers)} only, not {self.kind!r}")
        kind.validate(self.radius, self.partition)
        return self


class ObjectiveConfig(Strict):
    column: str
    goal: Literal["minimize", "maximize"] = "minimize"


class BudgetConfig(Strict):
    n: int = Field(300, gt=0, description="human labels per candidate")
    r: int = Field(3, ge=0, description="judge-only labels per human label")
    batch: int = Field(25, gt=0, description="human labels per candidate per driver round (the largest round)")
    min_batch: int = Field(5, gt=0, description="smallest round of a candidate close to its decision")
    max_requests: int | None = Field(None, gt=0, description="cap on label-source requests over the job")

    @model_validator(mode="after")
    def _min_batch_fits(self):
        if "min_batch" in self.model_fields_set and self.min_batch > self.batch:
            raise ValueError(f"budget.min_batch ({self.min_batch}) must not exceed budget.batch ({self.batch})")
        return self

    @property
    def smallest_round(self) -> int:
        """The smallest round: ``min_batch``, or ``batch`` when only that was set smaller."""
        return min(self.min_batch, self.batch)


class CostsConfig(Strict):
    """What a job's labels cost in one unit (dollars, GPU-seconds, annotator minutes): per human label, per target
    generation (a request that is not a judge call) and per judge call; the spend goes to the CLI, report,
    selection.json and MLflow."""

    human: float = Field(0.0, ge=0, allow_inf_nan=False, description="per human label")
    generation: float = Field(0.0, ge=0, allow_inf_nan=False, description="per target generation")
    judge: float = Field(0.0, ge=0, allow_inf_nan=False, description="per judge call")
    gpu_hour: float = Field(0.0, ge=0, allow_inf_nan=False,
                            description="per GPU-hour of the job's own model servers (live.serve)")
    unit: str = Field("units", min_length=1, max_length=24)

    def of(self, human: int, judge: int, requests: int) -> dict:
        """The spend of these counters, by kind and in total (generations: requests that were not judge calls)."""
        generation = max(int(requests) - int(judge), 0)
        out = {"human": human * self.human, "generation": generation * self.generation, "judge": judge * self.judge}
        out["total"] = sum(out.values())
        return out


class SchedulingConfig(Strict):
    # adaptive: stop candidates whose fate is settled (FST frontier, certified, hopeless);
    # full: every candidate runs to its budget (the baseline the savings are measured against)
    mode: Literal["adaptive", "full"] = "adaptive"
    lookahead: int = Field(1, ge=0, description="FST: candidates past the frontier that run alongside it")
    # Bonferroni: stop candidates whose objective is no better than a certified one's; the
    # selection is unchanged, the certified set then only lists candidates that could matter
    prune: bool = False
    # futility (testing policies): stop a candidate once "R >= alpha" is certified at this level by a second
    # e-process on the mirrored losses; it never certifies, so the family-wise error is unchanged, and a candidate
    # with R < alpha is stopped with probability <= futility. Unset: DEFAULT_FUTILITY; null: off
    futility: float | None = Field(None, gt=0, lt=1)
    # budget stop (testing policies, policies/budget_stop.py): stop a candidate, not certified, once its remaining
    # budget would certify it with probability < budget_stop / 2, its growth taken at its upper budget_stop / 2 bound
    # (with a learned bet's regret term); it never certifies, so every guarantee is unchanged, and a candidate the full
    # budget would certify is stopped with probability <= budget_stop (a Gaussian model of the e-process;
    # benchmarks/budget_stop.py). In a gate with a futility test, only when neither test is likely to reach its level
    # (a fail is a decision; in a selection a futile candidate ends uncertified as a stopped one does).
    # Unset: DEFAULT_BUDGET_STOP (testing policies); null: off
    budget_stop: float | None = Field(None, gt=0, lt=1)
    # rounds (testing policies, a ranking's pairs): "predicted" gives a candidate close to its threshold (a pair close
    # to an order or a tie) a round of about the labels its evidence says it still needs, between budget.min_batch
    # and budget.batch, so it does not buy a whole round past its decision; "fixed": budget.batch for every one
    rounds: Literal["predicted", "fixed"] = "predicted"
    # FST: where the sequence starts: "top" (its first config) or "pilot" (a judge-only pilot on pilot_items items of
    # its own random draws estimates the frontier; the sequence starts pilot_margin configs before it, toward the
    # heavier ones; configs before it are not tested, policies/pilot.py says why the guarantee holds). Unset: "pilot"
    # where one applies (fst, a replay table's judge, a policy pairing human labels with it, no recovery or tasks)
    start: Literal["top", "pilot"] = "top"
    pilot_items: int = Field(200, ge=1, description="start: pilot: items the judge labels for each config")
    pilot_margin: int = Field(2, ge=0, description="start: pilot: configs before the estimated frontier")
    pilot_check: int = Field(30, ge=0, description="start: pilot: human labels people check the start on (0: none)")

    def stated(self) -> dict:
        """The keys as a certificate states them: the pilot's only when the job starts from one, the budget stop's only
        when it is on (jobs without it keep the certificate and identity they had)."""
        left_out = (set() if self.start == "pilot" else set(PILOT_KEYS)) | \
            ({"budget_stop"} if self.budget_stop is None else set())
        return self.model_dump(exclude=left_out or None)


# scheduling.futility's level where the job does not set it (testing policies; None turns it off)
DEFAULT_FUTILITY = 0.05
# scheduling.budget_stop's level where the job does not set it (testing policies; None turns it off)
DEFAULT_BUDGET_STOP = BUDGET_STOP_LEVEL

def _gates(name) -> bool:
    """Whether ``procedure: NAME`` is a gate (False for a name the field's validation reports)."""
    return isinstance(name, str) and name in PROCEDURES and PROCEDURES[name].gates


# the scheduling keys a job states only when it starts from a pilot (other jobs keep the certificate and identity they
# had before these keys existed)
PILOT_KEYS = ("start", "pilot_items", "pilot_margin", "pilot_check")


class PairwiseConfig(Strict):
    """What a pairwise ranking is for (``procedure: pairwise``): ``ranking`` certifies as much of the order as the
    budget allows, stopping pairs whose order certified pairs already imply; ``best`` the best model only, comparing
    possible winners; ``topk`` the ``topk`` best; ``all`` runs every pair until its sign is certified. With ``epsilon``
    (loss units) a pair also ends "tied within epsilon" once |R_A - R_B| < epsilon is certified (not with ``all``)."""

    goal: Literal["ranking", "best", "topk", "all"] = "ranking"
    topk: int | None = Field(None, ge=1, description="goal topk: how many of the best to certify")
    epsilon: float | None = Field(None, description="a pair closer than this (in loss units) can be certified tied")
    # None: "margin" where the pair policies take a bet (Seq, radius betting), else the policy's own; "plug-in":
    # Seq's own bet (WSR's predictable plug-in)
    bet: str | None = Field(
        None, description="the pair tests' bets (policies/pair_bets.py, registered in policies/bets.py): 'margin' (sized for the order or tie "
                          "each pair is closest to deciding) or 'plug-in' (Seq's own); default: margin where the "
                          "policy takes it")

    @field_validator("bet")
    @classmethod
    def _known_bet(cls, v):
        if v is not None:
            pair_bet(v)  # a one-line error naming the registered bets
        return v

    @field_validator("epsilon")
    @classmethod
    def _epsilon_in_range(cls, v):
        if v is not None and not 0 < v < 1:
            raise ValueError(f"epsilon must be in (0, 1) (a difference of risks in loss units), got {v!r}")
        return v

    @model_validator(mode="after")
    def _goal_options(self):
        if self.goal == "topk" and self.topk is None:
            raise ValueError("goal 'topk' needs topk: K (how many of the best models to certify)")
        if self.topk is not None and self.goal != "topk":
            raise ValueError(f"topk is for goal 'topk', not {self.goal!r}")
        if self.epsilon is not None and self.goal == "all":
            raise ValueError("epsilon: goal 'all' runs every pair until its sign is certified and uses no ties; use "
                             "goal ranking, best or topk")
        return self


class TrackingConfig(Strict):
    uri: str | None = None  # default: MLFLOW_TRACKING_URI, else sqlite:///CERTSEL_HOME/mlruns.db
    experiment: str = Field("certsel", min_length=1)
    # when to compute the two-sided interval of a testing policy (a bisection, ~0.1-0.3 s)
    intervals: Literal["every_round", "final", "none"] = "final"


class RayConfig(Strict):
    address: str | None = None  # default: RAY_ADDRESS, else a local ray.init()
    num_cpus: int | None = Field(None, gt=0)
    max_actors: int | None = Field(None, gt=0, description="default: one per candidate up to the cluster's CPUs")


class StateConfig(Strict):
    """Where a job keeps its durable label log, and whether an unfinished job with the same
    configuration is resumed (see :mod:`certsel.orchestrator.engine.state`)."""

    # default: CERTSEL_HOME/jobs (certsel.home); a relative path is beside the job file
    dir: pathlib.Path = Field(default_factory=jobs_dir)
    resume: Literal["auto", "never"] = "auto"
    snapshot_every: int = Field(10, ge=1, description="rounds between policy snapshots and driver checkpoints")
    # labels and each claim's test kept across jobs (workers/label_store.py, workers/claims.py): a job on the same
    # model, task, item and settings reuses what an earlier one bought and continues its claims' tests. Absent: the
    # front ends (certsel run, certsel gate, the Python API) use CERTSEL_HOME/labels.db (certsel.config.ledger);
    # an explicit null turns it off. The engine itself takes it as given (None: no store)
    store: pathlib.Path | None = None


class RecoveryConfig(Strict):
    """Certify recovery, E[score] / E[reference score] >= ``at_least``, instead of a risk
    (:class:`~certsel.policies.recovery.Recovery`): the job tests the per-item losses (r s_ref - s + 1) / (1 + r) at
    alpha = 1 / (1 + r). ``reference_name`` names the reference model in outputs (default: the reference column)."""

    at_least: float = Field(gt=0, le=100)
    reference_name: str | None = Field(None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, v):
        return {"at_least": v} if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @property
    def claim(self) -> Recovery:
        return Recovery(self.at_least)


class RegressionConfig(Strict):
    """Certify a candidate against a ``baseline`` model on the same items instead of a risk
    (:class:`~certsel.policies.regression.Regression`): score >= the baseline's - ``margin`` (non-inferiority), or with
    ``superiority`` score >= the baseline's + ``margin``; the job tests the paired losses (l - b + 1) / 2 at
    alpha = (1 + m) / 2. ``baseline`` is a candidate of the table (it is not gated itself) or the live reference."""

    baseline: str = Field(min_length=1)
    margin: float = Field(0.0, ge=0, lt=1)
    superiority: bool = False

    @property
    def claim(self) -> Regression:
        return Regression(self.margin, self.superiority)


class SeriesConfig(Strict):
    """Gates of successive releases in one series (``certsel gate --series NAME``): release k of the series is gated at
    delta_k = delta / (k (k + 1)), levels that sum to the series' ``delta``, so the chance of any false pass or false
    fail over every release ever gated in it is at most ``delta`` (:mod:`certsel.orchestrator.engine.series`).
    ``releases`` and ``delta`` are filled in from the store's series ledger when the gate runs."""

    name: str = Field(min_length=1)
    delta: float | None = Field(None, gt=0, lt=1, description="the series' level (its first gate's delta)")
    releases: list[int] | None = None  # this job's candidates' positions in the series (1-based)

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v):
        return {"name": v} if isinstance(v, str) else v


class TaskConfig(Strict):
    """One task of a multi-task job (``tasks:``): its table and, where they differ from the job's, its target (``alpha``
    or ``recovery``) and budget keys. A candidate is certified only when certified on every task (an intersection-union
    test, docs/statistics.md)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    data: DataConfig
    alpha: float | None = Field(None, gt=0, lt=1, description="this task's target risk (default: the job's)")
    recovery: RecoveryConfig | None = None  # this task's recovery claim (default: the job's target)
    budget: dict = Field(default_factory=dict, description="budget keys that differ on this task, e.g. {n: 500}")

    @model_validator(mode="after")
    def _one_target(self):
        if self.alpha is not None and self.recovery is not None:
            raise ValueError(f"task {self.name!r}: give one target, alpha or recovery")
        return self


class AggregateConfig(Strict):
    """Certify a weighted aggregate over the tasks instead of every task (``aggregate:``): R = sum_t w_t R_t (weights
    normalised to sum to 1) against the job's ``alpha`` (or ``recovery``: sum_t w_t E[s_t] >= r sum_t w_t E[s_ref,t]).
    ``weights``: ``equal`` (macro average), ``size`` (by items, micro average) or task -> weight > 0 for every task.
    One test on the tasks' stacked tables (docs/statistics.md, "A weighted aggregate")."""

    weights: Literal["equal", "size"] | dict[str, float] = "equal"

    @field_validator("weights")
    @classmethod
    def _positive(cls, v):
        if isinstance(v, dict):
            if not v:
                raise ValueError("give a weight for every task (or equal, or size)")
            bad = [f"{k}: {w!r}" for k, w in v.items() if not (isinstance(w, (int, float)) and 0 < w < float("inf"))]
            if bad:
                raise ValueError(f"weights must be finite and > 0, got {', '.join(bad)}")
        return v
