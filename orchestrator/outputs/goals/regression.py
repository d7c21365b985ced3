"""Candidates certified against a baseline model on the same items: score >= the baseline's - margin
(non-inferiority) or >= the baseline's + margin (superiority), the evidence as score differences."""

from __future__ import annotations

import decimal

from certsel.policies.regression import Regression

from ..numbers import _round, round_down
from .base import Field, _fmt
from .gate import _Gate
from .registry import register
from .risk import RiskSelection


def diff_text(x, digits: int = 3) -> str:
    """A lower bound on a score difference, signed, rounded *down* to ``digits`` decimals; "": none."""
    if x is None:
        return ""
    with decimal.localcontext() as ctx:
        ctx.rounding = decimal.ROUND_FLOOR
        q = decimal.Decimal(repr(float(x))).quantize(decimal.Decimal(1).scaleb(-digits))
    return f"{q:+f}"


REGRESSION_NOTE = ("The claim compares each candidate with the baseline {b!r} on the same items: d = E[score] - "
                   "E[baseline's score]. The job tests the paired losses u = (l - l_base + 1) / 2 at alpha = (1 + m) / 2, "
                   "so a bound U on E[u] is the bound d >= 1 - 2 U. Lower bound: the candidate's own test's, at the level "
                   "of its decision; simultaneous: for every candidate at once at {conf:g}. Lower bounds are rounded "
                   "down. Estimate: the mean paired difference on its labelled items; on table: over every item.")


def regression_figures(result) -> list[dict]:
    """Every candidate's difference figures, as the certificate states them (lower bounds rounded down)."""
    paired = result.data.paired
    on_table = None if paired is None else paired.on_table
    out = []
    for x in result.records:
        bought, reused = x.baseline or (0, 0)
        out.append({"baseline": result.cfg.regression.baseline,
                    "estimate": _round(Regression.difference_bound(x.estimate)) if x.t else None,
                    "lower_bound": round_down(Regression.difference_bound(x.upper_bound)) if x.t else None,
                    "simultaneous_lower_bound": round_down(Regression.difference_bound(x.joint_bound)),
                    "on_full_table": None if on_table is None else _round(on_table[x.index]),
                    "labels": int(x.t), "baseline_bought": int(bought), "baseline_reused": int(reused)})
    return out


@register
class RegressionSelection(RiskSelection):
    """Candidates certified against a baseline: the evidence as score differences d = E[s] - E[s_base]."""

    joint_head, own_word, estimate_head, interval_head = "simultaneous d >=", "d >=", "d estimate", "d on table"
    name = "regression"
    asks = {"regression": True, "ranking": False, "tasks": False}
    states_own_words = True
    on_table_word = "d on table"

    def target(self, cert) -> str:
        return cert.claim.words

    def claim_words(self, cert) -> str:
        return cert.claim.words

    def cells(self, c, alpha) -> tuple[str, str, str, str]:
        reg = c.regression
        return (diff_text(reg.simultaneous_lower_bound), diff_text(reg.lower_bound), _fmt(reg.estimate, "+.3f"),
                _fmt(reg.on_full_table, "+.3f"))

    def after_table(self, cert) -> list[str]:
        return [self.note(cert)]

    def evidence(self, cert) -> str | None:
        ev = cert.evidence
        if ev is None or ev.regression is None:
            return None
        reg = ev.regression
        return "\n".join(["evidence:", f"  lower bound: d >= {diff_text(reg.lower_bound)} against {reg.baseline!r} "
                                        f"(its own test, one-sided, at level {ev.level:.3g})"])

    def deploy(self, cert) -> tuple[str, list[str]]:
        reg = cert.evidence.regression
        return (f"Deploy {cert.selected}: score >= {reg.baseline!r} {diff_text(reg.simultaneous_lower_bound)} at "
                f"{1 - cert.procedure.delta:g} confidence", [])

    def note(self, cert) -> str | None:
        return REGRESSION_NOTE.format(b=cert.claim.baseline, conf=1 - cert.procedure.delta)

    def failed_claim_words(self, cfg) -> str:
        return cfg.regression.claim.opposite_words(cfg.regression.baseline)

    def note_target(self, cfg) -> str:  # the claim in the user's units, not its test's internal alpha
        return f", claim: {self.claim_words_of(cfg)}"

    def claim_words_of(self, cfg) -> str:
        return cfg.regression.claim.words(cfg.regression.baseline)

    def statement(self, result) -> str:
        cfg, sel = result.cfg, result.selected_record
        if sel is None:
            return "no candidate certified"
        bound = round_down(Regression.difference_bound(sel.joint_bound))
        return (f"score({sel.name}) - score({cfg.regression.baseline!r}) >= {diff_text(bound)}"
                f" with probability >= {1 - cfg.delta:g}, simultaneously for the {len(result.certified)} certified of "
                f"{len(result.records)} candidates ({self.claim_words_of(cfg)} for each; {result.level})")

    def loss_words(self, cfg) -> str:
        reg = cfg.regression
        return (f"paired loss (l - l_base + 1) / 2 against the baseline {reg.baseline!r} on the same item (R <= "
                f"{cfg.alpha:.6g} exactly when {self.claim_words_of(cfg)})")

    def top_fields(self, result) -> dict:
        cfg, reg = result.cfg, result.cfg.regression
        return {"claim": {"kind": "regression", "baseline": reg.baseline, "margin": reg.margin,
                          "superiority": reg.superiority, "words": self.claim_words_of(cfg), "risk_alpha": cfg.alpha,
                          "bound_note": "lower bounds on d = E[s] - E[s_base]: 1 - 2 U from the paired losses' upper "
                                        "bound U at the same level"}}

    def candidate_fields(self, result) -> list[dict]:
        return [{"regression": x} for x in regression_figures(result)]

    def evidence_fields(self, result, index: int) -> dict:
        return {"regression": regression_figures(result)[index]}

    def candidate_metrics(self, result, row) -> dict:
        reg = row.regression.as_json()
        return {f"regression_{k}": reg[k] for k in ("lower_bound", "simultaneous_lower_bound", "estimate",
                                                    "on_full_table", "baseline_bought", "baseline_reused")
                if reg.get(k) is not None}

    def candidate_note(self, result, row) -> list[str]:
        reg = row.regression
        bits = []
        if reg.lower_bound is not None:
            bits.append(f"d >= {diff_text(reg.lower_bound)} against {reg.baseline!r} (its own test, one-sided, at "
                        f"level {row.level:.3g})")
        if reg.baseline_bought or reg.baseline_reused:
            bits.append(f"baseline labels: {reg.baseline_bought} bought, {reg.baseline_reused} reused")
        return bits


@register
class GateRegression(_Gate, RegressionSelection):
    """Each candidate gated against its baseline: pass, fail or undecided."""

    name = "regression gate"
    asks = {"gates": True, "regression": True}

    def fields(self, cert) -> list[Field]:
        """The gate's columns, with the baseline's labels (bought now, reused from the store) after the candidate's."""
        out = super().fields(cert)
        at = next(i for i, f in enumerate(out) if f.head == "reused") + 1
        baseline = Field("baseline bought / reused",
                         lambda c: f"{c.regression.baseline_bought} / {c.regression.baseline_reused}", 3)
        return [*out[:at], baseline, *out[at:]]

    def gate_claims(self, cfg) -> tuple[str, str]:
        reg = cfg.regression
        return reg.claim.words(reg.baseline), self.failed_claim_words(cfg)
