"""The job schema: the policy, budget, procedure, scheduling, tracking and state sections and :class:`RunConfig`,
which validates a whole job once against the registries (procedures, betting strategies, policy and source kinds)."""

from __future__ import annotations

import pathlib
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from certsel.policies.procedures import PROCEDURES, Procedure, get_procedure
from certsel.policies.betting import BettingStrategy, get_strategy
from certsel.policies.pair_bets import pair_bet
from certsel.policies.kinds import POLICY_KINDS, Family, JudgeUse, PolicyKind, get_policy_kind, kinds_of

from certsel.policies.recovery import Recovery
from certsel.policies.registry import did_you_mean
from certsel.policies.sampling import SAMPLINGS, IID, Sampling, sampling_named

from .base import Strict, no_duplicates
from certsel.home import jobs_dir
from .sources import DataConfig, LabelsConfig, LiveConfig, PythonSourceConfig


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
        """The keys as a certificate states them: the pilot's only when the job starts from one."""
        return self.model_dump(exclude=None if self.start == "pilot" else set(PILOT_KEYS))


# scheduling.futility's level where the job does not set it (testing policies; None turns it off)
DEFAULT_FUTILITY = 0.05

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
    # labels kept across jobs (workers/label_store.py): a job on the same model, task, item and settings
    # reuses what an earlier one bought. None: off (certsel gate uses CERTSEL_HOME/labels.db unless --labels)
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


class RunConfig(Strict):
    name: str = Field("certsel", min_length=1)
    # modules imported before the rest is validated, to register procedures and betting strategies
    # (certsel.orchestrator.register_procedure, certsel.policies.register_strategy); one beside the job file is found
    plugins: list[str] = Field(default_factory=list)
    data: DataConfig | None = None  # recorded losses (replay), or:
    live: LiveConfig | None = None  # candidates answering through model servers, or:
    source: PythonSourceConfig | None = None  # a user function, or:
    # a registered label source (certsel.orchestrator.inputs.sources.SOURCE_KINDS): {kind: NAME, its options};
    # the source kind checks its options when the job's data is loaded, before anything runs
    labels: LabelsConfig | None = None
    # or several tasks, each a table with the same candidates: certified means certified on every task
    tasks: list[TaskConfig] | None = None
    # with tasks: certify a weighted aggregate of the tasks' risks instead of each task's
    aggregate: AggregateConfig | None = None
    candidates: list[str] | None = None  # default: every candidate in the table
    order: list[str] | None = None  # FST: an explicit fixed sequence (instead of data.order)
    policy: PolicyConfig = PolicyConfig()
    alpha: float = Field(0.1, gt=0, lt=1, description="target risk")
    # certify recovery >= at_least of a reference model (data.score, data.reference) instead of R <= alpha;
    # alpha is then 1 / (1 + at_least), set here, not by the user
    recovery: RecoveryConfig | None = None
    delta: float = Field(0.1, gt=0, lt=1, description="family-wise error level")
    # a registered procedure (certsel.policies.procedures.PROCEDURES)
    procedure: str = "fst"
    objective: ObjectiveConfig | None = None
    budget: BudgetConfig = BudgetConfig()
    costs: CostsConfig | None = None  # prices of labels and model calls (None: counts only)
    scheduling: SchedulingConfig = SchedulingConfig()
    pairwise: PairwiseConfig = PairwiseConfig()
    seed: int = 0
    tracking: TrackingConfig = TrackingConfig()
    ray: RayConfig = RayConfig()
    state: StateConfig = Field(default_factory=StateConfig)  # its folder is read from the home when a job is loaded

    @model_validator(mode="before")
    @classmethod
    def _measured_defaults(cls, v):
        # defaults that depend on the rest of the job, chosen by measurement (docs/results.md, "Defaults against the old
        # settings"): a testing policy gets scheduling.futility DEFAULT_FUTILITY, and a fixed sequence whose policy
        # pairs human labels with a recorded judge starts from the judge-only pilot; keys the job sets are kept
        if not isinstance(v, dict) or not isinstance(v.get("scheduling", {}), dict):
            return v
        try:
            policy = PolicyConfig.model_validate(v.get("policy", {}))
        except (ValidationError, ValueError, TypeError):
            return v  # the field's own validation reports it
        sched = dict(v.get("scheduling") or {})
        gate = _gates(v.get("procedure", "fst"))
        if "futility" not in sched and policy.is_testing:
            # a gate fails a candidate once the opposite of its claim is certified at the gate's own level
            sched["futility"] = v.get("delta", cls.model_fields["delta"].default) if gate else DEFAULT_FUTILITY
        data = v.get("data")
        judge = data.get("judge") if isinstance(data, dict) else getattr(data, "judge", None)
        if ("start" not in sched and v.get("procedure", "fst") == "fst" and sched.get("mode") != "full"
                and policy.uses_judge and judge
                and v.get("recovery") is None and not v.get("tasks")):
            sched["start"] = "pilot"
        return {**v, "scheduling": sched}

    @model_validator(mode="before")
    @classmethod
    def _recovery_target(cls, v):
        # a recovery job's risk target follows from its recovery; a second target would be ambiguous
        if isinstance(v, dict) and v.get("recovery") is not None:
            if "alpha" in v:
                raise ValueError("give one target: recovery (certify recovery >= at_least) or alpha (certify R <= "
                                 "alpha), not both")
            try:
                rec = RecoveryConfig.model_validate(v["recovery"])
            except ValueError:
                return v  # the field's own validation reports it, under its key
            v = {**v, "recovery": rec, "alpha": rec.claim.alpha}
        return v

    @field_validator("candidates", "order")
    @classmethod
    def _unique_candidates(cls, v):
        if v is not None:
            if not v:
                raise ValueError("must list at least one candidate (or be omitted)")
            no_duplicates(v, "candidate ids")
        return v

    @field_validator("procedure")
    @classmethod
    def _known_procedure(cls, v):
        get_procedure(v)
        return v

    @property
    def proc(self) -> Procedure:
        """The multiple-testing procedure the job runs (``procedure:``): the one place that looks one up by name."""
        return get_procedure(self.procedure)

    @property
    def source_kind(self) -> str:
        """Where labels come from: ``replay``, ``live``, ``python`` or a registered source's kind."""
        if self.labels is not None:
            return self.labels.kind
        if self.tasks is not None:
            return "tasks"
        return "replay" if self.data is not None else ("live" if self.live is not None else "python")

    @property
    def data_path(self) -> str:
        """What the labels come from, for reports: the table, the items file, the function, or
        a registered source's ``path`` option (its kind without one)."""
        return str({"replay": lambda: self.data.path, "live": lambda: self.live.items,
                    "python": lambda: self.source.python,
                    "tasks": lambda: ", ".join(str(t.data.path) for t in self.tasks)}.get(
                        self.source_kind, lambda: self.labels.options.get("path", self.labels.kind))())

    @property
    def judge_name(self) -> str | None:
        """The judge, for reports: the loss column, the judge's model, or the function."""
        if self.data is not None:
            return self.data.judge if self.recovery is None else self.data.judge_score
        if self.tasks is not None:  # the tasks' judge columns, each named once
            cols = [t.data.judge if self.recovery is None else t.data.judge_score for t in self.tasks]
            return ", ".join(dict.fromkeys(c for c in cols if c)) or None
        if self.live is not None:
            return self.live.judge.model if self.live.judge else None
        if self.labels is not None:  # a registered source's option: a name, or a flag that its judge is on
            judge = self.labels.options.get("judge")
            return judge if isinstance(judge, str) or not judge else f"the {self.labels.kind} source's judge"
        return self.source.python if self.source.judge else None

    # -- one validator: rules that hold for every source, then each source's own -----------
    @model_validator(mode="after")
    def _consistent(self):
        given = [k for k in ("data", "live", "source", "labels", "tasks") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one label source: data (recorded losses), live (model servers), "
                             "source (a Python function), labels (a registered label source) or tasks (several "
                             "tables)")
        self._check_procedure()
        if self.aggregate is not None:
            self._check_aggregate()
        if self.tasks is not None:
            self.task_configs()  # each task is a whole job: checked as one
            return self
        self._check_recovery()
        if self.labels is None:  # a registered source says what it provides once it is resolved
            self.check_policy_inputs(self._source_has())
            getattr(self, f"_check_{self.source_kind}")()
        return self

    def task_configs(self) -> list[RunConfig]:
        """The job of each task (``tasks``): this job with the task's table, target and budget,
        named ``JOB/TASK``; each validated as a job of its own (errors name the task)."""
        if not self.tasks:
            raise ValueError("tasks: list at least one task")
        no_duplicates([t.name for t in self.tasks], "task names")
        proc = get_procedure(self.procedure)
        if proc.ranking or proc.gates:
            what = "ranks models" if proc.ranking else "gates each candidate on one table"
            raise ValueError(f"tasks: procedure {self.procedure!r} {what}; a multi-task job certifies each candidate on "
                             "every task (fst, bonferroni, holm)")
        base = self.model_dump(exclude={"tasks", "aggregate", "alpha", "recovery", "data"}, exclude_unset=False)
        out = []
        for t in self.tasks:
            raw = {**base, "name": f"{self.name}/{t.name}", "data": t.data.model_dump(),
                   "budget": {**base["budget"], **t.budget}}
            if t.alpha is not None:
                raw["alpha"] = t.alpha
            elif t.recovery is not None:
                raw["recovery"] = t.recovery.model_dump()
            elif self.recovery is not None:
                raw["recovery"] = self.recovery.model_dump()
            else:
                raw["alpha"] = self.alpha
            try:
                out.append(RunConfig.model_validate(raw))
            except ValidationError as err:
                e = err.errors()[0]
                loc = ".".join(str(p) for p in e["loc"])
                raise ValueError(f"task {t.name!r}: " + (f"{loc}: " if loc else "")
                                 + e["msg"].replace("Value error, ", "")) from None
        return out

    def _check_aggregate(self) -> None:
        """An aggregate is over tasks, with one target: the job's."""
        if self.tasks is None:
            raise ValueError("aggregate: weighs the tasks of a multi-task job; give tasks: [...]")
        for t in self.tasks:
            if t.alpha is not None or t.recovery is not None:
                raise ValueError(f"aggregate: task {t.name!r} sets its own target; an aggregate job has one, the "
                                 "job's alpha (or recovery)")
            if t.budget:
                raise ValueError(f"aggregate: task {t.name!r} sets its own budget; an aggregate job is one test on "
                                 "the stacked tasks, with the job's budget")
        w = self.aggregate.weights
        if isinstance(w, dict):
            names = [t.name for t in self.tasks]
            missing, extra = [n for n in names if n not in w], [n for n in w if n not in names]
            if missing or extra:
                raise ValueError("aggregate.weights: give a weight for every task and only for tasks"
                                 + (f" (missing: {', '.join(missing)})" if missing else "")
                                 + (f" (not a task: {', '.join(extra)})" if extra else ""))

    def task_weights(self, sizes: list[int]) -> list[float]:
        """The aggregate's weights in task order, normalised to sum to 1 (``sizes``: the tasks' item counts, for
        ``weights: size``)."""
        w = self.aggregate.weights
        raw = ([1.0] * len(self.tasks) if w == "equal" else [float(n) for n in sizes] if w == "size"
               else [float(w[t.name]) for t in self.tasks])
        total = sum(raw)
        return [x / total for x in raw]

    def _check_recovery(self) -> None:
        """A recovery job reads score columns of a table and tests them at a risk target."""
        cols = self.data.recovery_columns if self.data is not None else {}
        if self.recovery is None:
            if cols:
                raise ValueError(f"{', '.join(cols)}: score columns are read by recovery jobs only (set recovery: "
                                 "r to certify recovery >= r; a risk job reads data.human)")
            return
        if self.live is not None:
            if self.live.reference is None:
                raise ValueError("recovery: a live job needs live.reference (the model whose score the candidates "
                                 "must recover: a candidate's id or an endpoint)")
        elif self.data is None and self.labels is None:  # a registered source says whether it has a reference
            raise ValueError(f"recovery: needs a table with score columns (data: with data.score and "
                             f"data.reference) or a live job with live.reference; a {self.source_kind} source has "
                             "neither")
        if not self.policy.is_testing:
            raise ValueError(f"recovery: needs a testing policy ({', '.join(kinds_of(Family.TESTING))}), not "
                             f"{self.policy.kind!r}")
        if self.policy.without_replacement:  # its bounds invert R-Eval over the recovery ratio: i.i.d. only so far
            raise ValueError("recovery: policy.sampling 'without-replacement' is not available for recovery jobs; "
                             "use the default 'iid'")
        if get_procedure(self.procedure).ranking:
            raise ValueError(f"recovery: certifies candidates against a reference; procedure {self.procedure!r} "
                             "ranks them against each other")
        if self.data is None:
            return
        missing = [k for k in ("score", "reference") if getattr(self.data, k) is None]
        if missing:
            raise ValueError(f"recovery: needs {' and '.join('data.' + k for k in missing)} (the candidate's and "
                             "the reference model's per-item scores, in [0, 1])")
        if self.data.judge is not None:
            raise ValueError("recovery: data.judge is a loss column; a recovery job's judge is data.judge_score "
                             "and data.judge_reference (the judge's scores of the candidate and of the reference)")
        if (self.data.judge_score is None) != (self.data.judge_reference is None):
            raise ValueError("recovery: give both data.judge_score and data.judge_reference, or neither")

    @property
    def recovery_reference(self) -> str | None:
        """The reference model's name in a recovery job's outputs."""
        if self.recovery is None or self.recovery.reference_name:
            return None if self.recovery is None else self.recovery.reference_name
        if self.data is not None:
            return self.data.reference
        if self.tasks is not None:  # each task names its reference column; one name when they agree
            return ", ".join(dict.fromkeys(t.data.reference for t in self.tasks if t.data.reference)) or None
        if self.labels is not None:  # a registered source's reference (labels.reference), named by its id
            ref = self.labels.options.get("reference")
            return ref.get("id", "reference") if isinstance(ref, dict) else None
        ref = None if self.live is None else self.live.reference
        if ref is None:
            return None
        return ref if isinstance(ref, str) else (ref.server or ref.model)

    def _check_procedure(self) -> None:
        proc, kind = get_procedure(self.procedure), self.policy.kind
        if proc.gates and self.policy.is_testing and self.scheduling.futility != self.delta:
            raise ValueError(f"procedure {self.procedure!r} fails a candidate when R >= alpha is certified at delta: "
                             f"scheduling.futility must be delta ({self.delta:g}) or left out, got "
                             f"{self.scheduling.futility}")
        if self.policy.is_testing and not proc.testing:
            raise ValueError(f"procedure {self.procedure!r} ranks models with policy.kind "
                             f"{' or '.join(repr(n) for n in kinds_of(Family.ESTIMATION))}")
        if not self.policy.is_testing and not proc.estimation:
            raise ValueError(f"procedure {self.procedure!r} needs e-values ({', '.join(kinds_of(Family.TESTING))}); "
                             f"policy {kind!r} supports {', '.join(n for n, p in PROCEDURES.items() if p.estimation)}")
        if self.order is not None and not proc.needs_order:
            raise ValueError(f"order is the fixed sequence of procedure 'fst', not {self.procedure!r}")
        if self.scheduling.prune and not proc.allows_prune:
            allowed = ", ".join(repr(n) for n, p in PROCEDURES.items() if p.allows_prune)
            raise ValueError(f"scheduling.prune applies to procedure {allowed} only (elsewhere it could change the "
                             "selection, or the procedure already stops what cannot matter)")
        if self.scheduling.start == "pilot":
            if not proc.needs_order:
                raise ValueError(f"scheduling.start: pilot starts a fixed sequence (procedure 'fst'), not "
                                 f"{self.procedure!r}")
            if self.data is None or self.data.judge is None or self.recovery is not None or self.tasks:
                raise ValueError("scheduling.start: pilot needs a replay job with a judge column (data.judge): the "
                                 "pilot reads the judge's losses (live jobs, recovery and multi-task jobs: not yet)")
        if proc.needs_objective and self.objective is None:
            raise ValueError(f"procedure {self.procedure!r} selects by an objective: set objective.column")
        if not proc.ranking and self.pairwise != PairwiseConfig():  # options set for a procedure that ignores them
            raise ValueError(f"pairwise: options of a ranking (procedure 'pairwise'), not of {self.procedure!r}")
        bet = None if self.pairwise.bet is None else pair_bet(self.pairwise.bet)
        if proc.ranking and bet is not None and bet.sized and not self.policy.policy_kind.banks(self.policy.radius):
            raise ValueError(f"pairwise.bet {bet.name!r} needs pair policies that take a bet (policy.kind 'seq' with radius "
                             f"'betting'), not policy.kind {self.policy.kind!r} with radius {self.policy.radius!r}")
        if proc.ranking and self.pairwise.topk is not None:
            models = self.candidates or self.order
            if models is not None and self.pairwise.topk >= len(models):
                raise ValueError(f"pairwise.topk must be below the number of models ({len(models)}), got "
                                 f"{self.pairwise.topk}")

    def check_policy_inputs(self, has: dict) -> None:
        """What the policy needs from the source: a judge, features, judge-only labels. ``has``: ``judge`` and
        ``features`` (bools) and the keys that give them, for messages."""
        kind = self.policy.kind
        if self.scheduling.futility is not None and not self.policy.is_testing:
            raise ValueError(f"scheduling.futility applies to the testing policies "
                             f"({', '.join(kinds_of(Family.TESTING))}); "
                             f"policy {kind!r} already stops once R >= alpha is certified at its own level")
        if self.policy.uses_judge and self.budget.r < 1:
            raise ValueError(f"policy '{kind}' needs budget.r >= 1 judge-only labels per human label")
        if self.policy.uses_judge and not has["judge"]:
            raise ValueError(f"policy '{kind}' needs {has['judge_key']} (the judge); without a judge, policy.kind: "
                             "r-eval tests on human labels alone")
        if self.policy.needs_features and not has["features"]:
            other = ", or policy.partition 'judge' with " + has["judge_key"] if "partition" in self.policy.policy_kind.takes \
                else ""
            raise ValueError(f"policy '{kind}' needs {has['features_key']} (item embeddings for the partition){other}")
        if self.policy.judge_first and not has["judge"]:
            if self.policy.partition == "judge":
                raise ValueError(f"policy.partition 'judge' needs {has['judge_key']} (the judge)")
            raise ValueError(f"policy '{kind}' needs {has['judge_key']} (the judge's loss on every item)")

    def _source_has(self) -> dict:
        if self.data is not None:
            judge = self.data.judge if self.recovery is None else self.data.judge_score
            return {"judge": judge is not None,
                    "judge_key": "data.judge" if self.recovery is None else "data.judge_score and data.judge_reference",
                    "features": self.data.features is not None, "features_key": "data.features"}
        if self.live is not None:
            return {"judge": self.live.judge is not None, "judge_key": "live.judge",
                    "features": self.live.features is not None, "features_key": "live.features"}
        return {"judge": self.source.judge, "judge_key": "source.judge: true",
                "features": self.source.features is not None, "features_key": "source.features"}

    def _check_ids(self, ids: set, where: str) -> None:
        for key in ("candidates", "order"):
            unknown = sorted(set(getattr(self, key) or ()) - ids)
            if unknown:
                raise ValueError(f"{key}: unknown candidate(s) not in {where}: {', '.join(unknown[:5])}"
                                 f"{did_you_mean(unknown[0], ids)}")

    def _check_objectives(self, cands, where: str) -> None:
        if self.objective is not None:
            missing = [c.id for c in cands if c.objective is None]
            if missing:
                raise ValueError(f"objective: {where} candidate(s) without an objective value: {', '.join(missing[:5])}")

    def _check_fixed_order(self, has_order_column: bool) -> None:
        if get_procedure(self.procedure).needs_order and not has_order_column and self.order is None:
            raise ValueError(f"procedure {self.procedure!r} needs data.order (a column) or order (a list of candidates)")

    def _check_replay(self) -> None:
        self._check_fixed_order(self.data.order is not None)
        if self.order is not None and self.candidates is not None and set(self.order) != set(self.candidates):
            extra = sorted(set(self.order) ^ set(self.candidates))
            raise ValueError(f"order and candidates must name the same candidates (differ in: {', '.join(extra)})")

    def _check_live(self) -> None:
        self._check_ids({c.id for c in self.live.candidates}, "live.candidates")
        self._check_objectives(self.live.candidates, "live")

    def _check_python(self) -> None:
        self._check_ids({c.id for c in self.source.candidates}, "source.candidates")
        self._check_objectives(self.source.candidates, "source")
