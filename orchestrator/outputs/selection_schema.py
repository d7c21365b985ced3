"""The schema of ``selection.json``, as pydantic models: what a certificate file holds.

Every ``selection.json`` a job writes is validated against :class:`Certificate` first, so the JSON Schema that
``certsel schema`` prints (:func:`json_schema`) describes every file that exists. ``schema_version`` changes when a
field is removed or changes meaning, not when an optional field is added; readers should check it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from certsel.orchestrator.results.ranking import Ranking

# 2: the ``gpu`` block (the job's own model servers' GPU time) and ``costs.prices.gpu_hour``
SCHEMA_VERSION = 2
SCHEMA_ID = f"https://certsel.dev/schemas/selection-{SCHEMA_VERSION}.json"


class _Doc(BaseModel):
    """A part of the certificate, read by attribute (``cert.evidence.upper_bound``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_json(self) -> dict:
        """This part as selection.json holds it: the fields that were set (one that does not apply is absent), floats
        as they are, so ``json.dumps(..., allow_nan=False)`` refuses a non-finite one rather than writing null."""
        return self.model_dump(mode="python", exclude_unset=True)


class Counts(_Doc):
    human: int = Field(ge=0, description="human labels (a person's reference, or recorded human losses)")
    judge: int = Field(ge=0, description="judge labels")
    requests: int = Field(ge=0, description="model calls: target generations and judge calls")


class Saved(_Doc):
    human: float
    judge: float
    requests: float


class OracleStop(_Doc):
    """What the oracle counts for the first candidate a fixed sequence could not certify."""

    candidate: str
    labels: float = Field(ge=0, description="the fewest human labels, on average, any procedure needs to end it within "
                                            "its budget at least half the time while ending one its budget certifies "
                                            "easily at most gamma of the time (policies/limits.py, stop_limit)")


class Oracle(_Doc):
    """The job's human labels against an oracle's estimated need (testing procedures)."""

    labels: int = Field(ge=0, description="human labels the job bought, every candidate")
    oracle_estimate: float = Field(gt=0, description="the fewest an oracle would need on average for what the job "
                                                     "certified (see basis), and, under a fixed sequence, to end the "
                                                     "first candidate it could not certify (stop)")
    ratio: float = Field(gt=0, description="labels / oracle_estimate")
    candidates: int = Field(ge=1, description="the candidates the estimate counts")
    stop: OracleStop | None = Field(None, description="a fixed sequence: the labels any procedure needs to end the "
                                                      "first candidate it cannot certify, counted in oracle_estimate")
    basis: Literal["certified", "ranking"] = Field(description="certified: the certified candidates' fewest labels "
                                                               "any test needs; ranking: a full ranking's evaluations "
                                                               "for an oracle that knows each pair's moments")
    note: str


class Labels(_Doc):
    spent: Counts
    full_budget: Counts = Field(description="what every candidate run to its whole budget would have bought")
    saved_fraction: Saved = Field(description="1 - spent / full_budget; negative for a ranking whose pairs drew "
                                              "different items")
    budget: dict[str, int | float | None] = Field(description="the job's budget keys (n, r, batch, ...)")
    rounds: int = Field(ge=0)
    oracle: Oracle | None = Field(None, description="labels used against an oracle's estimate (absent: a ranking, an "
                                                    "estimation policy, a continued claim, or nothing certified)")


class Procedure(_Doc):
    name: str = Field(description="the multiple-testing procedure: fst, bonferroni, holm, pairwise or a registered one")
    delta: float = Field(gt=0, lt=1, description="the family-wise error level of the whole certificate")
    level: str = Field(description="each candidate's level, in words")
    candidates: int = Field(ge=1)
    alpha: float | None = Field(None, description="the risk threshold (absent for a ranking)")


class Policy(_Doc):
    kind: str
    betting: str
    radius: str
    partition: str
    sampling: Literal["without-replacement"] | None = Field(
        None, description="a betting test of the table's mean under sampling without replacement (absent: i.i.d.)")


class Objective(_Doc):
    column: str
    goal: Literal["minimize", "maximize"]


class Judge(_Doc):
    agreement: float = Field(description="share of labelled items where the judge's loss equals the human's")
    kappa: float | None = Field(description="Cohen's kappa of binary losses (None when undefined)")
    mean_abs_diff: float
    items: int


class Annotators(_Doc):
    """What a candidate's annotation queue did (labels from people, e.g. in Label Studio)."""

    tasks_imported: int = Field(ge=0, description="tasks ever put in front of annotators")
    tasks_withdrawn: int = Field(ge=0, description="tasks nobody had started, taken back once it was settled")
    annotations_saved: int = Field(ge=0, description="annotations the withdrawn tasks would have needed")
    annotations_used: int = Field(ge=0, description="valid answers behind the labels the test used")
    annotations_unused: int = Field(ge=0, description="valid answers recorded but never used (after its decision, "
                                                      "or beyond where it stopped)")
    annotations_refused: int = Field(ge=0, description="answers outside the declared choices or scale (recorded)")
    answers_awaited: int = Field(ge=0, description="answers still awaited when the report was written")
    annotators: int = Field(ge=0, description="people who answered")
    agreement: dict | None = Field(description="Krippendorff's alpha and mean pairwise Cohen's kappa over the items "
                                               "two or more people answered (None: no such item)")


class RecoveryFigures(_Doc):
    """A recovery job's numbers for one candidate: E[s] / E[s_ref] (shares, 1 = the reference's score)."""

    estimate: float | None = Field(description="mean score / mean reference score over its human-labelled items "
                                               "(tables; None for a live job, whose log holds losses)")
    lower_bound: float | None = Field(description="one-sided lower bound at the level of its decision (R-Eval on a "
                                                  "table: inverting its own test; otherwise r + 1 - (1 + r) U from "
                                                  "its risk bound U)")
    simultaneous_lower_bound: float | None = Field(description="holds for every candidate at once at 1 - delta")
    on_full_table: float | None = Field(description="the recovery on the whole table")
    labels: int = Field(ge=0, description="human labels its test used")


class Claim(_Doc):
    """What a recovery job certifies, and the risk test it runs as."""

    kind: Literal["recovery"]
    at_least: float = Field(gt=0, description="r: recovery E[s] / E[s_ref] >= r is certified")
    reference: str = Field(description="the reference model's name")
    words: str
    risk_alpha: float = Field(description="the equivalent risk test's target 1 / (1 + r)")
    bound_note: str


class RegressionFigures(_Doc):
    """A regression job's numbers for one candidate: d = E[s] - E[s_base] against its baseline, on the same items."""

    baseline: str = Field(description="the baseline model's name")
    estimate: float | None = Field(description="the mean paired difference on its labelled items")
    lower_bound: float | None = Field(description="one-sided lower bound on d at the level of its decision (1 - 2 U "
                                                  "from its paired losses' bound U)")
    simultaneous_lower_bound: float | None = Field(description="holds for every candidate at once at 1 - delta")
    on_full_table: float | None = Field(description="d on the whole table")
    labels: int = Field(ge=0, description="paired items its test used (each a candidate's and a baseline's label)")
    baseline_bought: int = Field(ge=0, description="baseline labels this run bought")
    baseline_reused: int = Field(ge=0, description="baseline labels taken from the label store (bought by an "
                                                   "earlier run)")


class RegressionClaim(_Doc):
    """What a regression job certifies, and the risk test it runs as."""

    kind: Literal["regression"]
    baseline: str = Field(description="the baseline model's name")
    margin: float = Field(ge=0, lt=1)
    superiority: bool
    words: str
    risk_alpha: float = Field(description="the equivalent risk test's target (1 + m) / 2")
    bound_note: str


class AggregatePart(_Doc):
    """One task of an aggregate: its weight and how its losses were scaled in the stacked table."""

    name: str
    weight: float = Field(gt=0, description="w_t, normalised: the weights sum to 1")
    items: int = Field(gt=0, description="N_t, its number of items")
    factor: float = Field(gt=0, le=1, description="w_t N / (N_t M): its losses' scale in the stacked table")
    data: str = Field(description="its table")


class Aggregate(_Doc):
    """What an aggregate job certifies, R = sum_t w_t R_t, and how its tasks were stacked."""

    kind: Literal["aggregate"]
    words: str
    weights: Literal["equal", "size", "given"]
    unit: float = Field(ge=1, description="M: the stacked table's mean is R / M, tested at alpha / M")
    policy_alpha: float = Field(description="alpha / M, the stacked test's target")
    tasks: list[AggregatePart]
    note: str


class TaskFigures(_Doc):
    """An aggregate's candidate on one task."""

    labels_human: int = Field(ge=0, description="human labels its test drew from this task")
    risk_on_full_table: float | None = Field(description="its mean loss on the task's whole table (unscaled)")
    recovery_on_full_table: float | None = None


class Evidence(_Doc):
    """The selected candidate's own numbers, each with the level it has."""

    simultaneous_bound: float | None
    e_value: float | None
    threshold: float | None
    log_e_value: float | None
    e_value_now: float | None = None  # after its last label (e_value: the running maximum, which decides)
    upper_bound: float | None
    level: float
    ci: list[float] | None
    estimate: float | None
    certified_at_labels: int | None
    labels_minimum_estimate: float | None
    labels_human: int
    labels_judge: int
    exact: bool | None = None  # decided on the exact mean of every item (see Candidate.exact)
    simultaneous_confidence: float
    estimate_note: str
    ci_level: float
    recovery: RecoveryFigures | None = None
    regression: RegressionFigures | None = None


class ContinuedClaim(_Doc):
    """A candidate whose claim was tested before: this job continued that test (docs/statistics.md, "Reruns")."""

    runs: int = Field(ge=1, description="the claim's runs before this job")
    labels: int = Field(ge=0, description="the human labels its test had consumed before this job")
    jobs: list[str | None] = Field(description="the jobs of those runs, the last one last (None: a job without folder)")


class Candidate(_Doc):
    candidate: str
    objective: float | None
    status: Literal["pending", "running", "certified", "not certified", "above alpha", "stopped", "skipped", "futile",
                    "source failed", "worker lost"]
    reason: str = Field(description="why it ended, in words ('' when nothing to add)")
    certified: bool = Field(description="in the procedure's certified set")
    selected: bool
    labels_human: int
    labels_judge: int
    requests: int
    estimate: float | None
    upper_bound: float | None = Field(description="one-sided bound inverting its own test, at its level")
    simultaneous_bound: float | None = Field(description="the bound that holds for every candidate at once at "
                                                         "1 - delta (None: no statement)")
    ci: list[float] | None = Field(description="two-sided interval at the candidates' level")
    certified_at_labels: int | None = Field(description="human labels at which the test first certified")
    labels_minimum_estimate: float | None = Field(description="log(1/level) / KL_inf from its own labels")
    risk_on_full_table: float | None = Field(description="replay only: the mean loss on the whole table")
    level: float
    e_value: float | None = Field(None, description="the running maximum of its e-process (what is held against the "
                                                    "threshold)")
    log_e_value: float | None = None
    e_value_now: float | None = Field(None, description="its e-value after its last label (where its plotted path "
                                                        "ends)")
    threshold: float | None = None
    exact: bool | None = Field(None, description="decided on the exact mean of every item (all of them drawn "
                                                 "without replacement): the e-value, kept for the record, did not "
                                                 "decide")
    rho_weights: list[float] | None = None
    judge: Judge | None = None
    annotators: Annotators | None = Field(None, description="labels from people: what the annotation queue did")
    cost: float | None = None
    position: int | None = None
    recovery: RecoveryFigures | None = None
    regression: RegressionFigures | None = None
    tasks: dict[str, TaskFigures] | None = Field(None, description="an aggregate job: per task")
    futility_e_value: float | None = Field(None, description="the futility test's e-value for R >= alpha (its "
                                                             "running maximum; a gate's fail when >= 1/delta)")
    reused: int | None = Field(None, ge=0, description="human labels taken from the label store, bought by an earlier "
                                                       "run on the same model, task, item and settings")
    outcome: Literal["pass", "fail", "undecided"] | None = Field(
        None, description="a gate: its claim certified at delta (pass), the opposite certified at delta (fail), or "
                          "neither within its budget (undecided)")
    continued: ContinuedClaim | None = Field(None, description="its claim's test continued from earlier runs: labels "
                                                               "and e-values are the whole test's, labels_human this "
                                                               "job's")


class Data(_Doc):
    path: str
    sha256_16: str
    items: int
    judge: str | None = None


class Resume(_Doc):
    from_round: int
    steps_from_snapshots: int
    steps_replayed: int


class HostsRebuilt(_Doc):
    hosts: int
    steps_from_snapshots: int
    steps_replayed: int


class CostAmounts(_Doc):
    human: float
    generation: float
    judge: float
    total: float


class Costs(_Doc):
    unit: str
    prices: dict[str, float]
    spent: CostAmounts
    full_budget: CostAmounts


class GpuServer(_Doc):
    name: str
    gpus: float = Field(ge=0, description="GPUs the server holds while it is up (its num_gpus)")
    starts: int = Field(ge=0, description="times it was started (0: every answer came from the cache)")
    wait_s: float = Field(ge=0, description="seconds waiting for Ray to place it (resources held by others)")
    load_s: float = Field(ge=0, description="seconds from placement to /health answering")
    busy_s: float = Field(ge=0, description="seconds with requests in flight (union over candidates)")
    idle_s: float = Field(ge=0, description="seconds up, loaded and without a request")
    up_s: float = Field(ge=0, description="load_s + busy_s + idle_s")
    gpu_s: float = Field(ge=0, description="up_s x gpus")
    requests: int = Field(ge=0, description="requests it answered")


class GpuCost(_Doc):
    unit: str
    gpu_hour: float
    spent: float
    full_budget_estimate: float | None


class Gpu(_Doc):
    """The GPU time of the job's own model servers (``live.serve``)."""

    gpu_seconds: float = Field(ge=0, description="measured: every server's up time x its GPUs")
    gpu_hours: float = Field(ge=0)
    busy_gpu_seconds: float = Field(ge=0)
    load_gpu_seconds: float = Field(ge=0)
    idle_gpu_seconds: float = Field(ge=0)
    server_seconds: float = Field(ge=0, description="every server's up time, whatever it holds")
    server_starts: int = Field(ge=0)
    max_servers_up: int = Field(ge=0, description="the most servers placed at one time")
    max_gpus_up: float = Field(ge=0, description="the most GPUs they held at one time")
    full_budget_estimate_gpu_seconds: float | None = Field(
        description="estimated, not measured: the job's GPU-seconds per label bought (up time less loads and the "
                    "shared work done before the rounds) x every candidate's full budget of labels + the shared work "
                    "+ one load per server (None when nothing was measured)")
    saved_fraction_estimate: float | None
    servers: list[GpuServer]
    candidates: dict[str, float] = Field(description="GPU-seconds of each candidate's generations (a server's busy "
                                                     "time shared between the candidates in flight)")
    shared: dict[str, float] = Field(description="GPU-seconds of work done once for every candidate before the "
                                                 "rounds: 'judge' (an answer-mode judge's answers), 'reference', "
                                                 "'features'")
    cost: GpuCost | None = None


class Pilot(_Doc):
    """Where a fixed sequence started (``scheduling.start: pilot``)."""

    start: str = Field(description="the first config tested")
    skipped: list[str] = Field(description="the configs before it, in the sequence's order: not tested, no statement")
    items: int = Field(ge=1, description="pilot items: the judge labelled each piloted config on these")
    margin: int = Field(ge=0, description="configs before the pilot's estimated frontier the sequence started")
    estimates: dict[str, float] = Field(description="each piloted config's mean judge loss on the pilot items")
    judge_labels: int = Field(ge=0, description="the pilot's judge labels (counted in labels.spent)")
    checked: dict[str, float] | None = Field(None, description="configs people checked the start on: their mean "
                                                               "human loss on the check items (absent: no check)")
    human_labels: int | None = Field(None, ge=0, description="the check's human labels (counted in labels.spent)")
    pinned_by: str | None = Field(None, description="a rerun: the job whose selection first tested these claims, "
                                                    "where the sequence started (absent: its own pilot's start)")
    note: str


class Series(_Doc):
    """A gate's release series: the error over every release ever gated in it is at most its ``delta``."""

    name: str
    delta: float = Field(gt=0, lt=1, description="the series' level: its releases' levels delta / (k (k + 1)) sum to it")
    releases: list[int] = Field(description="this job's candidates' positions k in the series, in the job's order")


class Gate(_Doc):
    """A gate (procedure ``gate``, ``certsel gate``): each candidate decided on its own."""

    claim: str = Field(description="what a candidate passes on, in words")
    opposite: str = Field(description="what a failed candidate has certified, in words")
    delta: float = Field(gt=0, lt=1, description="each outcome is wrong with probability <= delta, on its own")
    passed: list[str]
    failed: list[str]
    undecided: list[str]
    exit_code: Literal[0, 1, 3] = Field(description="certsel gate's exit status: 1 any failed, else 3 any undecided, "
                                                   "else 0")
    note: str
    series: Series | None = Field(None, description="a release series (certsel gate --series)")


class Ledger(_Doc):
    store: str | None = Field(description="the label store whose ledger holds each claim's test (null: off, the "
                                          "statement holds for this run alone)")
    statement: str = Field(description="what the ledger means for this certificate, in words")


class Certificate(_Doc):
    """One job's certificate (``selection.json``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"$id": SCHEMA_ID})

    schema_version: Literal[2] = Field(description="changes when a field is removed or changes meaning")
    certsel_version: str
    job: str
    created: str = Field(description="ISO 8601, UTC")
    selected: str | None
    selected_objective: float | None
    certificate: str = Field(description="the certified statement, in words")
    claim: Claim | RegressionClaim | None = Field(None, discriminator="kind", description="a recovery or regression "
                                                  "job's claim (absent: the claim is R <= alpha)")
    aggregate: Aggregate | None = Field(None, description="an aggregate job: R is the weighted mean of its "
                                                          "tasks' risks (absent: one table)")
    guarantee: str = Field(description="what R is and why the statement holds")
    evidence: Evidence | None
    certified_set: list[str]
    procedure: Procedure
    policy: Policy
    objective: Objective | None
    labels: Labels
    costs: Costs | None
    gpu: Gpu | None = Field(None, description="the job's own model servers' GPU time (live.serve; absent or null "
                                               "without)")
    scheduling: dict
    data: Data
    seed: int
    job_id: str | None
    resume: Resume | None
    recovered: HostsRebuilt | None
    seconds: float
    candidates: list[Candidate]
    ranking: Ranking | None = None  # the engine's own dataclass: one definition of its fields
    pilot: Pilot | None = Field(None, description="a fixed sequence started from a judge-only pilot (absent: from "
                                                  "its first config)")
    gate: Gate | None = Field(None, description="a gate: each candidate's outcome (absent: a selection or ranking)")
    answered_by: str | None = Field(None, description="a rerun answered by this finished job without running: no "
                                                      "label was bought then (absent: the job ran)")
    ledger: Ledger | None = Field(None, description="where each claim's test is kept across runs (absent: a "
                                                    "certificate written before the field existed)")


def parse(cert: dict) -> Certificate:
    """A certificate's dict as a :class:`Certificate`, checked against the schema (a ``ValueError`` naming the field)."""
    return Certificate.model_validate(cert)


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of selection.json."""
    schema = Certificate.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
