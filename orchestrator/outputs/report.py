"""The human report: ``report.md`` and a self-contained ``report.html`` (plots embedded), next
to ``selection.json`` (:mod:`~certsel.orchestrator.outputs.certificate`) and ``labels.parquet``.

The report opens with what a person needs in ten seconds: what to deploy and the claim it
comes with (a summary box), what R means, then the candidates with the selected row
highlighted, each bound next to alpha and each e-value next to its threshold.
"""

from __future__ import annotations

import base64
import json
import pathlib

import jinja2
import numpy as np

from certsel.policies.kinds import Family, get_policy_kind

from .cells import (agreement_cell, efficiency_cell, headline, judge_cell, oracle_line, rank_text, tasks_cell,
                    tie_counts)
from .certificate import bound_text, certificate_of, share_text
from .plots import write_plots
from .selection_schema import Claim, Evidence, Selection
from certsel.orchestrator.results.records import JobResult

__all__ = ["certificate", "write_report"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1250px;color:#1d1d1f;
line-height:1.45;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em}
.box{border:2px solid #1f6f3f;background:#f1f8f3;border-radius:8px;padding:.8em 1.1em;margin:1em 0}
.box.none{border-color:#9a3b3b;background:#fbf1f1} .box .big{font-size:1.25em;font-weight:600}
.muted{color:#555} table{border-collapse:collapse;font-size:.88em;margin:.6em 0}
th,td{border-bottom:1px solid #ddd;padding:.28em .6em;text-align:right;white-space:nowrap} th{background:#f4f4f6}
td:first-child,th:first-child{text-align:left} tr.selected td{background:#fff3c4;font-weight:600}
tr.certified td:nth-child(4){color:#1f6f3f} .wide{overflow-x:auto} img{max-width:100%;margin:.6em 0;border:1px solid #eee}
.wide td:first-child,.wide th:first-child{position:sticky;left:0;background:#fff} .wide th:first-child{background:#f4f4f6}
.wide tr.selected td:first-child{background:#fff3c4}
"""


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
                 "the losses (r s_ref - s + 1) / (1 + r) at alpha = 1 / (1 + r). Simultaneous lower bound: at least it for "
                 "every candidate at once, with probability at least {conf:g} (at least r exactly for the certified "
                 "set; blank: no statement). Lower bound: the bound of the candidate's own test at the level "
                 "of its decision (R-Eval on a table inverts its test over r; a judge-assisted test or a live job "
                 "carries its risk bound U over as r + 1 - (1 + r) U). Lower bounds are rounded down. Recovery estimate: mean score over mean reference "
                 "score on the candidate's labelled items; recovery on table: the same on every item of the table.")


def _bounds_note(cert: Selection) -> str:
    conf = 1 - cert.procedure.delta
    claim = cert.claim
    return RECOVERY_NOTE.format(r=claim.at_least, conf=conf) if claim else BOUNDS_NOTE.format(conf=conf)


def _fmt(x, spec: str = ".3f") -> str:
    return "" if x is None else format(x, spec)


def _summary(cert: Selection) -> tuple[str, list[str]]:
    """The summary box: a headline and its supporting lines (plain text)."""
    sel, p = cert.selected, cert.procedure
    if cert.ranking is not None:
        rk = cert.ranking
        head = (f"Best model: {sel}" if sel else "No model is certified better than all others")
        if rk.topk is not None:  # a top-k ranking leads with its top set
            head = headline(cert).replace("top-", "Top ", 1)
        lines = [f"{rk.pairs_certified} of {rk.pairs} pair orders certified; all of them hold together with "
                 f"probability >= {1 - p.delta:g}.",
                 "Possible winners (no model certified better): " + ", ".join(rk.possible_winners)]
        return head, lines
    claim = cert.claim
    if sel is None:
        target = claim.words if claim else f"R <= {p.alpha:g}"
        return "Nothing certified", [f"No candidate was certified {target} at {1 - p.delta:g} "
                                     "confidence within its budget."]
    ev = cert.evidence
    if claim:
        return _recovery_summary(cert, claim, ev)
    head = (f"Deploy {sel}: R <= {bound_text(ev.simultaneous_bound, p.alpha)} at {1 - p.delta:g} "
            "confidence")
    lines = []
    if ev.upper_bound is not None:
        lines.append(f"upper bound: R <= {bound_text(ev.upper_bound, p.alpha)} (its own test, one-sided, at level "
                     f"{_fmt(ev.level, '.3g')}; a per-candidate statement, not adjusted for the selection)")
    lines.append(f"estimate {_fmt(ev.estimate)}: {ev.estimate_note}")
    return head, lines + _evidence_tail(cert, ev)


def _evidence_tail(cert: Selection, ev: Evidence) -> list[str]:
    """The summary's last lines, a risk's or a recovery's alike: the e-value and the objective."""
    lines = []
    if ev.e_value is not None:
        lines.append(f"e-value {ev.e_value:.3g} against the threshold {ev.threshold:.3g} it had to reach "
                     f"(certified after {ev.certified_at_labels} human labels, {ev.labels_human} bought)")
    if cert.selected_objective is not None and cert.objective is not None:
        lines.append(f"{cert.objective.column} = {cert.selected_objective:g} "
                     f"({cert.objective.goal}, among the {len(cert.certified_set)} certified)")
    return lines


def _recovery_summary(cert: Selection, claim: Claim, ev: Evidence) -> tuple[str, list[str]]:
    """A recovery job's summary: the same evidence, as shares of the reference's score."""
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
    return head, lines + _evidence_tail(cert, ev)


def _rows(cert: Selection) -> list[list[str]]:
    """The candidate table (testing and estimation jobs) or the model table (rankings)."""
    if cert.ranking is not None:
        rk = cert.ranking
        by = {c.candidate: c for c in cert.candidates}
        worse = {m: sum(m in b for b in rk.better.values()) for m in rk.order}
        eps, ties = rk.epsilon, tie_counts(rk)
        out = [["model", "certified rank", "certified better than", "certified worse than",
                *([f"certified tied (< {eps:g})"] if eps is not None else []), "possible winner",
                "mean loss of its labelled items", "items", "Copeland (uncertified)"]]
        for m in rk.order:
            out.append([m, rank_text(rk, m), str(len(rk.better[m])), str(worse[m]),
                        *([str(ties[m])] if eps is not None else []),
                        "yes" if m in rk.possible_winners else "",
                        _fmt(by[m].estimate), str(by[m].labels_human), f"{rk.score[m]:+d}"])
        return out
    testing = any(c.e_value is not None for c in cert.candidates)
    judged = any(c.judge is not None for c in cert.candidates)
    people = any(c.annotators is not None for c in cert.candidates)  # labels from an annotation queue
    agreed = any(c.annotators is not None and c.annotators.agreement for c in cert.candidates)
    alpha = cert.procedure.alpha
    # one level for every candidate (FST, Bonferroni) goes in the header: a column less to scroll
    levels = {c.level for c in cert.candidates if c.upper_bound is not None}
    one_level = len(levels) <= 1
    own_head = f"upper bound (level {next(iter(levels)):.3g})" if len(levels) == 1 else "upper bound"
    out = [["candidate", "objective", "status", "in set", "simultaneous bound", own_head, *([] if one_level else ["level"]),
            "estimate", *(["e-value / threshold"] if testing else []), "two-sided interval", "human",
            *(["to certify / min"] if testing else []), "judge", "requests",
            *(["judge agrees (kappa)"] if judged else []),
            *(["annotation tasks: imported / withdrawn"] if people else []),
            *(["annotators agree: alpha (kappa)"] if agreed else []), "note"]]
    recovery = cert.claim is not None
    if recovery:  # the same columns, stated as shares of the reference's score
        out[0][4:6] = ["simultaneous lower bound", own_head.replace("upper bound", "lower bound")]
        out[0][out[0].index("estimate")] = "recovery estimate"
        out[0][out[0].index("two-sided interval")] = "recovery on table"
    for c in cert.candidates:
        own = c.upper_bound
        joint, own_text, est = bound_text(c.simultaneous_bound, alpha), bound_text(own, alpha), _fmt(c.estimate)
        ci = "" if c.ci is None else f"[{c.ci[0]:.3f}, {bound_text(c.ci[1])}]"
        if recovery:
            rec = c.recovery
            joint, own_text = share_text(rec.simultaneous_lower_bound), share_text(rec.lower_bound)
            est = "" if rec.estimate is None else f"{rec.estimate:.1%}"
            ci = "" if rec.on_full_table is None else f"{rec.on_full_table:.1%}"
        row = [c.candidate, "" if c.objective is None else f"{c.objective:g}", c.status,
               "yes" if c.certified else "no", joint, own_text,
               *([] if one_level else ["" if own is None else f"{c.level:.3g}"]), est]
        if testing:
            row.append("" if c.e_value is None else f"{c.e_value:.3g} / {c.threshold:.3g}")
        row += [ci, str(c.labels_human)]
        if testing:
            row.append(efficiency_cell(c))
        row += [str(c.labels_judge), str(c.requests)]
        if judged:
            row.append(judge_cell(c.judge))
        if people:
            row.append(tasks_cell(c.annotators))
        if agreed:
            row.append(agreement_cell(c.annotators))
        row.append((c.reason or "").replace("|", "/"))
        out.append(row)
    return out


def _policy_words(cert: Selection) -> str:
    """The policy in words: its betting strategy only where bets exist (the testing policies)."""
    pol = cert.policy
    kind = get_policy_kind(pol.kind)
    if kind.family is Family.ESTIMATION:
        return pol.kind + (f" (partition: {pol.partition})" if "partition" in kind.takes else "")
    drawn = ", sampling without replacement" if pol.sampling == "without-replacement" else ""
    return f"{pol.kind} ({pol.betting} betting{drawn})"


def _pair_rows(cert: Selection) -> list[list[str]]:
    """A ranking's pairs: the certified order (if any), the anytime interval on the difference
    of the two models' mean losses over the test set, and the items the pair used."""
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
    return out


def _incidents(cert: Selection) -> list[str]:
    """Candidates that ended for a reason other than their evidence (a label source that
    failed for good, a worker lost too often): not certified, and said so."""
    return [f"{c.candidate}: not certified ({c.reason})" for c in cert.candidates
            if c.status in ("source failed", "worker lost")]


def _labels_table(cert: Selection) -> list[list[str]]:
    """Labels bought against the full budget, and with ``costs:`` the spend in the user's unit."""
    lab = cert.labels
    rows = [["labels", "spent", "full budget", "saved"]] + [
        [k, str(getattr(lab.spent, k)), str(getattr(lab.full_budget, k)), f"{getattr(lab.saved_fraction, k):.1%}"]
        for k in ("human", "judge", "requests") if getattr(lab.full_budget, k)]
    costs = cert.costs
    if costs is not None:
        u = costs.unit
        for k in ("human", "generation", "judge", "total"):
            s, f = getattr(costs.spent, k), getattr(costs.full_budget, k)
            if f:
                rows.append([f"cost: {k} ({u})", f"{s:,.6g}", f"{f:,.6g}", f"{1 - s / f:.1%}"])
    return rows


def _gpu_tables(cert: Selection) -> list[list[list[str]]]:
    """The job's own model servers (``live.serve``): GPU time used against every candidate to
    its budget, then each server's starts, waits, loads, generation and idle seconds, then
    each candidate's share; no tables for a job without servers of its own."""
    g = cert.gpu
    if g is None:
        return []

    def s(x):
        return "" if x is None else f"{x:,.1f}"

    full = g.full_budget_estimate_gpu_seconds
    summary = [["GPU time", "GPU-seconds", "GPU-hours"],
               ["used", s(g.gpu_seconds), f"{g.gpu_hours:.4g}"],
               ["of which loading", s(g.load_gpu_seconds), f"{g.load_gpu_seconds / 3600:.4g}"],
               ["of which generating", s(g.busy_gpu_seconds), f"{g.busy_gpu_seconds / 3600:.4g}"],
               ["of which idle", s(g.idle_gpu_seconds), f"{g.idle_gpu_seconds / 3600:.4g}"]]
    if full is not None and g.saved_fraction_estimate is not None:  # servers with no GPU: nothing to project
        summary.append([f"every candidate to its budget (estimate at the measured rates; "
                        f"{g.saved_fraction_estimate:.0%} saved)", s(full), f"{full / 3600:.4g}"])
    if g.cost is not None:
        c = g.cost
        summary.append([f"cost ({c.unit}, {c.gpu_hour:g} per GPU-hour)", f"{c.spent:,.4g}",
                        "" if c.full_budget_estimate is None else f"budget: {c.full_budget_estimate:,.4g}"])
    servers = [["server", "GPUs", "starts", "waiting (s)", "loading (s)", "generating (s)", "idle (s)", "requests",
                "GPU-seconds"]] + [
        [v.name, f"{v.gpus:g}", str(v.starts), s(v.wait_s), s(v.load_s), s(v.busy_s), s(v.idle_s),
         str(v.requests), s(v.gpu_s)] for v in g.servers]
    shares = [["generations for", "GPU-seconds"]] + [[k, s(v)] for k, v in g.candidates.items()] + [
        [f"the job ({k.removeprefix('job:')}, before the rounds)", s(v)] for k, v in g.shared.items()]
    return [summary, servers, shares]


def _task_tables(cert: Selection) -> list[list[list[str]]]:
    """An aggregate job's tasks (weight, items, how their losses were scaled) and each
    candidate's figures on each task; no tables for other jobs."""
    agg = cert.aggregate
    if agg is None:
        return []
    tasks = [["task", "weight", "items", "loss scale in the stacked table", "table"]] + [
        [t.name, f"{t.weight:.4g}", str(t.items), f"{t.factor:.4g}", t.data] for t in agg.tasks]
    names = [t.name for t in agg.tasks]
    recovery = any("recovery_on_full_table" in c.tasks[names[0]].model_fields_set for c in cert.candidates)
    what = "recovery on table" if recovery else "R on table"
    per = [["candidate", *[f"{n}: {what} (human labels)" for n in names]]]
    for c in cert.candidates:
        cells = []
        for n in names:
            f = c.tasks[n]
            v = f.recovery_on_full_table if recovery else f.risk_on_full_table
            cells.append(f"{'' if v is None else (f'{v:.1%}' if recovery else f'{v:.3f}')} ({f.labels_human})")
        per.append([c.candidate + (" *" if c.selected else ""), *cells])
    return [tasks, per]


def _markdown(cert: Selection, plots) -> str:
    head, lines = _summary(cert)
    p = cert.procedure
    out = [f"# certsel: {cert.job}", "", f"> **{head}**", *[f"> {x}  " for x in lines], "",
           f"**Certificate:** {cert.certificate}.", "", cert.guarantee, "",
           f"Policy {_policy_words(cert)}, delta = {p.delta:g}"
           + (f", alpha = {p.alpha:g}" if p.alpha is not None else "") + f", procedure: {p.level}.", ""]
    labels = _labels_table(cert)
    for table in (labels, *_gpu_tables(cert), _rows(cert),
                  *([_pair_rows(cert)] if cert.ranking is not None else []), *_task_tables(cert)):
        out += ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
        out += ["| " + " | ".join(r) + " |" for r in table[1:]] + [""]
        if table is labels and cert.labels.oracle is not None:
            out += [oracle_line(cert.labels.oracle), ""]
    if cert.ranking is None:
        out += [_bounds_note(cert), ""]
    incidents = _incidents(cert)
    if incidents:
        out += ["**Ended without evidence:**", *[f"- {x}" for x in incidents], ""]
    out += [f"![{q.stem}]({q.name})" for q in plots] + [""]
    return "\n".join(out)


# The HTML report: one self-contained page (plots embedded), every value escaped by jinja2.
_HTML = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string("""\
<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>
<title>{{ job }} · certsel report</title><style>{{ css | safe }}</style></head><body>
{% macro table(rows, classes=None) %}<table><tr>{% for h in rows[0] %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows[1:] %}<tr{% if classes and classes[loop.index0] %} class="{{ classes[loop.index0] }}"{% endif %}>
{%- for v in r %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>{% endmacro %}
<h1>{{ job }} <span class="muted">· certsel report</span></h1>
<div class="box{{ '' if selected else ' none' }}"><div class="big">{{ head }}</div>
{%- for x in lines %}<div>{{ x }}</div>{% endfor %}</div>
<p><b>Certificate:</b> {{ certificate }}.</p>
<p class="muted">{{ guarantee }}</p>
<p class="muted">Policy {{ policy }}, delta = {{ delta }}{% if alpha %}, alpha = {{ alpha }}{% endif %}, procedure: {{ level }}.</p>
<h2>Labels</h2>{{ table(labels) }}{% if labels_note %}<p class="muted">{{ labels_note }}</p>{% endif %}
{% if gpu %}
<h2>GPU time</h2><p class="muted">{{ gpu_words }}</p>
{{ table(gpu[0]) }}<div class="wide">{{ table(gpu[1]) }}</div>{{ table(gpu[2]) }}
{% endif %}
<h2>{{ 'Models' if pairs else 'Candidates' }}</h2>
<div class="wide">{{ table(rows, classes) }}</div>
{% if pairs %}
<h2>Pairs</h2><p class="muted">Each interval holds at every step with the pair's level; the orders shown as certified hold together with probability at least 1 - delta.</p>
<div class="wide">{{ table(pairs) }}</div>
{% else %}
<p class="muted">{{ bounds_note }}</p>
{% endif %}
{% if tasks %}
<h2>Tasks</h2><p class="muted">{{ aggregate_words }}: one test on the tasks' stacked items, each task's losses scaled so that the stacked mean is R / M.</p>
{{ table(tasks[0]) }}<div class="wide">{{ table(tasks[1]) }}</div>
{% endif %}
{% if incidents %}<h2>Ended without evidence</h2><ul>{% for x in incidents %}<li>{{ x }}</li>{% endfor %}</ul>{% endif %}
<h2>Plots</h2>
{% for name, data in images %}<img alt="{{ name }}" src="data:image/png;base64,{{ data }}">
{% endfor %}
</body></html>
""")


_GPU_WORDS = ("The job's own model servers: measured seconds times the GPUs each holds. A server's generation "
              "time is shared between the candidates in flight; the full-budget figure is a projection at this "
              "job's measured rates, not a measurement.")


def _html(cert: Selection, plots) -> str:
    head, lines = _summary(cert)
    p = cert.procedure
    ranking = cert.ranking is not None
    if ranking:
        classes = ["selected" if m == cert.selected else "" for m in cert.ranking.order]
    else:
        classes = [" ".join(x for x in ("selected" if c.selected else "", "certified" if c.certified else "")
                            if x) for c in cert.candidates]
    # embedded: the report is one file that opens anywhere (MLflow, a download, a mail)
    images = [(pathlib.Path(q).stem, base64.b64encode(pathlib.Path(q).read_bytes()).decode()) for q in plots]
    return _HTML.render(
        job=cert.job, css=_CSS, selected=cert.selected, head=head, lines=lines,
        certificate=cert.certificate, guarantee=cert.guarantee, policy=_policy_words(cert),
        delta=f"{p.delta:g}", alpha=f"{p.alpha:g}" if p.alpha is not None else None, level=p.level,
        labels=_labels_table(cert), labels_note=oracle_line(cert.labels.oracle), rows=_rows(cert), classes=classes, pairs=_pair_rows(cert) if ranking else None,
        bounds_note=_bounds_note(cert), incidents=_incidents(cert), images=images, tasks=_task_tables(cert),
        aggregate_words=None if cert.aggregate is None else cert.aggregate.words, gpu=_gpu_tables(cert), gpu_words=_GPU_WORDS)


def _write_labels(result: JobResult, path: pathlib.Path) -> pathlib.Path:
    """Every label the job bought: candidate, purchase order, item (index and id), role, loss."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = result.data.item_ids
    cols = {"candidate": [], "seq": [], "item": [], "item_id": [], "role": [], "loss": []}
    for name, log in result.labels.items():
        cols["candidate"].append(np.full(len(log), name, dtype=object))
        cols["seq"].append(np.arange(len(log)))
        cols["item"].append(log.item)
        cols["item_id"].append(ids[log.item].astype(object))
        cols["role"].append(log.role)
        cols["loss"].append(log.loss)
    table = pa.table({k: pa.array(np.concatenate(v) if v else []) for k, v in cols.items()})
    pq.write_table(table, path)
    return path


def write_report(result: JobResult, outdir) -> list[pathlib.Path]:
    """Write selection.json, report.md, report.html, labels.parquet and the plots into ``outdir``."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cert = certificate_of(result)  # checked against the published schema when it was built
    files = [outdir / "selection.json"]
    files[0].write_text(json.dumps(cert.as_json(), indent=2, allow_nan=False))
    plots = write_plots(result, cert, outdir)
    if result.labels is not None:
        files.append(_write_labels(result, outdir / "labels.parquet"))
    files.append(outdir / "report.md")
    files[-1].write_text(_markdown(cert, plots))
    files.append(outdir / "report.html")
    files[-1].write_text(_html(cert, plots))
    return files + plots
