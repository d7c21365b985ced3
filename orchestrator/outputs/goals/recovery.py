"""A selection certified as recovery >= r against a reference model: the evidence as shares of its score."""

from __future__ import annotations

from ..cells import e_value_line
from ..numbers import _round, round_down, share_text
from .base import _fmt
from .registry import register
from .risk import RiskSelection

RECOVERY_LEGEND = ("simultaneous lower bound: on E[score] / E[reference score] for every candidate at once, with "
                   "probability >= {conf:g} (>= {r:g} exactly for the certified set; blank: no statement). lower "
                   "bound: the candidate's own test's bound at the level of its decision (R-Eval on a table: "
                   "inverting its test; otherwise r + 1 - (1 + r) U from its risk bound U). recovery estimate: mean "
                   "score / mean reference score on its labelled items. to certify / min: as for risks, on its "
                   "recovery losses. Names: docs/glossary.md.")


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


@register
class RecoverySelection(RiskSelection):
    """A selection certified as recovery >= r against a reference model: the evidence as shares of its score."""

    joint_head, own_word, estimate_head, interval_head = "simultaneous lower bound", "lower bound", \
        "recovery estimate", "recovery on table"
    name = "recovery"
    asks = {"recovery": True, "ranking": False, "tasks": False}

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

    def failed_claim_words(self, cfg) -> str:
        return f"{self.claim_prefix()} <= {cfg.recovery.at_least * 100:g}% of {cfg.recovery_reference!r}"

    def note_target(self, cfg) -> str:  # the claim in the user's units, not its test's internal alpha
        return f", claim: {self.claim_words_of(cfg)}"

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


