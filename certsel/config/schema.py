"""The job schema: :class:`RunConfig`, which validates a whole job once against the registries (procedures, bets,
policy and source kinds); its sections are :mod:`.sections`', its cross-section checks :mod:`.checks`'."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from certsel.policies.procedures import Procedure, get_procedure


from .base import Strict, no_duplicates
from .sources import DataConfig, LabelsConfig, LiveConfig, PythonSourceConfig
from .checks import JobChecks
from .sections import (DEFAULT_BUDGET_STOP, DEFAULT_FUTILITY, AggregateConfig, BudgetConfig, CostsConfig,  # noqa: F401
                       ObjectiveConfig, PairwiseConfig, PolicyConfig, RayConfig, RecoveryConfig, RegressionConfig,
                       SchedulingConfig, SeriesConfig,
                       StateConfig, TaskConfig, TrackingConfig, _gates)


def adapted_defaults(v: dict) -> tuple[dict, tuple[str, ...]]:
    """A recorded table's job with the defaults its table can run: without a judge column the policy is R-Eval (human
    labels alone), without an order the procedure is Holm (every candidate tested, the family-wise error at delta),
    each only where the job sets no such key, and each said in one line naming the key. Neither decides validity:
    every policy and procedure keeps its guarantee; only the labels it takes differ."""
    data = v.get("data")
    if not isinstance(data, dict) or v.get("tasks"):
        return v, ()
    notes = []
    policy = v.get("policy")
    if policy is None or (isinstance(policy, dict) and "kind" not in policy):
        judge_key = "data.judge_score" if v.get("recovery") is not None else "data.judge"
        judged = data.get("judge_score") if v.get("recovery") is not None else \
            (data.get("judge") or (data.get("judge_score") if v.get("regression") is not None else None))
        if not judged:
            v = {**v, "policy": {**(policy or {}), "kind": "r-eval"}}
            notes.append(f"policy: r-eval (human labels alone): the table has no judge column ({judge_key} names one "
                         "for r-autoeval+; policy.kind sets the policy)")
    if "procedure" not in v and not data.get("order") and v.get("order") is None:
        v = {**v, "procedure": "holm"}
        pick = "the certified one with the best objective" if v.get("objective") else \
            "the certified one with the smallest bound"
        notes.append(f"procedure: holm (every candidate tested, each certified one wrong with probability <= delta "
                     f"together; selected: {pick}): the table has no order column for a fixed sequence (data.order "
                     "names one; procedure sets it)")
    return v, tuple(notes)


class RunConfig(Strict, JobChecks):
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
    # certify each candidate against a baseline model on the same items (non-inferiority within a margin, or
    # superiority); alpha is then (1 + m) / 2, set here, not by the user
    regression: RegressionConfig | None = None
    # a gate's release series: the error is controlled over every release ever gated in it (certsel gate --series)
    series: SeriesConfig | None = None
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
    # where the candidates run: in this process (local), on Ray (ray), or auto: Ray where parallel work pays for its
    # start (model servers and calls, a cluster address), in-process otherwise (a recorded table); the certificate is
    # the same under both (orchestrator/engine/runtime_choice.py)
    runtime: Literal["auto", "local", "ray"] = "auto"
    state: StateConfig = Field(default_factory=StateConfig)  # its folder is read from the home when a job is loaded
    # the defaults this job's table chose (adapted_defaults), one line each for the output; not part of the job
    _adapted: tuple[str, ...] = PrivateAttr(default=())

    @property
    def adapted(self) -> tuple[str, ...]:
        """One line per default the job's table chose (a policy without a judge column, a procedure without an order),
        naming the key that sets it."""
        return self._adapted

    @model_validator(mode="before")
    @classmethod
    def _measured_defaults(cls, v):
        # defaults that depend on the rest of the job, chosen by measurement (docs/results.md, "Defaults against the old
        # settings"): a testing policy gets scheduling.futility DEFAULT_FUTILITY and scheduling.budget_stop
        # DEFAULT_BUDGET_STOP (docs/results.md, "Budget stop"), and a fixed sequence whose policy
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
        if "budget_stop" not in sched and policy.is_testing:  # a gate too: it stops at "undecided" early
            sched["budget_stop"] = DEFAULT_BUDGET_STOP
        data = v.get("data")
        judge = data.get("judge") if isinstance(data, dict) else getattr(data, "judge", None)
        if ("start" not in sched and v.get("procedure", "fst") == "fst" and sched.get("mode") != "full"
                and policy.uses_judge and judge
                and v.get("recovery") is None and v.get("regression") is None and not v.get("tasks")):
            sched["start"] = "pilot"
        return {**v, "scheduling": sched}

    @model_validator(mode="wrap")
    @classmethod
    def _table_defaults(cls, v, handler):
        # defined after _measured_defaults, so it runs before it: the defaults measured for a policy see the policy
        notes = ()
        if isinstance(v, dict):
            v, notes = adapted_defaults(v)
        cfg = handler(v)
        if notes:
            cfg._adapted = notes
        return cfg

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
        if isinstance(v, dict) and v.get("regression") is not None:
            if "alpha" in v or v.get("recovery") is not None:
                raise ValueError("give one target: regression (certify a candidate against its baseline), recovery "
                                 "or alpha, not two")
            try:
                reg = RegressionConfig.model_validate(v["regression"])
            except ValueError:
                return v
            v = {**v, "regression": reg, "alpha": reg.claim.alpha}
            live = v.get("live")
            if isinstance(live, dict) and live.get("reference") is None:  # a live baseline is the jobs' reference
                ids = [c.get("id") for c in live.get("candidates") or () if isinstance(c, dict)]
                if reg.baseline not in ids:
                    raise ValueError(f"regression.baseline: {reg.baseline!r} is not among live.candidates "
                                     f"({', '.join(map(str, ids[:8]))}); name the candidate the others are compared "
                                     "with, or give live.reference as an endpoint")
                v = {**v, "live": {**live, "reference": reg.baseline}}
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
            if self.regression is not None:
                return self.data.judge or self.data.judge_score
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
