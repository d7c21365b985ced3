"""A multi-task job: each task a job of its own, a candidate certified on every task."""

from __future__ import annotations

from ..cells import objective_head, selected_headline
from ..numbers import bound_text, share_text
from .base import Column, Goal
from .registry import register


@register
class MultiTaskGoal(Goal):
    """A multi-task job (each task a job of its own; a candidate certified on every task): its evidence per task."""

    name = "multi-task"
    asks = {"tasks": True, "ranking": False, "recovery": False, "stacked": False, "gates": False}
    beside_report = "selection.json beside it; each task's own report is listed above"
    runs_note = "; the tasks' runs are nested under it"

    def headline(self, cert) -> str:
        return selected_headline(cert)  # a multi-task certificate has no ranking

    def table(self, cert):
        head, rows = self.task_table(cert)
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
    def task_table(cert) -> tuple[list[str], list[list[str]]]:
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
        head, rows = self.task_table(cert)
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
