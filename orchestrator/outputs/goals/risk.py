"""Candidates certified R <= alpha under a multiple-testing procedure, one selected among them."""

from __future__ import annotations

from ..cells import e_value_cell, e_value_line, efficiency_cell, judge_cell, objective_head
from ..numbers import bound_text
from certsel.orchestrator.results.outcomes import FUTILE_WORDS

from .base import Field, Goal, Shown, _fmt, nominal_words, note_cell, people_fields
from .registry import register

BOUNDS_LEGEND = ("simultaneous bound: R <= it for every candidate at once, with probability >= {conf:g} (<= alpha "
                 "exactly for the certified set; blank: no statement). upper bound: the one-sided bound that inverts "
                 "the candidate's own test at the level of its decision; a per-candidate statement, not adjusted for "
                 "the selection. to certify / min: human labels until certified against log(1/level) / KL_inf, the "
                 "fewest any test would need on average, estimated from its own labels (a rough guide). Names: "
                 "docs/glossary.md.")

BOUNDS_NOTE = ("Simultaneous bound: R is at most it for every candidate at once, with probability at least {conf:g} (at "
               "most alpha exactly for the certified set; blank: no statement about that candidate). This is the "
               "statement that keeps its level for the selected candidate, whatever made it the selected one. Upper "
               "bound: the one-sided bound that inverts the candidate's own test, at the level of its decision "
               "(level column); a per-candidate statement, not adjusted for the selection. The two-sided interval "
               "is at the candidate's interval level, split over both sides. Upper bounds are rounded up. To "
               "certify / min: human labels until certified against log(1/level) / KL_inf, the fewest any test "
               "would need on average, estimated from the candidate's own labels (a rough guide: from few labels "
               "taken until the evidence was strong it tends to be optimistic).")


@register
class RiskSelection(Goal):
    """Candidates certified R <= alpha under a multiple-testing procedure, one selected among them."""

    name = "risk"
    asks = {"ranking": False, "recovery": False, "tasks": False}
    has_evidence = True
    # the four bound columns' words (a recovery states the same quantities as shares)
    joint_head, own_word, estimate_head, interval_head = "simultaneous bound", "upper bound", "estimate", \
        "two-sided interval"
    states_own_words = False  # a recovery's statement replaces the risk statement, aggregate words included
    on_table_word = "R on table"

    def target(self, cert) -> str:
        return f"alpha={cert.procedure.alpha:g}"

    def failed_claim_words(self, cfg) -> str:
        """What a futility stop certifies, in this goal's words."""
        return f"R >= {cfg.alpha:g}"

    def reason(self, cfg, reason: str | None) -> str | None:
        # the engine states a futility stop on the tested losses; a recovery or regression says it of its claim
        return None if reason is None else reason.replace(FUTILE_WORDS, f"{self.failed_claim_words(cfg)} certified", 1)

    def title(self, cert) -> str:
        p = cert.procedure
        return f"{cert.job}: {cert.policy.kind} / {p.level}, {self.target(cert)}"

    def cells(self, c, alpha) -> tuple[str, str, str, str]:
        """A candidate's simultaneous bound, own bound, estimate and interval, as the tables show them."""
        ci = "" if c.ci is None else f"[{c.ci[0]:.3f}, {bound_text(c.ci[1])}]"
        return bound_text(c.simultaneous_bound, alpha), bound_text(c.upper_bound, alpha), _fmt(c.estimate), ci

    def extra_fields(self, cert) -> list[Field]:
        """Columns a goal adds after the human labels (an aggregate: labels by task)."""
        return []

    def fields(self, cert) -> list[Field]:
        """The simultaneous bound (what the certificate is about) first, then the candidate's own bound at its
        level; the interval and the judge's agreement as secondary columns."""
        alpha, cands = cert.procedure.alpha, cert.candidates
        testing = any(c.e_value is not None for c in cands)
        judged = any(c.judge is not None for c in cands)
        levels = {c.level for c in cands if c.upper_bound is not None}
        # one name per quantity (docs/glossary.md): selection.json's simultaneous_bound and upper_bound
        own = self.own_word + (f" (level {next(iter(levels)):.3g})" if len(levels) == 1 else " @ level")

        def own_cell(c):
            ub = self.cells(c, alpha)[1]
            return ub + (f" @ {c.level:.3g}" if ub and len(levels) > 1 else "")

        def part(k):
            return lambda c: self.cells(c, alpha)[k]

        # "in set" repeats the status for most procedures: it goes last of the secondary columns
        return [Field("candidate", lambda c: c.candidate + (" *" if c.selected else ""), shown=Shown.TERMINAL),
                Field("candidate", lambda c: c.candidate, shown=Shown.REPORT),
                Field(objective_head(cert), lambda c: "" if c.objective is None else f"{c.objective:g}", 2),
                Field("status", lambda c: c.status), Field("in set", lambda c: "yes" if c.certified else "no", 1),
                *([Field("max e-value / threshold", e_value_cell, 3)] if testing else []),
                Field(self.joint_head, part(0)), Field(own, own_cell, 4), Field(self.estimate_head, part(2), 5),
                Field(self.interval_head, part(3), 7), Field("human", lambda c: str(c.labels_human), 1),
                *self.extra_fields(cert), *([Field("to certify / min", efficiency_cell, 6)] if testing else []),
                Field("judge", lambda c: str(c.labels_judge), shown=Shown.REPORT),
                Field("requests", lambda c: str(c.requests), shown=Shown.REPORT),
                *([Field("judge agrees (kappa)", lambda c: judge_cell(c.judge), 6)] if judged else []),
                *people_fields(cert), Field("note", note_cell, shown=Shown.REPORT)]

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
        if ev.estimate is not None:  # none: a continued claim that took no label in this run
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

    def note(self, cert) -> str | None:
        return BOUNDS_NOTE.format(conf=1 - cert.procedure.delta)

    # -- the certificate (built from the job's result) ---------------------------------------------
    def task_value(self, f) -> str:
        return "" if f.risk_on_full_table is None else f"{f.risk_on_full_table:.3f}"

    def statement(self, result) -> str:
        cfg, sel = result.cfg, result.selected_record
        if sel is None:
            return "no candidate certified"
        out = (f"R({sel.name}) <= {bound_text(sel.joint_bound, cfg.alpha)} with probability >= {1 - cfg.delta:g}, "
               f"{cfg.proc.joint_words(cfg.alpha, len(result.certified), len(result.records))} ({result.level})"
               + nominal_words(cfg) + f"; R: a candidate's mean {self.loss_words(cfg)}")
        if result.data.pilot is not None:
            p = result.data.pilot
            how = f"its claims' first selection's start, job {p.pinned_by}" if p.pinned_by else "a judge-only pilot's start"
            skipped = len(p.skipped)
            before = ("no config comes before it" if skipped == 0 else "the config before it was not tested"
                      if skipped == 1 else f"the {skipped} configs before it were not tested")
            out += f"; the sequence ran from {p.start} ({how}: {before})"
        return out

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
