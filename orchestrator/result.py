"""What a finished job hands to the certificate, the report and the tracker."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from certsel.config import RunConfig

from .jobdata import JobData
from .records import CandidateRecord, Status


@dataclass
class JobResult:
    """Everything the certificate, the report and the tracker need."""

    cfg: RunConfig
    data: JobData
    records: list
    certified: list  # names in the procedure's certified set
    selected: str | None
    level: str  # the procedure and its per-candidate level, in words
    spent: dict
    full: dict
    rounds: int
    seconds: float
    ranking: dict | None = None
    labels: dict | None = None  # per candidate: item, role, loss of every label bought, in order
    job_id: str | None = None  # the durable job (certsel run --resume JOB_ID)
    # a run that started from a driver checkpoint: {"from_round", "steps_from_snapshots", "steps_replayed"}
    resume: dict | None = None
    # hosts lost and rebuilt during the run: {"hosts", "steps_from_snapshots", "steps_replayed"}
    recovered: dict | None = None
    # where the job is tracked: {"uri", "experiment_id", "run_id"} (None without tracking)
    tracking: dict | None = None

    @property
    def selected_record(self) -> CandidateRecord | None:
        return next((r for r in self.records if r.name == self.selected), None)


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
