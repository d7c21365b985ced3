"""A multi-task job's outputs: the combined certificate (``selection.json`` with ``kind: multi-task``), its report
and its MLflow run, under which every task's run is nested; each task's own outputs are in ``TASK/``.

A row is a candidate with, per task, its e-value, bound (at the level of the task's decision) and labels; the
combined e-value (the smallest) against the job's threshold decides.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import pathlib

import jinja2

from certsel._version import __version__

from certsel.orchestrator.results.task_combination import MultiTaskResult, total_labels

from .certificate import certificate_of, recovery_claim_words
from .goals import MultiTaskGoal
from .numbers import _round
from .tasks_schema import TasksCertificate

KIND = "multi-task"


def target_words(cfg) -> str:
    """A task's claim in words: "R <= 0.2" or "recovery >= 95% of 'fp16'"."""
    return recovery_claim_words(cfg) if cfg.recovery is not None else f"R <= {cfg.alpha:g}"


def tasks_certificate(res: MultiTaskResult) -> TasksCertificate:
    """The combined certificate, built once and kept on the result so every output shows the same one."""
    if res.certificate is None:
        res.certificate = TasksCertificate.model_validate(_fields(res))
    return res.certificate


def _fields(res: MultiTaskResult) -> dict:
    """The combined certificate's fields, as :class:`TasksCertificate` takes them."""
    cfg, K = res.cfg, len(res.names)
    proc = cfg.proc
    per_task = []
    for o in res.tasks:
        cert = certificate_of(o.result)
        per_task.append((o, {row.candidate: row for row in cert.candidates}, cert))
    goals = "; ".join(f"{o.name}: {target_words(o.cfg)}" for o in res.tasks)
    if res.selected is None:
        statement = f"no candidate certified on every task ({goals})"
    else:
        statement = (f"{res.selected} meets the target of every task ({goals}) with probability >= {1 - cfg.delta:g}, "
                     f"simultaneously for the {len(res.certified)} certified of {K} candidates "
                     f"({proc.level(cfg.delta, K)}; intersection-union over the {len(res.tasks)} tasks)")
    rows = []
    for k, name in enumerate(res.names):
        level = float(res.levels[k])
        row = {"candidate": name, "objective": None if res.objective is None else _round(res.objective[k]),
               "certified": name in res.certified, "selected": name == res.selected,
               "e_value": _round(math.exp(min(res.combined[k], 700)), 4), "log_e_value": _round(res.combined[k]),
               "threshold": _round(1.0 / level, 4), "level": _round(level, 8), "tasks": (on_tasks := {})}
        for o, by, _ in per_task:
            r = by[name]
            on_tasks[o.name] = {
                "status": r.status, "e_value": r.e_value, "log_e_value": r.log_e_value,
                "upper_bound": r.upper_bound, "recovery": None if r.recovery is None else r.recovery.as_json(),
                "level": r.level, "estimate": r.estimate, "labels_human": r.labels_human,
                "labels_judge": r.labels_judge, "risk_on_full_table": r.risk_on_full_table}
        rows.append(row)
    return {
        "kind": KIND, "certsel_version": __version__, "job": cfg.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "selected": res.selected, "certificate": statement,
        "guarantee": ("A candidate is certified when its evidence on every task reaches the job's threshold: its "
                      "combined e-value is the smallest of its tasks' e-values, each an e-process for its own task's "
                      "null, so it is at most the e-value of a task whose target the candidate misses and the "
                      "procedure's family-wise level holds with no correction across tasks (an intersection-union "
                      "test). Each task's statement is the one in its own certificate."),
        "procedure": {"name": cfg.procedure, "delta": cfg.delta, "level": proc.level(cfg.delta, K), "candidates": K},
        "policy": {"kind": cfg.policy.kind, "betting": cfg.policy.strategy.describe()},
        "objective": None if cfg.objective is None else {**cfg.objective.model_dump(),
                                                          "combined": "the mean over tasks"},
        "certified_set": list(res.certified),
        "tasks": [{"name": o.name, "target": target_words(o.cfg), "alpha": o.cfg.alpha,
                   "data": str(o.cfg.data.path), "items": o.result.data.n_items, "budget_n": o.cfg.budget.n,
                   "certified_on_its_own": list(o.result.certified), "labels": o.result.spent,
                   "job_id": o.result.job_id, "mlflow_run": o.run_id,
                   "output": None if o.result.output_dir is None else str(o.result.output_dir)}
                  for o, _, _ in per_task],
        "labels": total_labels(res),
        "candidates": rows,
    }


_HTML = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html><head><meta charset="utf-8"><title>certsel: {{ cert.job }}</title>
<style>body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:1400px} table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right} td:first-child,th:first-child{text-align:left}
th{background:#f4f4f6} .box{background:#f3f8f4;border-left:4px solid #1f6f3f;padding:.6em 1em} .muted{color:#666}
tr.selected td{background:#fff3c4} .wide{overflow-x:auto}</style></head><body>
<h1>certsel: {{ cert.job }} <span class="muted">({{ cert.tasks|length }} tasks)</span></h1>
<div class="box"><b>{{ headline }}</b><br>{{ cert.certificate }}.</div>
<p class="muted">{{ cert.guarantee }}</p>
<h2>Tasks</h2><table><tr><th>task</th><th>target</th><th>items</th><th>certified on its own</th><th>human labels</th>
<th>its report</th></tr>{% for t in cert.tasks %}<tr><td>{{ t.name }}</td><td>{{ t.target }}</td><td>{{ t.items }}</td>
<td>{{ t.certified_on_its_own|length }}</td><td>{{ t.labels.human }}</td><td>{% if t.output %}<a href="{{ t.output }}/report.html">
{{ t.output }}/report.html</a>{% endif %}</td></tr>{% endfor %}</table>
<h2>Candidates</h2><div class="wide"><table><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r, c in rows %}<tr{% if c.selected %} class="selected"{% endif %}>{% for x in r %}<td>{{ x }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
<p class="muted">certsel {{ cert.certsel_version }}, {{ cert.created }}. Labels over all tasks: {{ cert.labels.spent.human }}
human of {{ cert.labels.full_budget.human }}.</p></body></html>
""")


def html(cert: TasksCertificate) -> str:
    head, rows = MultiTaskGoal.task_table(cert)
    headline = f"Deploy {cert.selected}" if cert.selected else "Nothing certified on every task"
    return _HTML.render(cert=cert, head=head, rows=list(zip(rows, cert.candidates, strict=True)), headline=headline)


def write_tasks_report(res: MultiTaskResult, folder) -> list[pathlib.Path]:
    """selection.json, report.md and report.html of the combined certificate in ``folder``."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cert = tasks_certificate(res)
    files = [folder / "selection.json", folder / "report.md", folder / "report.html"]
    files[0].write_text(json.dumps(cert.as_json(), indent=2, allow_nan=False))
    files[1].write_text(MultiTaskGoal().markdown(cert) + "\n")
    files[2].write_text(html(cert))
    return files


class TasksTracker:
    """The multi-task job's MLflow run: every task's job run is nested under it."""

    def __init__(self, cfg):
        from .mlflow_store import NOTE, client_for, experiment_id

        self.client, self.uri = client_for(cfg.tracking.uri)
        self.experiment_id = experiment_id(self.client, self.uri, cfg.tracking.experiment)
        tags = {"certsel.version": __version__, "certsel.kind": "job", "certsel.tasks": str(len(cfg.tasks)),
                NOTE: f"certsel multi-task job **{cfg.name}** ({len(cfg.tasks)} tasks). Running."}
        run = self.client.create_run(self.experiment_id, run_name=cfg.name, tags=tags)
        self.run_id = run.info.run_id
        self.client.log_param(self.run_id, "tasks", ", ".join(t.name for t in cfg.tasks))
        self.client.log_param(self.run_id, "procedure", cfg.procedure)
        self.client.log_param(self.run_id, "delta", cfg.delta)

    @property
    def where(self) -> dict:
        return {"uri": self.uri, "experiment_id": self.experiment_id, "run_id": self.run_id}

    def finish(self, res: MultiTaskResult) -> None:
        import tempfile

        from mlflow.entities import Metric, RunTag

        from .mlflow_store import NOTE

        cert = tasks_certificate(res)
        now = int(_dt.datetime.now().timestamp() * 1000)
        metrics = {"n_certified": len(res.certified), **{f"labels_{k}": v for k, v in cert.labels.spent}}
        for t in cert.tasks:
            metrics[f"{t.name}.n_certified_on_its_own"] = len(t.certified_on_its_own)
            metrics[f"{t.name}.labels_human"] = t.labels.human
        note = f"**Selected: {res.selected or 'none'}.** {cert.certificate}.\n\n{cert.guarantee}"
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                              tags=[RunTag("certsel.selected", str(res.selected)), RunTag(NOTE, note)])
        with tempfile.TemporaryDirectory() as tmp:
            for path in (res.files or write_tasks_report(res, tmp)):
                self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self, status: str = "FAILED") -> None:
        try:
            if self.client.get_run(self.run_id).info.status == "RUNNING":
                self.client.set_terminated(self.run_id, status)
        except Exception:  # the store itself may be what failed
            pass
