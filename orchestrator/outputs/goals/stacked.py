"""A selection (risk or recovery) certified on a weighted aggregate of tasks, tested on their stacked items."""

from __future__ import annotations

from .base import Field, Section
from .recovery import RecoverySelection
from .registry import register
from .risk import RiskSelection


class _Stacked:
    """Mixin: a selection (risk or recovery) on the stacked items of several tasks; adds labels by task, the tasks'
    tables and the aggregate's words."""

    def extra_fields(self, cert) -> list[Field]:
        tasks = [t.name for t in cert.aggregate.tasks]
        return [Field("by task: " + " / ".join(tasks),
                      lambda c: " / ".join(str(c.tasks[t].labels_human) for t in tasks), 2)]

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
        from ..aggregate import subject

        return subject(result, loss)

    def statement(self, result) -> str:
        from ..aggregate import aggregate_words

        out = super().statement(result)
        return out if result.selected_record is None or self.states_own_words else \
            f"{out}; {aggregate_words(result)}"

    def top_fields(self, result) -> dict:
        from ..aggregate import claim

        return {**super().top_fields(result), "aggregate": claim(result)}

    def candidate_fields(self, result) -> list[dict]:
        from ..aggregate import task_rows

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


@register
class StackedRisk(_Stacked, RiskSelection):
    """An aggregate risk R = sum_t w_t R_t certified <= alpha."""

    name = "stacked risk"
    asks = {"stacked": True, "recovery": False}


@register
class StackedRecovery(_Stacked, RecoverySelection):
    """A weighted recovery over stacked tasks certified >= r."""

    name = "stacked recovery"
    asks = {"stacked": True, "recovery": True}

