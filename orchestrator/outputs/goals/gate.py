"""Procedure ``gate``: each candidate decided on its own at delta (pass, fail or undecided), on a risk or a
recovery claim."""

from __future__ import annotations

import math

from certsel.orchestrator.results.outcomes import Outcome, gate_exit_code

from ..cells import budget_cap_lines
from ..numbers import _round
from .base import Field, Shown, note_cell, people_fields
from .recovery import RecoverySelection
from .registry import register
from .risk import RiskSelection


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

    def fields(self, cert) -> list[Field]:
        alpha, level = cert.procedure.alpha, cert.procedure.delta

        def part(k):
            return lambda c: self.cells(c, alpha)[k]

        return [Field("candidate", lambda c: c.candidate), Field("outcome", lambda c: c.outcome),
                Field("labels", lambda c: str(c.labels_human)),
                Field("reused", lambda c: "" if c.reused is None else str(c.reused), 3),
                Field(f"{self.own_word} (level {level:g})", part(1)),
                Field("max e-value / threshold", lambda c: "" if c.e_value is None else
                      f"{c.e_value:.3g} / {c.threshold:.3g}"),
                Field("fail e-value", lambda c: "" if c.futility_e_value is None else f"{c.futility_e_value:.3g}", 2),
                Field(self.estimate_head, part(2), 4), Field(self.interval_head, part(3), 5),
                Field("requests", lambda c: str(c.requests), shown=Shown.REPORT), *people_fields(cert),
                Field("note", note_cell, shown=Shown.REPORT)]

    def bold(self, cert) -> list[bool]:
        return [c.outcome == "fail" for c in cert.candidates]

    def after_table(self, cert) -> list[str]:
        return [cert.gate.note]

    def evidence(self, cert) -> str | None:
        return None

    def setting_lines(self, cert) -> list[str]:
        # a gate's futility test is its fail rule, not a default to revisit; its budget can be what left it undecided
        return budget_cap_lines(cert)

    def summary(self, cert) -> tuple[str, list[str]]:
        g = cert.gate
        lines = [f"{name}: {', '.join(names)}" for name, names in (("pass", g.passed), ("fail", g.failed),
                                                                   ("undecided", g.undecided)) if names]
        return self.headline(cert), lines + [g.note]

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
                f"over them.{self.series_words(cfg)}")

    @staticmethod
    def series_words(cfg) -> str:
        """What a release series adds to the gate's statement ("" outside a series)."""
        s = cfg.series
        if s is None or s.releases is None:
            return ""
        which = ", ".join(str(k) for k in s.releases)
        return (f" Series {s.name!r}: release {which} of the series, gated at delta_k = delta / (k (k + 1)) with the "
                f"series' delta = {s.delta:g} (the smallest of this job's releases' levels); the chance of any false "
                f"pass or false fail over every release ever gated in the series is at most {s.delta:g}.")

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
            "exit_code": gate_exit_code(outcomes.values()), "note": self.gate_note(cfg),
            **({} if cfg.series is None else {"series": {"name": cfg.series.name, "delta": cfg.series.delta,
                                                         "releases": cfg.series.releases}})}}

    def candidate_note(self, result, row) -> list[str]:
        return [f"{row.outcome}: {self.gate_note(result.cfg)}"]


@register
class GateRisk(_Gate, RiskSelection):
    """Each candidate gated on R <= alpha."""

    name = "gate"
    asks = {"gates": True, "recovery": False, "regression": False}


@register
class GateRecovery(_Gate, RecoverySelection):
    """Each candidate gated on recovery >= r against a reference."""

    name = "recovery gate"
    asks = {"gates": True, "recovery": True}

    def gate_claims(self, cfg) -> tuple[str, str]:
        return self.claim_words_of(cfg), self.failed_claim_words(cfg)
