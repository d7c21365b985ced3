"""The parts every goal has, with the defaults of a goal that lacks them, and the candidate table's columns.

A goal declares its table once, as :class:`Field` objects (:meth:`Goal.fields`): the terminal, ``--format
markdown`` and the report all read the same declaration, each keeping the fields shown where it prints.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from ..cells import (agreement_cell, cost_line, headline, ledger_lines, oracle_line, saved_text, setting_lines,
                     tasks_cell)
from ..gpu import gpu_line


@dataclass(frozen=True)
class Column:
    """A terminal table column: ``keep`` 0 is never dropped; larger values go first on a narrow terminal."""

    name: str
    keep: int = 0


class Shown(enum.Flag):
    """Where a field of the candidate table is printed (the terminal's table is also ``--format markdown``'s)."""

    TERMINAL = enum.auto()
    REPORT = enum.auto()
    BOTH = TERMINAL | REPORT


@dataclass(frozen=True)
class Field:
    """One column of a goal's table: its head, its cell for one row, how soon a narrow terminal drops it, where
    it is shown."""

    head: str
    cell: Callable[[object], str]
    keep: int = 0
    shown: Shown = Shown.BOTH


@dataclass(frozen=True)
class Section:
    """A part of the report after the candidates' table: a heading, a note and its tables."""

    heading: str
    note: str
    tables: list = field(default_factory=list)


@dataclass(frozen=True)
class Ask:
    """What decides a job's goal, read alike from its configuration, its result or its certificate."""

    ranking: bool = False
    recovery: bool = False
    regression: bool = False  # certified against a baseline on the same items
    stacked: bool = False
    gates: bool = False
    tasks: bool = False  # a multi-task job: each task a job of its own
    job: str = ""


def _fmt(x, spec: str = ".3f") -> str:
    return "" if x is None else format(x, spec)


def note_cell(c) -> str:
    """A candidate's reason, as the report's note row under it."""
    return (c.reason or "").replace("|", "/")


def people_fields(cert) -> list[Field]:
    """The report's columns for labels from people (an annotation queue), after the judge's."""
    people = any(c.annotators is not None for c in cert.candidates)
    agreed = any(c.annotators is not None and c.annotators.agreement for c in cert.candidates)
    return [*([Field("annotation tasks: imported / withdrawn", lambda c: tasks_cell(c.annotators),
                     shown=Shown.REPORT)] if people else []),
            *([Field("annotators agree: alpha (kappa)", lambda c: agreement_cell(c.annotators),
                     shown=Shown.REPORT)] if agreed else [])]


def nominal_words(cfg) -> str:
    """The caveat of a configuration whose stated level is nominal, not proved."""
    if "partition" in cfg.policy.policy_kind.takes and cfg.policy.radius == "paper":
        return ("; NOT EXACT: radius 'paper' with a partition fitted to the labels makes this level nominal "
                "(use radius 'betting' for a proved one)")
    return ""


CSV_FIELDS = ("candidate", "objective", "status", "certified", "selected", "e_value", "threshold", "log_e_value",
              "simultaneous_bound", "upper_bound", "level", "estimate", "ci_low", "ci_high", "labels_human",
              "labels_judge", "requests", "certified_at_labels", "labels_minimum_estimate", "risk_on_full_table",
              "cost", "reason")


def candidate_records(cert) -> list[dict]:
    """One flat dict per candidate (the CSV's rows and ``Result.to_frame()``)."""
    out = []
    for c in cert.candidates:
        row = {k: getattr(c, k) for k in CSV_FIELDS if k not in ("ci_low", "ci_high")}
        row["ci_low"], row["ci_high"] = (None, None) if c.ci is None else tuple(c.ci)
        row = {k: row[k] for k in CSV_FIELDS}
        for task, fig in (c.tasks or {}).items():  # an aggregate: its per-task figures
            row.update({f"{task}_{k}": v for k, v in fig.as_json().items()})
        out.append(row)
    return out


FAILED = ("source failed", "worker lost")  # the statuses of a candidate that was never evaluated


class Goal:
    """One goal's parts (the outputs ask every goal for every part). A goal is registered
    (:func:`~.registry.register`) under its ``name`` and chosen by :meth:`asked`."""

    name: ClassVar[str] = ""
    asks: ClassVar[dict[str, bool]] = {}  # the Ask flags it serves, declared: {"gates": True, "recovery": False}
    table_heading = "Candidates"
    has_evidence = False  # whether the certificate has the selected candidate's evidence block
    beside_report = "selection.json and labels.parquet beside it"  # the terminal's words after the report's path
    runs_note = ""  # the terminal's words after the MLflow links

    @classmethod
    def asked(cls, ask: Ask) -> bool:
        """Whether a job asking ``ask`` has this goal: every flag of :attr:`asks` as declared (of several goals that say
        yes, the most derived class is chosen). A goal may read more of ``ask`` by overriding this."""
        return bool(cls.asks) and all(getattr(ask, k) is v for k, v in cls.asks.items())

    # -- the candidate table: declared once, read by the terminal, markdown and the report ----------------
    def title(self, cert) -> str:
        return cert.job

    def fields(self, cert) -> list[Field]:
        """The table's columns."""
        raise NotImplementedError

    def table_rows(self, cert) -> list:
        """The objects the table has a row for (candidates; a ranking's models)."""
        return list(cert.candidates)

    def bold(self, cert) -> list[bool]:
        """The terminal's bold rows."""
        return [c.selected for c in cert.candidates]

    def classes(self, cert) -> list[str]:
        """The report's row classes."""
        return [" ".join(x for x in ("selected" if c.selected else "", "certified" if c.certified else "") if x)
                for c in cert.candidates]

    def _table(self, cert, where: Shown) -> tuple[list[Field], list[list[str]]]:
        fields = [f for f in self.fields(cert) if f.shown & where]
        return fields, [[f.cell(r) for f in fields] for r in self.table_rows(cert)]

    def table(self, cert) -> tuple[str, list[Column], list[list[str]], list[bool]]:
        """(title, columns, rows, bold rows) of the terminal's table."""
        fields, rows = self._table(cert, Shown.TERMINAL)
        return self.title(cert), [Column(f.head, f.keep) for f in fields], rows, self.bold(cert)

    def rows(self, cert) -> list[list[str]]:
        """The report's table: the heads, then a row each (a last column "note" goes on a row of its own)."""
        fields, rows = self._table(cert, Shown.REPORT)
        return [[f.head for f in fields], *rows]

    # -- the terminal and --format ---------------------------------------------------------------------
    def headline(self, cert) -> str:
        """What the job certified: the first line of the terminal's and markdown's answer."""
        return headline(cert)

    def after_table(self, cert) -> list[str]:
        """The terminal's lines under the table (shown unless --quiet)."""
        return []

    def failures(self, cert) -> list[str]:
        """The candidates whose label source or worker failed, one line each (always shown)."""
        return [f"{c.candidate}: not certified ({c.reason})" for c in cert.candidates if c.status in FAILED]

    def after_headline(self, cert) -> list[str]:
        """The terminal's lines under the headline."""
        return []

    def spend_lines(self, cert) -> list[str]:
        """What the job spent, and how it ran: labels, the oracle's estimate, costs, GPU time, a resume."""
        lab = cert.labels
        if all(c.status in FAILED for c in cert.candidates):  # nothing was evaluated: nothing was saved either
            return [f"labels: {lab.spent.human} human, {lab.spent.judge} judge: every candidate's source failed, so "
                    "the job is recorded as failed (run it again to resume it)"]
        lines = ["labels: " + ", ".join(
            f"{getattr(lab.spent, k)} {k} of {getattr(lab.full_budget, k)} ({saved_text(getattr(lab.saved_fraction, k))})"
            for k in ("human", "judge", "requests") if getattr(lab.full_budget, k))]
        if lab.oracle is not None:
            lines.append(oracle_line(lab.oracle))
        if cert.costs is not None:
            lines.append(cost_line(cert.costs))
        if cert.gpu is not None:
            lines.append(gpu_line(cert.gpu))
        if cert.resume is not None:
            r = cert.resume
            lines.append(f"resumed from round {r.from_round}: {r.steps_from_snapshots} candidate steps from "
                         f"snapshots, {r.steps_replayed} replayed from the label log, no label bought twice")
        if cert.recovered is not None and cert.recovered.hosts:
            r = cert.recovered
            lines.append(f"workers rebuilt after a crash: {r.hosts} ({r.steps_from_snapshots} candidate steps "
                         f"from snapshots, {r.steps_replayed} replayed from the label log)")
        return lines + self.setting_lines(cert) + ledger_lines(cert)

    def setting_lines(self, cert) -> list[str]:
        """Where a measured default may not have been the best for this job (cells.setting_lines)."""
        return setting_lines(cert)

    def csv_rows(self, cert) -> tuple[list[str], list[dict]]:
        """``--format csv``: the columns and one flat dict per row."""
        rows = candidate_records(cert)
        return (list(rows[0]) if rows else list(CSV_FIELDS)), rows

    def markdown(self, cert) -> str:
        """``--format markdown``: the table and the certificate sentence."""
        title, cols, rows, _ = self.table(cert)
        lines = [f"**{title}**", "", "| " + " | ".join(c.name for c in cols) + " |",
                 "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
        lines += ["", f"{self.headline(cert)} — {cert.certificate}"]
        return "\n".join(lines)

    def evidence(self, cert) -> str | None:
        """The terminal's block of the selected candidate's own numbers (None: none)."""
        return None

    def summary(self, cert) -> tuple[str, list[str]]:
        """The report's summary box: a headline and its supporting lines (plain text)."""
        return self.headline(cert), []

    def note(self, cert) -> str | None:
        """What the report's bounds mean (under the table; None: nothing to say)."""
        return None

    def sections(self, cert) -> list[Section]:
        """The report's parts after the table."""
        return []

    # -- the certificate (built from the job's result) ---------------------------------------------
    def loss_words(self, cfg) -> str:
        """What one item's loss is: the source's words where it needs saying, else "loss"."""
        from certsel.orchestrator.inputs.sources import source_of

        return source_of(cfg).loss_words(cfg) or "loss"

    def subject(self, result, loss: str) -> str | None:
        """The guarantee's first sentences when the goal says what R is itself (None: R is the mean loss)."""
        return None

    def statement(self, result) -> str:
        """The certified statement in words."""
        raise NotImplementedError

    def top_fields(self, result) -> dict:
        """Fields of selection.json this goal adds (a recovery's claim, an aggregate's, a ranking)."""
        return {}

    def reason(self, cfg, reason: str | None) -> str | None:
        """A candidate's reason for stopping, as the engine gave it, in this goal's words."""
        return reason

    def candidate_fields(self, result) -> list[dict]:
        """Per candidate, the fields this goal adds to its row."""
        return [{} for _ in result.records]

    def evidence_fields(self, result, index: int) -> dict:
        return {}

    def procedure_fields(self, cfg) -> dict:
        return {}

    def by_objective(self, cfg) -> bool:
        """Whether the certificate lists the candidates by objective (best first), not in the job's order."""
        return False

    # -- MLflow ------------------------------------------------------------------------------------
    def params(self, cfg, data) -> dict:
        return {}

    def note_target(self, cfg) -> str:
        return ""

    def candidate_metrics(self, result, row) -> dict:
        return {}

    def job_metrics(self, result) -> dict:
        return {}

    def candidate_note(self, result, row) -> list[str]:
        """A candidate run's description: the numbers its statement holds."""
        return []
