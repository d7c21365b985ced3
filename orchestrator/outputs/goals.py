"""What a job certifies, as its outputs present it: one object per goal, asked for its parts.

A certificate (:class:`~.selection_schema.Selection`) states one goal: candidates certified R <= alpha
(:class:`RiskSelection`), the same as a recovery against a reference model (:class:`RecoverySelection`) or a pairwise
ranking (:class:`RankingGoal`); stacked tasks (:class:`_Stacked`) and gates (:class:`_Gate`) are mixed into a selection.
:func:`goal_of` finds the goal once; the terminal (``certsel/terminal.py``) and the report (``report.py``) ask it for
each part and know no goal themselves. A new goal is a new class here. No heavy imports: ``certsel show`` starts fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .cells import (cost_line, e_value_cell, e_value_line, efficiency_cell, headline, judge_cell, objective_head,
                    oracle_line, rank_text, saved_text, selected_headline, setting_lines, tie_counts)
from .gpu import gpu_line
from .numbers import _round, bound_text, round_down, share_text
from certsel.orchestrator.results.outcomes import Outcome, gate_exit_code


@dataclass(frozen=True)
class Column:
    """A terminal table column: ``keep`` 0 is never dropped; larger values go first on a narrow terminal."""

    name: str
    keep: int = 0


@dataclass(frozen=True)
class Section:
    """A part of the report after the candidates' table: a heading, a note and its tables."""

    heading: str
    note: str
    tables: list = field(default_factory=list)


def _fmt(x, spec: str = ".3f") -> str:
    return "" if x is None else format(x, spec)


BOUNDS_LEGEND = ("simultaneous bound: R <= it for every candidate at once, with probability >= {conf:g} (<= alpha "
                 "exactly for the certified set; blank: no statement). upper bound: the one-sided bound that inverts "
                 "the candidate's own test at the level of its decision; a per-candidate statement, not adjusted for "
                 "the selection. to certify / min: human labels until certified against log(1/level) / KL_inf, the "
                 "fewest any test would need on average, estimated from its own labels (a rough guide). Names: "
                 "docs/glossary.md.")

RECOVERY_LEGEND = ("simultaneous lower bound: on E[score] / E[reference score] for every candidate at once, with "
                   "probability >= {conf:g} (>= {r:g} exactly for the certified set; blank: no statement). lower "
                   "bound: the candidate's own test's bound at the level of its decision (R-Eval on a table: "
                   "inverting its test; otherwise r + 1 - (1 + r) U from its risk bound U). recovery estimate: mean "
                   "score / mean reference score on its labelled items. to certify / min: as for risks, on its "
                   "recovery losses. Names: docs/glossary.md.")

BOUNDS_NOTE = ("Simultaneous bound: R is at most it for every candidate at once, with probability at least {conf:g} (at "
               "most alpha exactly for the certified set; blank: no statement about that candidate). This is the "
               "statement that keeps its level for the selected candidate, whatever made it the selected one. Upper "
               "bound: the one-sided bound that inverts the candidate's own test, at the level of its decision "
               "(level column); a per-candidate statement, not adjusted for the selection. The two-sided interval "
               "is at the candidate's interval level, split over both sides. Upper bounds are rounded up. To "
               "certify / min: human labels until certified against log(1/level) / KL_inf, the fewest any test "
               "would need on average, estimated from the candidate's own labels (a rough guide: from few labels "
               "taken until the evidence was strong it tends to be optimistic).")

RECOVERY_NOTE = ("Recovery is E[score] / E[reference score]; the job certifies recovery >= {r:g} as the risk test of "
                 "the losses (r s_ref - s + 1) / (1 + r) at alpha = 1 / (1 + r). Simultaneous lower bound: at least it "
                 "for every candidate at once, with probability at least {conf:g} (at least r exactly for the "
                 "certified set; blank: no statement). Lower bound: the bound of the candidate's own test at the level "
                 "of its decision (R-Eval on a table inverts its test over r; a judge-assisted test or a live job "
                 "carries its risk bound U over as r + 1 - (1 + r) U). Lower bounds are rounded down. Recovery "
                 "estimate: mean score over mean reference score on the candidate's labelled items; recovery on "
                 "table: the same on every item of the table.")


def recovery_dict(x) -> dict:
    """A candidate's recovery figures as the certificate states them: lower bounds rounded down."""
    return {"estimate": _round(x.estimate), "lower_bound": round_down(x.lower_bound),
            "simultaneous_lower_bound": round_down(x.simultaneous_lower_bound),
            "on_full_table": _round(x.on_full_table), "labels": x.labels}


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
    """One goal's parts, with the defaults of a goal that lacks them (the outputs ask every goal for every part)."""

    table_heading = "Candidates"
    has_evidence = False  # whether the certificate has the selected candidate's evidence block
    beside_report = "selection.json and labels.parquet beside it"  # the terminal's words after the report's path
    runs_note = ""  # the terminal's words after the MLflow links

    # -- the terminal and --format ---------------------------------------------------------------------
    def headline(self, cert) -> str:
        """What the job certified: the first line of the terminal's and markdown's answer."""
        return headline(cert)

    def table(self, cert) -> tuple[str, list[Column], list[list[str]], list[bool]]:
        """(title, columns, rows, bold rows) of the terminal's table."""
        raise NotImplementedError

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
        return lines + self.setting_lines(cert)

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

    def top_fields(self, result) -> dict:
        """Fields of selection.json this goal adds (a recovery's claim, an aggregate's, a ranking)."""
        return {}

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


class RiskSelection(Goal):
    """Candidates certified R <= alpha under a multiple-testing procedure, one selected among them."""

    # the four bound columns' words (a recovery states the same quantities as shares)
    joint_head, own_word, estimate_head, interval_head = "simultaneous bound", "upper bound", "estimate", \
        "two-sided interval"

    def target(self, cert) -> str:
        return f"alpha={cert.procedure.alpha:g}"

    def title(self, cert) -> str:
        p = cert.procedure
        return f"{cert.job}: {cert.policy.kind} / {p.level}, {self.target(cert)}"

    def cells(self, c, alpha) -> tuple[str, str, str, str]:
        """A candidate's simultaneous bound, own bound, estimate and interval, as the tables show them."""
        ci = "" if c.ci is None else f"[{c.ci[0]:.3f}, {bound_text(c.ci[1])}]"
        return bound_text(c.simultaneous_bound, alpha), bound_text(c.upper_bound, alpha), _fmt(c.estimate), ci

    def extra_columns(self, cert) -> tuple[list[str], list[list[str]]]:
        """Columns a goal adds after the human labels (an aggregate: labels by task): heads, cells per row."""
        return [], [[] for _ in cert.candidates]

    def table(self, cert) -> tuple[str, list[Column], list[list[str]], list[bool]]:
        """The terminal's table: the simultaneous bound (what the certificate is about) first, then the candidate's
        own bound at its level; the interval and the judge's agreement as secondary columns."""
        alpha, cands = cert.procedure.alpha, cert.candidates
        testing = any(c.e_value is not None for c in cands)
        judged = any(c.judge is not None for c in cands)
        levels = {c.level for c in cands if c.upper_bound is not None}
        # one name per quantity (docs/glossary.md): selection.json's simultaneous_bound and upper_bound
        own = self.own_word + (f" (level {next(iter(levels)):.3g})" if len(levels) == 1 else " @ level")
        extra, extra_cells = self.extra_columns(cert)
        # "in set" repeats the status for most procedures: it goes last of the secondary columns
        cols = [Column("candidate"), Column(objective_head(cert), 2), Column("status"), Column("in set", 1),
                *([Column("e-value / threshold", 3)] if testing else []), Column(self.joint_head), Column(own, 4),
                Column(self.estimate_head, 5), Column(self.interval_head, 7), Column("human", 1),
                *[Column(x, 2) for x in extra], *([Column("to certify / min", 6)] if testing else []),
                *([Column("judge agrees (kappa)", 6)] if judged else [])]
        rows = []
        for c, more in zip(cands, extra_cells, strict=True):
            joint, ub, est, ci = self.cells(c, alpha)
            if ub and len(levels) > 1:
                ub += f" @ {c.level:.3g}"
            row = [c.candidate + (" *" if c.selected else ""), "" if c.objective is None else f"{c.objective:g}",
                   c.status, "yes" if c.certified else "no"]
            if testing:
                row.append(e_value_cell(c))
            row += [joint, ub, est, ci, str(c.labels_human), *more]
            if testing:
                row.append(efficiency_cell(c))
            if judged:
                row.append(judge_cell(c.judge))
            rows.append(row)
        return self.title(cert), cols, rows, [c.selected for c in cands]

    def after_table(self, cert) -> list[str]:
        return [BOUNDS_LEGEND.format(conf=1 - cert.procedure.delta)]

    def evidence(self, cert) -> str | None:
        """The selected candidate's own evidence, one line per number with its level (names: docs/glossary.md)."""
        ev = cert.evidence
        if ev is None or ev.upper_bound is None:
            return None
        lines = [f"  upper bound: R <= {bound_text(ev.upper_bound, cert.procedure.alpha)} (its own test, one-sided, "
                 f"at level {ev.level:.3g}; not adjusted for the selection)"]
        if ev.e_value is not None:
            lines.append(e_value_line(ev))
        lines.append(f"  estimate: {ev.estimate:.3f} ({ev.estimate_note})")
        if ev.certified_at_labels:
            lines.append(f"  human labels: certified after {ev.certified_at_labels}, {ev.labels_human} bought"
                         + (f"; any test would need about {ev.labels_minimum_estimate:.0f} on average (estimated "
                            "from its labels)" if ev.labels_minimum_estimate else ""))
        else:
            lines.append(f"  human labels: {ev.labels_human}")
        return "\n".join(["evidence:", *lines])

    # -- the report ------------------------------------------------------------------------------
    def summary(self, cert) -> tuple[str, list[str]]:
        """The report's summary box: a headline and its supporting lines (plain text)."""
        sel, p = cert.selected, cert.procedure
        if sel is None:
            return "Nothing certified", [f"No candidate was certified {self.claim_words(cert)} at "
                                         f"{1 - p.delta:g} confidence within its budget."]
        head, lines = self.deploy(cert)
        return head, lines + self._evidence_tail(cert)

    def claim_words(self, cert) -> str:
        return f"R <= {cert.procedure.alpha:g}"

    def deploy(self, cert) -> tuple[str, list[str]]:
        ev, p = cert.evidence, cert.procedure
        head = f"Deploy {cert.selected}: R <= {bound_text(ev.simultaneous_bound, p.alpha)} at {1 - p.delta:g} confidence"
        lines = []
        if ev.upper_bound is not None:
            lines.append(f"upper bound: R <= {bound_text(ev.upper_bound, p.alpha)} (its own test, one-sided, at level "
                         f"{_fmt(ev.level, '.3g')}; a per-candidate statement, not adjusted for the selection)")
        lines.append(f"estimate {_fmt(ev.estimate)}: {ev.estimate_note}")
        return head, lines

    def _evidence_tail(self, cert) -> list[str]:
        """The summary's last lines, a risk's or a recovery's alike: the e-value and the objective."""
        ev, lines = cert.evidence, []
        if ev.exact:
            lines.append(f"decided on the exact mean of every item ({ev.labels_human} labels: the whole table)")
        elif ev.e_value is not None:
            lines.append(f"e-value {ev.e_value:.3g} against the threshold {ev.threshold:.3g} it had to reach "
                         f"(certified after {ev.certified_at_labels} human labels, {ev.labels_human} bought)")
        if cert.selected_objective is not None and cert.objective is not None:
            lines.append(f"{cert.objective.column} = {cert.selected_objective:g} "
                         f"({cert.objective.goal}, among the {len(cert.certified_set)} certified)")
        return lines

    def rows(self, cert, extra) -> list[list[str]]:
        """The report's candidate table; ``extra(c)``: the source's cells after the judge's, heads ``extra.heads``."""
        cands, alpha = cert.candidates, cert.procedure.alpha
        testing = any(c.e_value is not None for c in cands)
        judged = any(c.judge is not None for c in cands)
        # one level for every candidate (FST, Bonferroni) goes in the header: a column less to scroll
        levels = {c.level for c in cands if c.upper_bound is not None}
        one_level = len(levels) <= 1
        own_head = f"{self.own_word} (level {next(iter(levels)):.3g})" if len(levels) == 1 else self.own_word
        out = [["candidate", objective_head(cert), "status", "in set", self.joint_head, own_head,
                *([] if one_level else ["level"]), self.estimate_head, *(["e-value / threshold"] if testing else []),
                self.interval_head, "human", *(["to certify / min"] if testing else []), "judge", "requests",
                *(["judge agrees (kappa)"] if judged else []), *extra.heads, "note"]]
        for c in cands:
            joint, own_text, est, ci = self.cells(c, alpha)
            row = [c.candidate, "" if c.objective is None else f"{c.objective:g}", c.status,
                   "yes" if c.certified else "no", joint, own_text,
                   *([] if one_level else ["" if c.upper_bound is None else f"{c.level:.3g}"]), est]
            if testing:
                row.append(e_value_cell(c))
            row += [ci, str(c.labels_human)]
            if testing:
                row.append(efficiency_cell(c))
            row += [str(c.labels_judge), str(c.requests)]
            if judged:
                row.append(judge_cell(c.judge))
            row += [*extra(c), (c.reason or "").replace("|", "/")]
            out.append(row)
        return out

    def classes(self, cert) -> list[str]:
        return [" ".join(x for x in ("selected" if c.selected else "", "certified" if c.certified else "") if x)
                for c in cert.candidates]

    def note(self, cert) -> str | None:
        return BOUNDS_NOTE.format(conf=1 - cert.procedure.delta)

    # -- the certificate (built from the job's result) ---------------------------------------------
    states_own_words = False  # a recovery's statement replaces the risk statement, aggregate words included
    on_table_word = "R on table"

    def task_value(self, f) -> str:
        return "" if f.risk_on_full_table is None else f"{f.risk_on_full_table:.3f}"

    def statement(self, result) -> str:
        """The certified statement in words."""
        cfg, sel = result.cfg, result.selected_record
        if sel is None:
            return "no candidate certified"
        out = (f"R({sel.name}) <= {bound_text(sel.joint_bound, cfg.alpha)} with probability >= {1 - cfg.delta:g}, "
               f"{cfg.proc.joint_words(cfg.alpha, len(result.certified), len(result.records))} ({result.level})"
               + nominal_words(cfg) + f"; R: a candidate's mean {self.loss_words(cfg)}")
        if result.data.pilot is not None:
            out += (f"; the sequence ran from {result.data.pilot.start} (a judge-only pilot's start: the "
                    f"{len(result.data.pilot.skipped)} configs before it were not tested)")
        return out

    has_evidence = True

    def procedure_fields(self, cfg) -> dict:
        return {"alpha": cfg.alpha}

    def by_objective(self, cfg) -> bool:
        """True for procedures that select by objective."""
        return not cfg.proc.needs_order and cfg.objective is not None

    # -- MLflow ------------------------------------------------------------------------------------
    def params(self, cfg, data) -> dict:
        return {"alpha": cfg.alpha}

    def note_target(self, cfg) -> str:
        return f", alpha = {cfg.alpha:g}"

    def candidate_note(self, result, row) -> list[str]:
        alpha, delta, bits = result.cfg.alpha, result.cfg.delta, []
        if row.simultaneous_bound is not None:
            bits.append(f"R <= {bound_text(row.simultaneous_bound, alpha)} together with every other candidate's "
                        f"simultaneous bound, with probability >= {1 - delta:g} (alpha = {alpha:g})")
        if row.upper_bound is not None:
            bits.append(f"upper bound: R <= {bound_text(row.upper_bound, alpha)} (its own test, one-sided, at level "
                        f"{row.level:.3g}; not adjusted for the selection)")
        return bits


class RecoverySelection(RiskSelection):
    """A selection certified as recovery >= r against a reference model: the evidence as shares of its score."""

    joint_head, own_word, estimate_head, interval_head = "simultaneous lower bound", "lower bound", \
        "recovery estimate", "recovery on table"

    def target(self, cert) -> str:
        return cert.claim.words

    def claim_words(self, cert) -> str:
        return cert.claim.words

    def cells(self, c, alpha) -> tuple[str, str, str, str]:
        rec = c.recovery
        return (share_text(rec.simultaneous_lower_bound), share_text(rec.lower_bound),
                "" if rec.estimate is None else f"{rec.estimate:.1%}",
                "" if rec.on_full_table is None else f"{rec.on_full_table:.1%}")

    def after_table(self, cert) -> list[str]:
        return [RECOVERY_LEGEND.format(conf=1 - cert.procedure.delta, r=cert.claim.at_least)]

    def evidence(self, cert) -> str | None:
        """The selected candidate's own evidence in a recovery job, one labelled line each."""
        ev = cert.evidence
        if ev is None or ev.recovery is None:
            return None
        rec = ev.recovery
        lines = [f"  lower bound: recovery >= {share_text(rec.lower_bound)} (its own test, one-sided, at level "
                 f"{ev.level:.3g}; not adjusted for the selection)"]
        if ev.e_value is not None:
            lines.append(e_value_line(ev))
        if rec.estimate is not None:
            lines.append(f"  estimate: {rec.estimate:.1%} (mean score / mean reference score over its "
                         f"{rec.labels} labelled items)")
        return "\n".join(["evidence:", *lines])

    def deploy(self, cert) -> tuple[str, list[str]]:
        ev, claim = cert.evidence, cert.claim
        rec, conf = ev.recovery, 1 - cert.procedure.delta
        head = (f"Deploy {cert.selected}: recovery >= {share_text(rec.simultaneous_lower_bound)} of "
                f"{claim.reference!r} at {conf:g} confidence")
        lines = []
        if rec.lower_bound is not None:
            lines.append(f"lower bound: recovery >= {share_text(rec.lower_bound)} (its own test, one-sided, at level "
                         f"{_fmt(ev.level, '.3g')}; a per-candidate statement, not adjusted for the selection)")
        if rec.estimate is not None:
            lines.append(f"estimate {rec.estimate:.1%}: mean score / mean reference score over its {rec.labels} "
                         "labelled items")
        return head, lines

    def note(self, cert) -> str | None:
        return RECOVERY_NOTE.format(r=cert.claim.at_least, conf=1 - cert.procedure.delta)

    # -- the certificate ---------------------------------------------------------------------------
    states_own_words = True
    on_table_word = "recovery on table"

    def task_value(self, f) -> str:
        return "" if f.recovery_on_full_table is None else f"{f.recovery_on_full_table:.1%}"

    def claim_prefix(self) -> str:
        return "recovery"

    def claim_words_of(self, cfg) -> str:
        """The claim in words: "recovery >= 95% of 'score_fp_human'"."""
        return f"{self.claim_prefix()} >= {cfg.recovery.at_least * 100:g}% of {cfg.recovery_reference!r}"

    def statement(self, result) -> str:
        cfg, sel = result.cfg, result.selected_record
        if sel is None:
            return "no candidate certified"
        bound = round_down(result.recovery[sel.index].simultaneous_lower_bound)
        return (f"recovery({sel.name}) >= {share_text(bound)} of {cfg.recovery_reference!r} with probability >= "
                f"{1 - cfg.delta:g}, simultaneously for the {len(result.certified)} certified of {len(result.records)} "
                f"candidates ({self.claim_words_of(cfg)} for each; {result.level})")

    def _rows(self, result) -> list[dict]:
        if result.recovery is None:
            raise ValueError("a recovery statement needs the job's label log (collect_labels)")
        return [recovery_dict(x) for x in result.recovery]

    def loss_words(self, cfg) -> str:
        r = cfg.recovery.at_least
        return (f"recovery loss (r s_ref - s + 1) / (1 + r) with r = {r:g} (s: the candidate's score, s_ref: the score "
                f"of the reference {cfg.recovery_reference!r}; R <= 1 / (1 + r) = {cfg.alpha:.6g} exactly when the "
                f"recovery E[s] / E[s_ref] is >= {r:g})")

    def top_fields(self, result) -> dict:
        cfg = result.cfg
        return {"claim": {"kind": "recovery", "at_least": cfg.recovery.at_least, "reference": cfg.recovery_reference,
                          "words": self.claim_words_of(cfg), "risk_alpha": cfg.alpha,
                          "bound_note": ("lower bounds on E[s] / E[s_ref]: R-Eval on a table inverts its own test over "
                                         "r'; a judge-assisted test or a live job carries its risk bound U over as "
                                         "r + 1 - (1 + r) U (valid since E[s_ref] <= 1)")}}

    def candidate_fields(self, result) -> list[dict]:
        return [{"recovery": x} for x in self._rows(result)]

    def evidence_fields(self, result, index: int) -> dict:
        return {"recovery": self._rows(result)[index]}

    def candidate_metrics(self, result, row) -> dict:
        rec = row.recovery.as_json()
        return {f"recovery_{k}": rec[k] for k in ("lower_bound", "simultaneous_lower_bound", "estimate",
                                                  "on_full_table") if rec.get(k) is not None}

    def candidate_note(self, result, row) -> list[str]:
        rec, cfg, bits = row.recovery, result.cfg, []
        if rec.simultaneous_lower_bound is not None:
            bits.append(f"recovery >= {share_text(rec.simultaneous_lower_bound)} of {cfg.recovery_reference!r} "
                        f"together with every other candidate's simultaneous bound, with probability >= "
                        f"{1 - cfg.delta:g}")
        if rec.lower_bound is not None:
            bits.append(f"lower bound: recovery >= {share_text(rec.lower_bound)} (its own test, one-sided, at level "
                        f"{row.level:.3g}; not adjusted for the selection)")
        if rec.estimate is not None:
            bits.append(f"estimate {rec.estimate:.1%} on its {rec.labels} labelled items")
        return bits


class RankingGoal(Goal):
    """A pairwise ranking: the partial order its pairs certified, with ties and rank intervals."""

    table_heading = "Models"

    def title(self, cert) -> str:
        rk, p = cert.ranking, cert.procedure
        return (f"{cert.job}: {cert.policy.kind} / {p.level} "
                f"({rk.pairs_certified} of {rk.pairs} pair orders certified)")

    def _model_rows(self, cert) -> list[list[str]]:
        rk = cert.ranking
        by = {c.candidate: c for c in cert.candidates}
        worse = {m: sum(m in b for b in rk.better.values()) for m in rk.order}
        eps, ties = rk.epsilon, tie_counts(rk)
        return [[m, rank_text(rk, m), str(len(rk.better[m])), str(worse[m]),
                 *([str(ties[m])] if eps is not None else []), "yes" if m in rk.possible_winners else "",
                 _fmt(by[m].estimate), str(by[m].labels_human), f"{rk.score[m]:+d}"] for m in rk.order]

    def table(self, cert):
        """A ranking as the partial order it certifies: per model its certified wins and losses."""
        eps = cert.ranking.epsilon
        cols = [Column("model"), Column("rank (certified)"), Column("better than"), Column("worse than"),
                *([Column(f"tied (< {eps:g})")] if eps is not None else []), Column("possible winner", 1),
                Column("mean loss", 2), Column("items", 1), Column("Copeland (uncertified)", 3)]
        rows = self._model_rows(cert)
        return self.title(cert), cols, rows, [False] * len(rows)

    def after_table(self, cert) -> list[str]:
        return ["possible winners (no other model is certified better): " + ", ".join(cert.ranking.possible_winners)]

    def summary(self, cert) -> tuple[str, list[str]]:
        rk, sel = cert.ranking, cert.selected
        head = f"Best model: {sel}" if sel else "No model is certified better than all others"
        if rk.topk is not None:  # a top-k ranking leads with its top set
            head = headline(cert).replace("top-", "Top ", 1)
        return head, [f"{rk.pairs_certified} of {rk.pairs} pair orders certified; all of them hold together with "
                      f"probability >= {1 - cert.procedure.delta:g}.",
                      "Possible winners (no model certified better): " + ", ".join(rk.possible_winners)]

    def rows(self, cert, extra) -> list[list[str]]:
        eps = cert.ranking.epsilon
        return [["model", "certified rank", "certified better than", "certified worse than",
                 *([f"certified tied (< {eps:g})"] if eps is not None else []), "possible winner",
                 "mean loss of its labelled items", "items", "Copeland (uncertified)"], *self._model_rows(cert)]

    def classes(self, cert) -> list[str]:
        return ["selected" if m == cert.selected else "" for m in cert.ranking.order]

    def sections(self, cert) -> list[Section]:
        """Per pair: the certified order, the anytime interval on R(A) - R(B) and the items it used."""
        rk = cert.ranking
        out = [["pair (A - B)", "certified", "interval on R(A) - R(B)", "items"]]
        for pair, (lo, hi) in rk.difference_intervals.items():
            a, b = pair.split(" - ", 1)
            direct = rk.better_direct
            verdict = (f"{a} better" if b in direct.get(a, ()) else f"{b} better" if a in direct.get(b, ())
                       else f"{a} better (implied)" if b in rk.better.get(a, ())
                       else f"{b} better (implied)" if a in rk.better.get(b, ())
                       else f"tied within {rk.epsilon:g}" if f"{a} ~ {b}" in rk.tied else "undecided")
            out.append([pair, verdict, f"[{lo:+.3f}, {hi:+.3f}]", str(rk.items_per_pair.get(f"{a} vs {b}", ""))])
        return [Section("Pairs", "Each interval holds at every step with the pair's level; the orders shown as "
                                 "certified hold together with probability at least 1 - delta.", [out])]

    # -- the certificate ---------------------------------------------------------------------------
    def statement(self, result) -> str:
        cfg, rk, sel, K = result.cfg, result.ranking, result.selected_record, len(result.records)
        ties = _ties_words(rk) + f"; risk: a model's mean {self.loss_words(cfg)}"
        if rk.topk is not None:
            t = rk.topk
            return (f"the {t.k} best models include {', '.join(t.certified_in) or 'none certified'} and exclude "
                    f"{', '.join(t.certified_out) or 'none certified'}"
                    + (f"; undetermined: {', '.join(t.undetermined)}" if t.undetermined else "")
                    + f", simultaneously with probability >= {1 - cfg.delta:g}" + ties)
        if sel is None:
            return (f"no model is certified better than all {K - 1} others; the {rk.pairs_certified} certified "
                    f"of {rk.pairs} pair orders hold simultaneously with probability >= {1 - cfg.delta:g} "
                    f"(possible winners: {', '.join(rk.possible_winners)})" + ties)
        return (f"{sel.name} has a lower risk than each of the other {K - 1} models; every certified order "
                f"holds simultaneously with probability >= {1 - cfg.delta:g}" + ties)

    def top_fields(self, result) -> dict:
        return {"ranking": result.ranking.as_dict()}

    def candidate_metrics(self, result, row) -> dict:
        lo, hi = result.ranking.rank_intervals.get(row.candidate, (None, None))
        return {} if lo is None else {"rank_best": lo, "rank_worst": hi}

    def job_metrics(self, result) -> dict:
        return {"pairs_certified": result.ranking.pairs_certified, "pairs_tied": result.ranking.pairs_tied}

    def candidate_note(self, result, row) -> list[str]:
        """The model's certified rank interval and ties."""
        rk, bits = result.ranking, []
        lo, hi = rk.rank_intervals.get(row.candidate, (None, None))
        if lo is not None:
            bits.append(f"certified rank {lo}" + ("" if lo == hi else f" to {hi}") + f" of {len(result.records)}, "
                        f"together with every other model's, with probability >= {1 - result.cfg.delta:g}")
        ties = [p for p in rk.tied if row.candidate in p.split(" ~ ")]
        if ties:
            bits.append(f"tied within {rk.epsilon:g} with "
                        + ", ".join(x for p in ties for x in p.split(" ~ ") if x != row.candidate))
        return bits


def _ties_words(rk) -> str:
    """A ranking's certified ties and groups, for its statement ('' without epsilon)."""
    if rk.epsilon is None:
        return ""
    groups = " > ".join("{" + ", ".join(g) + "}" if len(g) > 1 else g[0] for g in rk.rank_groups)
    return (f", as are the {rk.pairs_tied} ties |R(A) - R(B)| < {rk.epsilon:g}; certified groups, best first: "
            f"{groups}")


class _Stacked:
    """Mixin: a selection (risk or recovery) on the stacked items of several tasks; adds labels by task, the tasks'
    tables and the aggregate's words."""

    def extra_columns(self, cert):
        tasks = [t.name for t in cert.aggregate.tasks]
        return (["by task: " + " / ".join(tasks)],
                [[" / ".join(str(c.tasks[t].labels_human) for t in tasks)] for c in cert.candidates])

    def after_headline(self, cert) -> list[str]:
        agg = cert.aggregate
        return [f"aggregate: one test on the {cert.data.items} stacked items of {len(agg.tasks)} tasks, losses scaled "
                f"so that their mean is R / M (M = {agg.unit:.4g}; tested at alpha / M = {agg.policy_alpha:.4g})"]

    def sections(self, cert) -> list[Section]:
        """The tasks (weight, items, how their losses were scaled) and each candidate's figures on each task."""
        agg = cert.aggregate
        tasks = [["task", "weight", "items", "loss scale in the stacked table", "table"]] + [
            [t.name, f"{t.weight:.4g}", str(t.items), f"{t.factor:.4g}", t.data] for t in agg.tasks]
        names = [t.name for t in agg.tasks]
        per = [["candidate", *[f"{n}: {self.on_table_word} (human labels)" for n in names]]]
        for c in cert.candidates:
            per.append([c.candidate + (" *" if c.selected else ""),
                        *[f"{self.task_value(c.tasks[n])} ({c.tasks[n].labels_human})" for n in names]])
        return [Section("Tasks", f"{agg.words}: one test on the tasks' stacked items, each task's losses scaled so "
                                 "that the stacked mean is R / M.", [tasks, per])]

    # -- the certificate -------------------------------------------------------------------------
    def subject(self, result, loss: str) -> str | None:
        from .aggregate import subject

        return subject(result, loss)

    def statement(self, result) -> str:
        from .aggregate import aggregate_words

        out = super().statement(result)
        return out if result.selected_record is None or self.states_own_words else \
            f"{out}; {aggregate_words(result)}"

    def top_fields(self, result) -> dict:
        from .aggregate import claim

        return {**super().top_fields(result), "aggregate": claim(result)}

    def candidate_fields(self, result) -> list[dict]:
        from .aggregate import task_rows

        return [{**a, "tasks": b} for a, b in zip(super().candidate_fields(result), task_rows(result), strict=True)]

    def claim_prefix(self) -> str:
        return "weighted recovery over the tasks"

    def candidate_metrics(self, result, row) -> dict:
        out = super().candidate_metrics(result, row)
        for task, fig in (row.tasks or {}).items():  # an aggregate: its figures on each task
            out.update({f"{task}_{k}": v for k, v in fig.as_json().items() if v is not None})
        return out

    def params(self, result_cfg, data) -> dict:
        agg = data.aggregate
        return {**super().params(result_cfg, data), "aggregate_weights": agg.words(), "aggregate_unit": agg.unit,
                "policy_alpha": result_cfg.alpha / agg.unit}


class StackedRisk(_Stacked, RiskSelection):
    """An aggregate risk R = sum_t w_t R_t certified <= alpha."""


class StackedRecovery(_Stacked, RecoverySelection):
    """A weighted recovery over stacked tasks certified >= r."""


class _Gate:
    """Mixin for procedure ``gate`` on a risk or recovery claim: each candidate decided on its own at delta (pass,
    fail or undecided); nothing selected, no simultaneous statement."""

    has_evidence = False
    table_heading = "Gate"

    def headline(self, cert) -> str:
        g = cert.gate
        return (f"gate: {len(g.passed)} pass, {len(g.failed)} fail, {len(g.undecided)} undecided "
                f"(exit {g.exit_code})")

    def title(self, cert) -> str:
        return f"{cert.job}: {cert.policy.kind} / {cert.procedure.level}, pass: {cert.gate.claim}"

    def _gate_cells(self, c, alpha) -> list[str]:
        _, own, est, on_table = self.cells(c, alpha)
        futility = "" if c.futility_e_value is None else f"{c.futility_e_value:.3g}"
        return [c.outcome, str(c.labels_human), "" if c.reused is None else str(c.reused), own,
                "" if c.e_value is None else f"{c.e_value:.3g} / {c.threshold:.3g}", futility, est, on_table]

    def _gate_heads(self, cert) -> list[str]:
        level = cert.procedure.delta
        return ["outcome", "labels", "reused", f"{self.own_word} (level {level:g})", "e-value / threshold",
                "fail e-value", self.estimate_head, self.interval_head]

    def table(self, cert):
        alpha = cert.procedure.alpha
        heads = self._gate_heads(cert)
        keep = {"reused": 3, "fail e-value": 2, self.estimate_head: 4, self.interval_head: 5}
        cols = [Column("candidate")] + [Column(h, keep.get(h, 0)) for h in heads]
        rows = [[c.candidate, *self._gate_cells(c, alpha)] for c in cert.candidates]
        return self.title(cert), cols, rows, [c.outcome == "fail" for c in cert.candidates]

    def after_table(self, cert) -> list[str]:
        return [cert.gate.note]

    def evidence(self, cert) -> str | None:
        return None

    def setting_lines(self, cert) -> list[str]:
        return []  # a gate's futility test is its fail rule, not a default to revisit

    def summary(self, cert) -> tuple[str, list[str]]:
        g = cert.gate
        lines = [f"{name}: {', '.join(names)}" for name, names in (("pass", g.passed), ("fail", g.failed),
                                                                   ("undecided", g.undecided)) if names]
        return self.headline(cert), lines + [g.note]

    def rows(self, cert, extra) -> list[list[str]]:
        alpha = cert.procedure.alpha
        out = [["candidate", *self._gate_heads(cert), "requests", *extra.heads, "note"]]
        for c in cert.candidates:
            out.append([c.candidate, *self._gate_cells(c, alpha), str(c.requests), *extra(c),
                        (c.reason or "").replace("|", "/")])
        return out

    def classes(self, cert) -> list[str]:
        return [c.outcome for c in cert.candidates]

    def note(self, cert) -> str | None:
        return cert.gate.note

    # -- the certificate ---------------------------------------------------------------------------
    def gate_claims(self, cfg) -> tuple[str, str]:
        """(the claim a pass certifies, the one a fail certifies), in words."""
        return f"R <= {cfg.alpha:g}", f"R >= {cfg.alpha:g}"

    def gate_note(self, cfg) -> str:
        yes, no = self.gate_claims(cfg)
        return (f"pass: {yes} certified at delta = {cfg.delta:g}; fail: {no} certified at delta (the futility test on "
                f"the mirrored losses); undecided: neither within the budget. Each outcome is wrong with probability "
                f"<= {cfg.delta:g} on its own, at any stopping time: a statement per candidate, not simultaneous "
                f"over them.")

    @staticmethod
    def outcomes(result) -> list[Outcome]:
        """Each candidate's outcome, in the job's order."""
        return [Outcome.of(r.status, r.name in result.certified) for r in result.records]

    def statement(self, result) -> str:
        cfg = result.cfg
        outcomes = self.outcomes(result)
        yes, no = self.gate_claims(cfg)
        counts = ", ".join(f"{outcomes.count(o)} {o}" for o in Outcome)
        return (f"each candidate on its own with probability >= {1 - cfg.delta:g}: pass certifies {yes}, fail "
                f"certifies {no} ({counts}; {result.level}); R: a candidate's mean {self.loss_words(cfg)}")

    def candidate_fields(self, result) -> list[dict]:
        out = super().candidate_fields(result)
        for row, r, outcome in zip(out, result.records, self.outcomes(result), strict=True):
            row["outcome"] = str(outcome)
            if r.path:
                row["futility_e_value"] = _round(math.exp(min(r.max_log_futility, 700)), 4)
        return out

    def top_fields(self, result) -> dict:
        cfg = result.cfg
        outcomes = dict(zip((r.name for r in result.records), self.outcomes(result), strict=True))
        return {**super().top_fields(result), "gate": {
            "claim": self.gate_claims(cfg)[0], "opposite": self.gate_claims(cfg)[1], "delta": cfg.delta,
            **{k: [n for n, o in outcomes.items() if o is v] for k, v in (("passed", Outcome.PASS),
                                                                         ("failed", Outcome.FAIL),
                                                                         ("undecided", Outcome.UNDECIDED))},
            "exit_code": gate_exit_code(outcomes.values()), "note": self.gate_note(cfg)}}

    def candidate_note(self, result, row) -> list[str]:
        return [f"{row.outcome}: {self.gate_note(result.cfg)}"]


class GateRisk(_Gate, RiskSelection):
    """Each candidate gated on R <= alpha."""


class GateRecovery(_Gate, RecoverySelection):
    """Each candidate gated on recovery >= r against a reference."""

    def gate_claims(self, cfg) -> tuple[str, str]:
        r = cfg.recovery.at_least
        return self.claim_words_of(cfg), f"recovery <= {r * 100:g}% of {cfg.recovery_reference!r}"


class MultiTaskGoal(Goal):
    """A multi-task job (each task a job of its own; a candidate certified on every task): its evidence per task."""

    beside_report = "selection.json beside it; each task's own report is listed above"
    runs_note = "; the tasks' runs are nested under it"

    def headline(self, cert) -> str:
        return selected_headline(cert)  # a multi-task certificate has no ranking

    def table(self, cert):
        head, rows = self.rows(cert)
        cols = [Column(h, 0 if k < 4 else (3 if h.endswith("labels") else 1)) for k, h in enumerate(head)]
        return (f"{cert.job}: {cert.policy.kind} / {cert.procedure.level}, {len(cert.tasks)} tasks", cols, rows,
                [c.selected for c in cert.candidates])

    def after_table(self, cert) -> list[str]:
        return [f"task {t.name}: {t.target}, {len(t.certified_on_its_own)} certified on its own, "
                f"{t.labels.human} human labels" + (f" (report: {t.output}/report.html)" if t.output else "")
                for t in cert.tasks]

    def failures(self, cert) -> list[str]:
        return []

    def spend_lines(self, cert) -> list[str]:
        lab = cert.labels
        return [f"labels over all tasks: {lab.spent.human} human of {lab.full_budget.human}, "
                f"{lab.spent.judge} judge of {lab.full_budget.judge}"]

    TASK_FIELDS = ["candidate", "task", "certified", "selected", "combined_e_value", "threshold", "status", "e_value",
                   "upper_bound", "recovery_lower_bound", "level", "estimate", "labels_human", "labels_judge"]

    def csv_rows(self, cert) -> tuple[list[str], list[dict]]:
        """One row per candidate and task."""
        return self.TASK_FIELDS, [
            {"candidate": c.candidate, "task": task, "certified": c.certified, "selected": c.selected,
             "combined_e_value": c.e_value, "threshold": c.threshold, "status": r.status, "e_value": r.e_value,
             "upper_bound": r.upper_bound,
             "recovery_lower_bound": None if r.recovery is None else r.recovery.lower_bound, "level": r.level,
             "estimate": r.estimate, "labels_human": r.labels_human, "labels_judge": r.labels_judge}
            for c in cert.candidates for task, r in c.tasks.items()]

    @staticmethod
    def rows(cert) -> tuple[list[str], list[list[str]]]:
        """The per-candidate table with a column group per task (terminal, report, markdown)."""
        head = ["candidate", objective_head(cert), "certified", "combined e-value / threshold"]
        for t in cert.tasks:
            head += [f"{t.name}: e-value", f"{t.name}: upper bound ({t.target})", f"{t.name}: labels"]
        out = []
        for c in cert.candidates:
            row = [c.candidate + (" *" if c.selected else ""), "" if c.objective is None else f"{c.objective:g}",
                   "yes" if c.certified else "no", f"{c.e_value:.3g} / {c.threshold:.3g}"]
            for t in cert.tasks:
                r = c.tasks[t.name]
                rec = r.recovery
                own = share_text(rec.lower_bound) if rec is not None else bound_text(r.upper_bound, t.alpha)
                row += ["" if r.e_value is None else f"{r.e_value:.3g}", own, str(r.labels_human)]
            out.append(row)
        return head, out

    def markdown(self, cert) -> str:
        head, rows = self.rows(cert)
        lab = cert.labels
        lines = [f"# certsel: {cert.job} ({len(cert.tasks)} tasks)", "",
                 f"> **{'Deploy ' + cert.selected if cert.selected else 'Nothing certified on every task'}**", "",
                 f"**Certificate:** {cert.certificate}.", "", cert.guarantee, "",
                 "| task | target | items | certified on its own | human labels | report |", "|---|---|---|---|---|---|"]
        for t in cert.tasks:
            lines.append(f"| {t.name} | {t.target} | {t.items} | {len(t.certified_on_its_own)} | "
                         f"{t.labels.human} | {t.output or ''} |")
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cell.replace("|", "/") for cell in r) + " |" for r in rows]
        lines += ["", f"Labels: {lab.spent.human} human of {lab.full_budget.human}, "
                      f"{lab.spent.judge} judge of {lab.full_budget.judge} over all tasks."]
        return "\n".join(lines)


# (ranking, recovery, stacked, gate) -> the goal: the one place the outputs tell goals apart
_GOALS = {(True, False, False, False): RankingGoal(), (False, False, False, False): RiskSelection(),
          (False, True, False, False): RecoverySelection(), (False, False, True, False): StackedRisk(),
          (False, True, True, False): StackedRecovery(), (False, False, False, True): GateRisk(),
          (False, True, False, True): GateRecovery()}


def goal_of(cert):
    """The goal a certificate states."""
    if getattr(cert, "kind", None) == "multi-task":  # a multi-task job's certificate is a TasksSelection
        return MultiTaskGoal()
    return _GOALS[(cert.ranking is not None, cert.claim is not None, cert.aggregate is not None, cert.gate is not None)]


def goal_for(result):
    """The goal a finished job's result states (its certificate is being built)."""
    cfg = result.cfg
    return _GOALS[(cfg.proc.ranking, cfg.recovery is not None, result.data.aggregate is not None, cfg.proc.gates)]


def goal_for_config(cfg):
    """The goal a job's configuration asks for (before it has run)."""
    return _GOALS[(cfg.proc.ranking, cfg.recovery is not None, cfg.aggregate is not None, cfg.proc.gates)]
