"""Job configuration for ``certsel run CONFIG.yaml``: a validated pydantic schema.

Unknown keys and bad values are errors that name the key (``policy.betting: Input should be
'up' or 'wsr'``), raised as :class:`ConfigError` with a one-line message. Relative data
paths are resolved against the directory of the config file.

Example (``examples/quantization.yaml``)::

    name: quantization-triviaqa
    data:
      path: data/triviaqa_llama31_8b_mx.parquet
      judge: loss_judge_best
      order: rank
    policy: {kind: r-autoeval+, betting: up}
    alpha: 0.1
    delta: 0.1
    procedure: fst
    objective: {column: avg_bitwidth, goal: minimize}
    budget: {n: 300, r: 3}
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import sys
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from certsel.errors import InputError, first_line
from certsel.policies.procedures import PROCEDURES, get_procedure
from certsel.policies.betting import BettingStrategy, get_strategy
from certsel.policies.kinds import POLICY_KINDS, Family, JudgeUse, PolicyKind, get_policy_kind, kinds_of


class ConfigError(InputError):
    """A configuration problem; ``str()`` is one line naming the file and the key."""


def _no_duplicates(values, what: str) -> None:
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"duplicate {what}: {', '.join(dup)}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    path: pathlib.Path
    candidate: str = "candidate"
    item: str = "item"
    human: str = "loss_human"
    judge: str | None = None
    order: str | None = None
    features: pathlib.Path | None = None  # item embeddings (Parquet: item, e0..e{d-1}) for Cer-Eval


class ServeConfig(_Strict):
    """A model that certsel serves itself (``vllm serve`` in a Ray actor, see
    :mod:`certsel.workers.serving`); endpoints refer to it as ``server: NAME``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: str = Field(min_length=1)  # a local model directory or a model id the server can load
    served_model_name: str | None = None  # default: name
    args: list[str] = Field(default_factory=list)  # more `vllm serve` arguments, e.g. [--dtype, bfloat16]
    python: str | None = None  # the interpreter with vLLM; default CERTSEL_VLLM_PYTHON, else certsel's own
    module: str = "vllm.entrypoints.openai.api_server"
    num_gpus: float = Field(0, ge=0)
    num_cpus: float = Field(0, ge=0)
    resources: dict[str, float] = Field(default_factory=dict)  # custom Ray resources: which nodes may host it
    host: str | None = None  # default: the Ray node's IP address
    port: int | None = Field(None, ge=1, le=65535)  # default: a free port
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout: float = Field(900.0, gt=0)

    @property
    def served(self) -> str:
        return self.served_model_name or self.name


class EndpointConfig(_Strict):
    """An OpenAI-compatible server and one of its served models: ``base_url`` (and
    ``model``), or ``server``, the name of a ``live.serve`` entry (``model`` then defaults to
    its served name)."""

    base_url: str | None = Field(None, pattern=r"^https?://")
    server: str | None = None
    model: str | None = Field(None, min_length=1)
    api_key_env: str | None = None  # the key is read from this environment variable, never from the file
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0)
    concurrency: int = Field(16, ge=1)
    sampling: dict = Field(default_factory=dict)
    # names the server in the response cache (default: base_url; for `server:` endpoints, the
    # served model and its `vllm serve` arguments, so a restarted server on a new port hits the cache)
    cache_key: str | None = None

    @model_validator(mode="after")
    def _one_address(self):
        if (self.base_url is None) == (self.server is None):
            raise ValueError("give exactly one of base_url (a running server) or server (a live.serve name)")
        if self.base_url is not None and self.model is None:
            raise ValueError("model: the served model name is required with base_url")
        return self


class _Templated(EndpointConfig):
    """An endpoint that is sent each item through ``template`` (which must say where the
    question goes)."""

    template: str = "{question}"

    @field_validator("template")
    @classmethod
    def _placeholder(cls, v):
        if "{question}" not in v:
            raise ValueError("must contain {question}")
        return v


class LabelsConfig(BaseModel):
    """A registered label source: ``kind`` and the options its kind declares (checked by the
    kind when the job's data is loaded)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: str = Field(min_length=1)

    @property
    def options(self) -> dict:
        return dict(self.model_extra or {})


class LiveCandidateRef(_Strict):
    """A candidate of a python source: its id (passed to the function) and objective."""

    id: str = Field(min_length=1)
    objective: float | None = None  # e.g. model size in GB or prompt length

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v):
        return {"id": v} if isinstance(v, str) else v


class LiveCandidate(_Templated):
    id: str = Field(min_length=1)
    objective: float | None = None  # e.g. model size in GB or prompt length


class ReferenceConfig(_Templated):
    """The model every candidate is compared with (``live.reference``), when it is not one of
    the candidates: an endpoint, its prompt template and sampling (e.g. the full-precision
    checkpoint served next to its quantized versions)."""


class JudgeConfig(EndpointConfig):
    mode: Literal["answer", "grade"] = "answer"
    template: str | None = None
    scale: tuple[float, float] = (0.0, 10.0)
    # grade mode: the verdict constrained to the scale by the server's structured outputs
    # (vLLM); a server that refuses them is asked without and its verdicts are parsed
    constrained: bool = True
    # grade mode: a yes/no verdict whose loss is P(no) from the judge's token probabilities
    soft: bool = False

    @model_validator(mode="after")
    def _soft_grades(self):
        if self.soft and self.mode != "grade":
            raise ValueError("judge.soft needs judge.mode 'grade' (a yes/no verdict with token probabilities)")
        return self


class FeaturesConfig(_Templated):
    """Item embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (Cer-Eval's
    partition features); ``template`` turns an item into the embedded text."""


class LiveConfig(_Strict):
    """Candidates served by OpenAI-compatible servers (vLLM), scored against references."""

    items: pathlib.Path  # Parquet or JSON Lines with id, question, answers (list) or answer
    loss: Literal["exact_match", "normalized_exact_match", "contains", "token_f1", "numeric"] = "normalized_exact_match"
    cache_dir: pathlib.Path = pathlib.Path(".certsel-cache")
    candidates: list[LiveCandidate] = Field(min_length=1)
    judge: JudgeConfig | None = None
    # losses relative to a reference model: a candidate's id, or an endpoint of its own. A
    # candidate's loss on an item is then its drop against the reference's answer,
    # max(score(reference) - score(candidate), 0), scored against the human references
    # (human labels) or the judge (judge labels)
    reference: Annotated[Annotated[str, Tag("id")] | Annotated[ReferenceConfig, Tag("endpoint")],
                         Discriminator(lambda v: "id" if isinstance(v, str) else "endpoint")] | None = None
    features: FeaturesConfig | None = None  # item embeddings, for Cer-Eval
    serve: list[ServeConfig] = Field(default_factory=list)  # models certsel starts itself

    @field_validator("candidates")
    @classmethod
    def _unique_ids(cls, v):
        _no_duplicates([c.id for c in v], "candidate ids")
        return v

    @model_validator(mode="after")
    def _servers(self):
        _no_duplicates([s.name for s in self.serve], "server names in serve")
        served = {s.name: s.served for s in self.serve}
        endpoints = [(f"candidate {c.id!r}", c) for c in self.candidates]
        endpoints += [(k, e) for k, e in (("judge", self.judge), ("features", self.features)) if e is not None]
        if isinstance(self.reference, ReferenceConfig):
            endpoints.append(("reference", self.reference))
        elif self.reference is not None and self.reference not in {c.id for c in self.candidates}:
            raise ValueError(f"reference {self.reference!r} is not a candidate id; give a candidate's id or an "
                             "endpoint (base_url + model, or server)")
        for what, ep in endpoints:
            if ep.server is not None and ep.server not in served:
                raise ValueError(f"{what}: server {ep.server!r} is not in live.serve "
                                 f"({', '.join(served) or 'which is empty'})")
        return self

    def resolved(self, urls: dict[str, str]) -> LiveConfig:
        """This section with every ``server: NAME`` replaced by the started server's URL and
        served model name."""
        served = {s.name: s for s in self.serve}

        def fix(ep):
            if ep is None or ep.server is None:
                return ep
            s = served[ep.server]
            key = ep.cache_key or "serve:" + json.dumps([s.model, s.served, s.module, s.args], separators=(",", ":"))
            return ep.model_copy(update={"base_url": urls[ep.server], "model": ep.model or s.served, "cache_key": key})

        ref = fix(self.reference) if isinstance(self.reference, ReferenceConfig) else self.reference
        return self.model_copy(update={"candidates": [fix(c) for c in self.candidates], "judge": fix(self.judge),
                                       "features": fix(self.features), "reference": ref})

    def reference_endpoint(self) -> dict | None:
        """The reference model as an endpoint dict with its template and sampling (None
        without ``reference``): a candidate's own, or the ``reference`` section's."""
        if self.reference is None:
            return None
        if isinstance(self.reference, ReferenceConfig):
            return self.reference.model_dump()
        return next(c for c in self.candidates if c.id == self.reference).model_dump()


class PolicyConfig(_Strict):
    # a registered policy kind (certsel.policies.kinds.POLICY_KINDS): r-eval, r-autoeval, r-autoeval+,
    # judge-stratified, seq, cer-eval, or one added with register_policy_kind
    kind: str = "r-autoeval+"
    # a registered betting strategy (certsel.policies.STRATEGIES): its name, or a mapping
    # with its parameters, e.g. {kind: up, prior: grid}
    betting: str | dict = "up"
    radius: Literal["betting", "paper"] = "betting"
    # R-Eval / R-AutoEval(+): "split" (two factors sharing each bet, so the largest bet does not pay for the
    # judge-only mean's range; docs/statistics.md) or "paper" (eq. 10 of R-AutoEval+, one factor)
    observation: Literal["split", "paper"] = "split"
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
        """An e-process policy (R-Eval, R-AutoEval, R-AutoEval+, judge-stratified), not an
        estimation policy."""
        return self.policy_kind.family is Family.TESTING

    @property
    def uses_judge(self) -> bool:
        """A testing policy that pairs human labels with judge-only labels (rho > 0)."""
        return self.policy_kind.judge_use(self.partition) is JudgeUse.PAIRED

    @property
    def judge_first(self) -> bool:
        """The judge's loss on every item is bought before any human label (Cer-Eval's judge
        strata, the judge-stratified test)."""
        return self.policy_kind.judge_use(self.partition) is JudgeUse.FIRST

    @property
    def needs_features(self) -> bool:
        return self.policy_kind.needs_features(self.partition)

    @model_validator(mode="after")
    def _options_apply(self):
        kind = self.policy_kind
        for key, default in (("partition", "embeddings"), ("observation", "split")):
            if getattr(self, key) != default and key not in kind.takes:
                takers = [n for n, k in POLICY_KINDS.items() if key in k.takes]
                raise ValueError(f"policy.{key} {getattr(self, key)!r} applies to policy.kind "
                                 f"{', '.join(repr(n) for n in takers)} only, not {self.kind!r}")
        kind.validate(self.radius, self.partition)
        return self


class ObjectiveConfig(_Strict):
    column: str
    goal: Literal["minimize", "maximize"] = "minimize"


class BudgetConfig(_Strict):
    n: int = Field(300, gt=0, description="human labels per candidate")
    r: int = Field(3, ge=0, description="judge-only labels per human label")
    batch: int = Field(25, gt=0, description="human labels per candidate per driver round (the largest round)")
    # the smallest round a testing candidate close to its threshold gets (scheduling.rounds: predicted)
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


class CostsConfig(_Strict):
    """What a job's labels cost, in any one unit (dollars, GPU-seconds, minutes of an annotator):
    per human label, per target generation (a request that is not a judge call) and per judge
    call. The spend in that unit goes to the CLI, the report, selection.json and MLflow."""

    human: float = Field(0.0, ge=0, allow_inf_nan=False, description="per human label")
    generation: float = Field(0.0, ge=0, allow_inf_nan=False, description="per target generation")
    judge: float = Field(0.0, ge=0, allow_inf_nan=False, description="per judge call")
    unit: str = Field("units", min_length=1, max_length=24)

    def of(self, human: int, judge: int, requests: int) -> dict:
        """The spend of these counters, by kind and in total (generations: the requests that
        were not judge calls)."""
        generation = max(int(requests) - int(judge), 0)
        out = {"human": human * self.human, "generation": generation * self.generation, "judge": judge * self.judge}
        out["total"] = sum(out.values())
        return out


class SchedulingConfig(_Strict):
    # adaptive: stop candidates whose fate is settled (FST frontier, certified, hopeless);
    # full: every candidate runs to its budget (the baseline the savings are measured against)
    mode: Literal["adaptive", "full"] = "adaptive"
    lookahead: int = Field(1, ge=0, description="FST: candidates past the frontier that run alongside it")
    # Bonferroni: stop candidates whose objective is no better than a certified one's; the
    # selection is unchanged, the certified set then only lists candidates that could matter
    prune: bool = False
    # futility (testing policies): stop a candidate once "R >= alpha" is certified at this level
    # by a second e-process on the mirrored losses; it never certifies, so the family-wise error
    # is unchanged, and a candidate with R < alpha is stopped with probability <= futility
    futility: float | None = Field(None, gt=0, lt=1)
    # rounds (testing policies): "predicted" gives a candidate close to its threshold a round of about the
    # labels its evidence so far says it still needs (between budget.min_batch and budget.batch), so that
    # it does not buy a whole round past its decision; "fixed": budget.batch for every candidate
    rounds: Literal["predicted", "fixed"] = "predicted"


class PairwiseConfig(_Strict):
    """What a pairwise ranking is for (``procedure: pairwise``): ``ranking`` certifies as much
    of the order as the budget allows, stopping pairs whose order is already implied by
    certified pairs; ``best`` certifies the best model only, comparing possible winners; ``all``
    runs every pair until its sign is certified (the earlier behaviour)."""

    goal: Literal["ranking", "best", "all"] = "ranking"


class TrackingConfig(_Strict):
    uri: str | None = None  # default: MLFLOW_TRACKING_URI, else sqlite:///mlruns.db
    experiment: str = Field("certsel", min_length=1)
    # when to compute the two-sided interval of a testing policy (a bisection, ~0.1-0.3 s)
    intervals: Literal["every_round", "final", "none"] = "final"


class RayConfig(_Strict):
    address: str | None = None  # default: RAY_ADDRESS, else a local ray.init()
    num_cpus: int | None = Field(None, gt=0)
    max_actors: int | None = Field(None, gt=0, description="default: one per candidate up to the cluster's CPUs")


class StateConfig(_Strict):
    """Where a job keeps its durable label log, and whether an unfinished job with the same
    configuration is resumed (see :mod:`certsel.orchestrator.state`)."""

    dir: pathlib.Path = pathlib.Path(".certsel-jobs")
    resume: Literal["auto", "never"] = "auto"
    snapshot_every: int = Field(10, ge=1, description="rounds between policy snapshots and driver checkpoints")


class PythonSourceConfig(_Strict):
    """Labels from a user function (see :mod:`certsel.workers.sources`): ``python`` names it
    as ``module:function``; it is called as ``f(candidate, items, role)``."""

    python: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    items: int = Field(gt=0, description="number of items; the function is asked about indices 0..items-1")
    candidates: list[LiveCandidateRef] = Field(min_length=1)
    judge: bool = False  # the function also answers role "judge"
    features: pathlib.Path | None = None  # item embeddings (Parquet: item, e0..e{d-1}) for Cer-Eval
    retries: int = Field(2, ge=0, description="calls retried after an exception before the source fails")

    @field_validator("candidates")
    @classmethod
    def _unique_ids(cls, v):
        _no_duplicates([c.id for c in v], "candidate ids")
        return v


class RunConfig(_Strict):
    name: str = Field("certsel", min_length=1)
    # modules imported before the rest is validated: they register procedures and betting
    # strategies (certsel.orchestrator.register_procedure, certsel.policies.register_strategy);
    # a module next to the job file is found there
    plugins: list[str] = Field(default_factory=list)
    data: DataConfig | None = None  # recorded losses (replay), or:
    live: LiveConfig | None = None  # candidates answering through model servers, or:
    source: PythonSourceConfig | None = None  # a user function, or:
    # a registered label source (certsel.orchestrator.sources.SOURCE_KINDS): {kind: NAME, its options};
    # the source kind checks its options when the job's data is loaded, before anything runs
    labels: LabelsConfig | None = None
    candidates: list[str] | None = None  # default: every candidate in the table
    order: list[str] | None = None  # FST: an explicit fixed sequence (instead of data.order)
    policy: PolicyConfig = PolicyConfig()
    alpha: float = Field(0.1, gt=0, lt=1, description="target risk")
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
    state: StateConfig = StateConfig()

    @field_validator("candidates", "order")
    @classmethod
    def _unique_candidates(cls, v):
        if v is not None:
            if not v:
                raise ValueError("must list at least one candidate (or be omitted)")
            _no_duplicates(v, "candidate ids")
        return v

    @field_validator("procedure")
    @classmethod
    def _known_procedure(cls, v):
        get_procedure(v)
        return v

    @property
    def source_kind(self) -> str:
        """Where labels come from: ``replay``, ``live``, ``python`` or a registered source's kind."""
        if self.labels is not None:
            return self.labels.kind
        return "replay" if self.data is not None else ("live" if self.live is not None else "python")

    @property
    def data_path(self) -> str:
        """What the labels come from, for reports: the table, the items file, the function, or
        a registered source's ``path`` option (its kind without one)."""
        return str({"replay": lambda: self.data.path, "live": lambda: self.live.items,
                    "python": lambda: self.source.python}.get(
                        self.source_kind, lambda: self.labels.options.get("path", self.labels.kind))())

    @property
    def judge_name(self) -> str | None:
        """The judge, for reports: the loss column, the judge's model, or the function."""
        if self.data is not None:
            return self.data.judge
        if self.live is not None:
            return self.live.judge.model if self.live.judge else None
        if self.labels is not None:
            return self.labels.options.get("judge")
        return self.source.python if self.source.judge else None

    # -- one validator: rules that hold for every source, then each source's own -----------
    @model_validator(mode="after")
    def _consistent(self):
        given = [k for k in ("data", "live", "source", "labels") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one label source: data (recorded losses), live (model servers), "
                             "source (a Python function) or labels (a registered label source)")
        self._check_procedure()
        if self.labels is None:  # a registered source says what it provides once it is resolved
            self.check_policy_inputs(self._source_has())
            getattr(self, f"_check_{self.source_kind}")()
        return self

    def _check_procedure(self) -> None:
        proc, kind = get_procedure(self.procedure), self.policy.kind
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
        if proc.needs_objective and self.objective is None:
            raise ValueError(f"procedure {self.procedure!r} selects by an objective: set objective.column")

    def check_policy_inputs(self, has: dict) -> None:
        """What the policy needs from the source: a judge, features, judge-only labels.
        ``has``: ``judge`` and ``features`` (bools) and the keys that give them, for messages."""
        kind = self.policy.kind
        if self.scheduling.futility is not None and not self.policy.is_testing:
            raise ValueError(f"scheduling.futility applies to the testing policies "
                             f"({', '.join(kinds_of(Family.TESTING))}); "
                             f"policy {kind!r} already stops once R >= alpha is certified at its own level")
        if self.policy.uses_judge and self.budget.r < 1:
            raise ValueError(f"policy '{kind}' needs budget.r >= 1 judge-only labels per human label")
        if self.policy.uses_judge and not has["judge"]:
            raise ValueError(f"policy '{kind}' needs {has['judge_key']} (the judge)")
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
            return {"judge": self.data.judge is not None, "judge_key": "data.judge",
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
                raise ValueError(f"{key}: unknown candidate(s) not in {where}: {', '.join(unknown[:5])}")

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


def _format(err: ValidationError, source: str) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "config"
    if e["type"] == "extra_forbidden":
        msg = f"unknown key {loc!r}"
    else:
        msg = f"{loc}: {e['msg']}".replace("Value error, ", "")
    more = len(err.errors()) - 1
    return f"{source}: {msg}" + (f" (and {more} more problem(s))" if more else "")


def _resolve_serve(s: ServeConfig, base_dir: pathlib.Path) -> ServeConfig:
    """Relative paths in a serve entry are relative to the config file: the model when such
    a directory exists (otherwise it is a model id), the interpreter when it names a path."""
    update = {}
    if not pathlib.Path(s.model).is_absolute() and (base_dir / s.model).exists():
        update["model"] = str((base_dir / s.model).resolve())
    if s.python is not None and "/" in s.python and not pathlib.Path(s.python).is_absolute():
        update["python"] = os.path.normpath(base_dir.absolute() / s.python)  # not resolve(): a venv's python is a symlink
    return s.model_copy(update=update) if update else s


def _user_modules_path(raw: dict, base_dir: pathlib.Path | None) -> None:
    """User code named by the job (plugins, a python source) is looked up next to the job
    file first, then on the usual path."""
    if base_dir is None or not (raw.get("plugins") or isinstance(raw.get("source"), dict)):
        return
    where = str(base_dir.resolve())
    if where not in sys.path:
        sys.path.insert(0, where)


def load_plugins(names, source: str) -> None:
    """Import the job's plugin modules (their import registers their extensions)."""
    if names is None:
        return
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{source}: plugins: must be a list of module names")
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # whatever the plugin raises while importing
            raise ConfigError(f"{source}: plugins: cannot import {name!r} ({first_line(exc)})") from None


def parse_config(raw, *, source: str = "config", base_dir: pathlib.Path | None = None) -> RunConfig:
    """Validate a mapping (e.g. parsed YAML) into a :class:`RunConfig`; ``plugins`` are
    imported first, so that the procedures and strategies they register are known."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    _user_modules_path(raw, base_dir)
    load_plugins(raw.get("plugins"), source)
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format(err, source)) from None
    if cfg.labels is not None:  # a registered source: its ``path`` option, if any, beside the job file
        path = cfg.labels.options.get("path")
        if base_dir is not None and isinstance(path, str) and not pathlib.Path(path).is_absolute():
            cfg = cfg.model_copy(update={"labels": LabelsConfig(**{**cfg.labels.model_dump(),
                                                                   "path": str((base_dir / path).resolve())})})
        section, keys = "labels", ()
    else:
        section, keys = {"replay": ("data", ("path", "features")), "live": ("live", ("items", "cache_dir")),
                         "python": ("source", ("features",))}[cfg.source_kind]
    if base_dir is not None and keys:
        sub = getattr(cfg, section)
        updates = {}
        for key in keys:
            p = getattr(sub, key)
            if p is not None and not p.is_absolute():
                updates[key] = (base_dir / p).resolve()
        if section == "live" and sub.serve:
            updates["serve"] = [_resolve_serve(s, base_dir) for s in sub.serve]
        if updates:
            cfg = cfg.model_copy(update={section: sub.model_copy(update=updates)})
    if base_dir is not None and not cfg.state.dir.is_absolute():  # like cache_dir: beside the job file
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"dir": (base_dir / cfg.state.dir).resolve()})})
    for key in keys:
        p = getattr(getattr(cfg, section), key)
        if key != "cache_dir" and p is not None and not p.is_file():
            raise ConfigError(f"{source}: {section}.{key}: file not found: {p}")
    return cfg


def apply_overrides(raw: dict, overrides, source: str) -> dict:
    """``["budget.n=100", "policy.kind=r-eval"]``: set dotted keys (values parsed as YAML)."""
    for item in overrides or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: override {item!r} is not KEY=VALUE")
        *parents, leaf = key.strip().split(".")
        node = raw
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: override {item!r}: {p!r} is not a mapping")
        try:
            node[leaf] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"{source}: override {item!r}: the value is not valid YAML") from None
    return raw


def load_config(path, overrides=None) -> RunConfig:
    """Read and validate a YAML job file; ``overrides`` are ``KEY=VALUE`` strings."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    if overrides:
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(raw).__name__}")
        raw = apply_overrides(raw, overrides, str(path))
    return parse_config(raw, source=str(path), base_dir=path.parent)
