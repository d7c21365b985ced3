"""What the driver knows: each candidate's record (status and evidence folded in from its snapshots) and the job's
result. Pure bookkeeping; no Ray, no I/O."""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from certsel.config import RunConfig
from certsel.workers.contracts import LabelRows, QueueReport, Snapshot
from certsel.workers.gpu_time import FleetUsage

from certsel.orchestrator.inputs.jobdata import JobData

from .ranking import Ranking, TopK  # noqa: F401  (re-exported)


class Status(StrEnum):
    """Where a candidate stands (the values are shown in reports, ``selection.json`` and MLflow tags). A test that
    ended without certifying is kept apart from a failed source or worker: only the first says anything about the
    candidate."""

    PENDING = "pending"
    RUNNING = "running"
    CERTIFIED = "certified"
    NOT_CERTIFIED = "not certified"  # the budget was spent without certifying R <= alpha
    ABOVE_ALPHA = "above alpha"  # an estimation policy certified R >= alpha
    STOPPED = "stopped"  # the procedure stopped it: it could no longer change the selection
    SKIPPED = "skipped"  # never started, for the same reason
    FUTILE = "futile"  # R >= alpha certified by the futility test: stopped, it would not certify
    SOURCE_FAILED = "source failed"  # its label source failed for good (after retries)
    WORKER_LOST = "worker lost"  # the actor hosting it died too often in a row

    @property
    def finished(self) -> bool:
        return self not in (Status.PENDING, Status.RUNNING)

    @property
    def waiting(self) -> bool:
        return self is Status.PENDING

    @property
    def running(self) -> bool:
        return self is Status.RUNNING

    @property
    def test_failed(self) -> bool:
        """Ended without certification while evaluated (for FST: no later candidate joins the certified prefix)."""
        return self in (Status.NOT_CERTIFIED, Status.ABOVE_ALPHA, Status.FUTILE, Status.SOURCE_FAILED,
                        Status.WORKER_LOST)


@dataclass
class ContinuedClaim:
    """A candidate whose claim was tested before (workers/claims.py): the job continued that test. ``runs``: the
    claim's runs before this job; ``before``: the human labels its test had consumed then; ``items``: the test's human
    items in order (the consumed ones first); ``test``: the recorded test's configuration (horizon, delta, betting,
    observation: what its bounds invert); ``jobs``: the jobs of the runs before (the last one last)."""

    runs: int
    before: int
    items: np.ndarray
    test: dict
    jobs: list = field(default_factory=list)


@dataclass
class CandidateRecord:
    """The driver's view of one candidate."""

    name: str
    index: int
    objective: float | None
    true_risk: float | None = None
    status: Status = Status.PENDING
    reason: str = ""
    n_human: int = 0
    reused: int = 0  # of n_human: taken from the label store
    n_judge: int = 0
    requests: int = 0
    t: int = 0  # human labels consumed by the policy
    exhausted: bool = False
    log_e: float = 0.0
    max_log_e: float = 0.0
    path: list = field(default_factory=list)  # per-human-label log e-values (testing policies)
    estimate: float = float("nan")
    ci: tuple | None = None
    upper_bound: float | None = None  # its own test's one-sided bound, at the level of its decision
    joint_bound: float | None = None  # the bound that holds together with all others' (None: no statement)
    label_minimum: float | None = None  # the fewest labels any test would need, estimated from its labels
    stop_minimum: float | None = None  # the first uncertified of a sequence: the fewest any procedure needs to end it
    judge: dict | None = None  # the judge's agreement with the human labels
    max_log_futility: float = 0.0  # the futility test's evidence for R >= alpha (log, running max)
    futility_path: list = field(default_factory=list)  # its log e-value after each human label (the budget stop)
    decision: int = 0
    rho_weights: list | None = None
    certified_at: int = 0  # human labels when certification was observed (0: never)
    exact: bool = False  # decided on the exact mean of every item (all drawn without replacement), not its e-value
    rounds: list = field(default_factory=list)  # per-round rows for tracking
    waiting: int = 0  # answers its label source awaits from people (an annotation queue)
    queue: QueueReport | None = None  # what its annotation queue did (imported, withdrawn, agreement)
    claim: ContinuedClaim | None = None  # a claim whose test this job continued (workers/claims.py)
    baseline: tuple | None = None  # a regression candidate's baseline labels (bought, reused) (workers/paired.py)

    @property
    def finished(self) -> bool:
        return self.status.finished

    def end(self, status: Status | str, reason: str = "") -> None:
        self.status, self.reason = Status(status), reason

    def apply(self, snap: Snapshot) -> None:
        """Fold an actor snapshot into the record."""
        self.n_human, self.n_judge, self.requests = snap.n_human, snap.n_judge, snap.requests
        self.reused = snap.reused
        if snap.baseline is not None:
            self.baseline = tuple(snap.baseline)
        self.t, self.exhausted = snap.t, snap.exhausted
        self.estimate = snap.estimate
        if snap.ci is not None:
            self.ci = tuple(snap.ci)
        if snap.upper_bound is not None:
            self.upper_bound = snap.upper_bound
        if snap.judge is not None:
            self.judge = snap.judge
        if snap.futility_log_e is not None:
            self.max_log_futility = snap.futility_log_e
        if snap.futility_path is not None and snap.futility_path.size:
            self.futility_path.extend(snap.futility_path.tolist())
        if snap.path is not None:
            if snap.path.size:
                self.path.extend(snap.path.tolist())
            self.log_e, self.max_log_e = snap.log_e, snap.max_log_e
            self.rho_weights = snap.rho_weights
        if snap.decision is not None:
            self.decision = snap.decision
        self.waiting = snap.waiting
        self.exact = self.exact or snap.exact
        if self.status is Status.PENDING:
            self.status = Status.RUNNING
        if snap.error:  # its label source failed for good: not certified, the others go on
            self.end(Status.SOURCE_FAILED, f"source failed: {snap.error}")

    def first_crossing(self, log_level: float) -> int:
        """First human label (1-based) at which log E reached ``log_level``; 0 if never."""
        p = np.asarray(self.path)
        hit = np.flatnonzero(p >= log_level)
        return int(hit[0]) + 1 if hit.size else 0

    def round_row(self) -> dict:
        """The per-round metrics of this candidate (MLflow steps, driver checkpoints)."""
        row = {"labels_human": self.n_human, "labels_judge": self.n_judge, "requests": self.requests,
               "estimate": self.estimate}
        if self.path:
            row.update(log_evalue=self.log_e, max_log_evalue=self.max_log_e)
        if self.ci is not None:
            row.update(ci_low=self.ci[0], ci_high=self.ci[1])
        if self.upper_bound is not None:
            row["upper_bound"] = self.upper_bound
        if self.rho_weights is not None and len(self.rho_weights) > 1:
            row.update({f"rho_weight_{s}": w for s, w in enumerate(self.rho_weights)})
        row["step"] = self.t
        return row


@dataclass
class Resume:
    """How a run that started from a driver checkpoint got its candidates back."""

    from_round: int
    steps_from_snapshots: int = 0  # candidate steps restored from policy snapshots
    steps_replayed: int = 0  # candidate steps replayed from the durable label log (no request)


@dataclass
class HostsRebuilt:
    """Hosts lost and rebuilt during a run, and how their candidates' steps came back."""

    hosts: int = 0
    steps_from_snapshots: int = 0
    steps_replayed: int = 0


@dataclass(frozen=True)
class RecoveryRow:
    """A recovery job's unrounded figures for one candidate (None: no statement;
    :mod:`certsel.orchestrator.engine.recovery`)."""

    estimate: float | None
    lower_bound: float | None
    simultaneous_lower_bound: float | None
    on_full_table: float | None
    labels: int


@dataclass(frozen=True)
class OracleEstimate:
    """The job's human labels against the fewest a level-delta oracle would need for what it certified
    (:func:`~certsel.orchestrator.engine.derived.oracle_estimate`)."""

    labels: int  # human labels the job bought, every candidate
    oracle: float  # the fewest any test would need for the certified candidates, estimated from their labels
    candidates: int  # the candidates the estimate counts: the certified ones, or every model of a ranking
    basis: str = "certified"  # "certified": the certified candidates' minimums; "ranking": a full ranking's
    stop: float = 0.0  # of ``oracle``: the labels any procedure needs to end the first candidate it cannot certify
    stopped: str | None = None  # that candidate (None: none counted)

    @property
    def ratio(self) -> float:
        return self.labels / self.oracle


@dataclass
class JobResult:
    """Everything the certificate, the report and the tracker need."""

    cfg: RunConfig
    data: JobData
    records: list[CandidateRecord]
    certified: list[str]  # names in the procedure's certified set
    selected: str | None
    level: str  # the procedure and its per-candidate level, in words
    spent: dict[str, int]  # human, judge, requests: what the job bought
    full: dict[str, int]  # the same if every candidate had run to its whole budget
    rounds: int
    seconds: float = 0.0
    # seconds per stage of `certsel run` (:mod:`certsel.orchestrator.commands.stages`); stages may overlap
    stages: dict[str, float] = field(default_factory=dict)
    ranking: Ranking | None = None
    labels: dict[str, LabelRows] | None = None  # per candidate: every label bought, in purchase order
    job_id: str | None = None  # the durable job (certsel run --resume JOB_ID)
    resume: Resume | None = None  # a run that started from a driver checkpoint
    recovered: HostsRebuilt | None = None  # hosts lost and rebuilt during the run
    gpu: FleetUsage | None = None  # live.serve: the job's own servers' GPU time (workers/gpu_time.py)
    tracking: dict[str, str] | None = None  # {"uri", "experiment_id", "run_id"}; None without tracking
    output_dir: pathlib.Path | None = None  # the folder with report.html, selection.json, labels.parquet
    files: list[pathlib.Path] = dataclasses.field(default_factory=list)  # what was written there
    # statistics of the final evidence, computed once when the job ends (engine/derived.py), not by the outputs:
    levels: list[float] | None = None  # each candidate's decision level (its e-value's threshold is 1 / level)
    ci_delta: float | None = None  # the level of the candidates' two-sided intervals (1 - ci_delta)
    recovery: list[RecoveryRow] | None = None  # a recovery job: every candidate's recovery figures
    # what the job would have selected with a smaller per-candidate budget: (human labels, its objective)
    budget_curve: list[tuple[int, float | None]] | None = None
    oracle: OracleEstimate | None = None  # labels used against an oracle's estimate (testing procedures)
    # built once at the end (outputs.certificate.certificate_of): file, MLflow and terminal show the same one
    certificate: Any = dataclasses.field(default=None, repr=False)  # outputs.selection_schema.Certificate

    @property
    def selected_record(self) -> CandidateRecord | None:
        return next((r for r in self.records if r.name == self.selected), None)

    @property
    def evaluated(self) -> int:
        """Candidates whose labels could be had (not SOURCE_FAILED or WORKER_LOST); with none, the answer says
        nothing."""
        return sum(r.status not in (Status.SOURCE_FAILED, Status.WORKER_LOST) for r in self.records)


def totals(records) -> dict:
    """Labels and requests bought by the job so far."""
    return {"human": sum(r.n_human for r in records), "judge": sum(r.n_judge for r in records),
            "requests": sum(r.requests for r in records)}


def dump_records(records) -> list[dict]:
    """The driver's records as plain data (driver checkpoints)."""
    out = []
    for r in records:
        d = dataclasses.asdict(r)
        d["status"] = str(r.status)
        d["path"] = np.asarray(r.path, dtype=np.float64)
        d["futility_path"] = np.asarray(r.futility_path, dtype=np.float64)
        out.append(d)
    return out


def load_records(records, saved: list[dict]) -> None:
    """Restore records from :func:`dump_records` (same candidates, same order)."""
    if [d["name"] for d in saved] != [r.name for r in records]:
        raise RuntimeError("the driver checkpoint is of other candidates")
    for r, d in zip(records, saved, strict=True):
        for k, v in d.items():
            setattr(r, k, v)
        r.status = Status(d["status"])
        r.path = np.asarray(d["path"]).tolist()
        r.futility_path = np.asarray(d.get("futility_path", ())).tolist()
        if isinstance(d.get("claim"), dict):
            r.claim = ContinuedClaim(**d["claim"])
        if isinstance(d.get("queue"), dict):
            r.queue = QueueReport(**d["queue"])
