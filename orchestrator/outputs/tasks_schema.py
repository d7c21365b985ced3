"""The schema of a multi-task job's ``selection.json`` (``kind: multi-task``), as pydantic models; each task's own
certificate is a :class:`~.selection_schema.Certificate` in its folder. :func:`parse_any` reads either."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from .selection_schema import SCHEMA_VERSION, Counts, RecoveryFigures, Certificate, _Doc

class TaskEvidence(_Doc):
    """A candidate on one task of a multi-task job: its numbers from that task's certificate."""

    status: str
    e_value: float | None
    log_e_value: float | None
    upper_bound: float | None
    recovery: RecoveryFigures | None
    level: float
    estimate: float | None
    labels_human: int = Field(ge=0)
    labels_judge: int = Field(ge=0)
    risk_on_full_table: float | None


class TasksCandidate(_Doc):
    candidate: str
    objective: float | None = Field(description="the mean over tasks of its objective")
    certified: bool
    selected: bool
    e_value: float | None = Field(description="combined: the smallest of its tasks' e-values")
    log_e_value: float | None
    threshold: float
    level: float
    tasks: dict[str, TaskEvidence]


class TaskSummary(_Doc):
    name: str
    target: str = Field(description="the task's claim in words")
    alpha: float
    data: str
    items: int = Field(ge=0)
    budget_n: int = Field(ge=1)
    certified_on_its_own: list[str]
    labels: Counts
    job_id: str | None
    mlflow_run: str | None
    output: str | None = Field(description="the task's own folder (its report and certificate)")


class TasksProcedure(_Doc):
    name: str
    delta: float = Field(gt=0, lt=1)
    level: str
    candidates: int = Field(ge=1)


class TasksPolicy(_Doc):
    kind: str
    betting: str


class TasksObjective(_Doc):
    column: str
    goal: Literal["minimize", "maximize"]
    combined: str


class TasksLabels(_Doc):
    spent: Counts
    full_budget: Counts


class TasksCertificate(_Doc):
    """A multi-task job's certificate (its ``selection.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True,
                              json_schema_extra={"$id": f"https://certsel.dev/schemas/tasks-selection-{SCHEMA_VERSION}.json"})

    kind: Literal["multi-task"]
    certsel_version: str
    job: str
    created: str = Field(description="ISO 8601, UTC")
    selected: str | None
    certificate: str
    guarantee: str
    procedure: TasksProcedure
    policy: TasksPolicy
    objective: TasksObjective | None
    certified_set: list[str]
    tasks: list[TaskSummary]
    labels: TasksLabels
    candidates: list[TasksCandidate]




def parse_any(cert: dict) -> Certificate | TasksCertificate:
    """A selection.json file's dict, typed: a multi-task job's or one job's certificate."""
    return TasksCertificate.model_validate(cert) if cert.get("kind") == "multi-task" else Certificate.model_validate(cert)
