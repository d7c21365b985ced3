"""The human report: ``report.md`` and a self-contained ``report.html`` (plots embedded), next to ``selection.json``
(:mod:`~certsel.orchestrator.outputs.certificate`) and ``labels.parquet``.

It opens with what a person needs in ten seconds: what to deploy and its claim (a summary box), what R means, then the
candidates with the selected row highlighted, each bound next to alpha and each e-value next to its threshold.
"""

from __future__ import annotations

import base64
import json
import pathlib
from dataclasses import dataclass

import jinja2
import numpy as np

from certsel.policies.kinds import Family, get_policy_kind

from .cells import ledger_lines, oracle_line
from .certificate import certificate_of
from .goals import goal_of
from .plots import plot_inputs, write_plots
from .selection_schema import Certificate
from certsel.orchestrator.results.records import JobResult

__all__ = ["write_report"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1250px;color:#1d1d1f;
line-height:1.45;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em}
.box{border:2px solid #1f6f3f;background:#f1f8f3;border-radius:8px;padding:.8em 1.1em;margin:1em 0}
.box.none{border-color:#9a3b3b;background:#fbf1f1} .box .big{font-size:1.25em;font-weight:600}
.muted{color:#555} table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
th,td{border-bottom:1px solid #ddd;padding:.28em .42em;text-align:right;white-space:nowrap} th{background:#f4f4f6}
th{white-space:normal;vertical-align:bottom;min-width:3.5em;max-width:8em}
td:first-child,th:first-child{text-align:left}
tr.note td{white-space:normal;text-align:left;color:#666;font-size:.85em;border-bottom:1px solid #ddd;padding-top:0} tr.selected td{background:#fff3c4;font-weight:600}
tr.certified td:nth-child(4){color:#1f6f3f} .wide{overflow-x:auto} img{max-width:100%;margin:.6em 0;border:1px solid #eee}
.wide td:first-child,.wide th:first-child{position:sticky;left:0;background:#fff} .wide th:first-child{background:#f4f4f6}
.wide tr.selected td:first-child{background:#fff3c4}
details{margin:.3em 0} summary{cursor:pointer} table.items th{cursor:pointer} table.items th:hover{background:#e6e6ea}
"""
# a click on a per-item table's heading sorts its rows by that column (numbers as numbers; again: the other way)
_SORT_JS = """
document.querySelectorAll('table.items').forEach(function(t){t.querySelectorAll('th').forEach(function(h,i){
h.addEventListener('click',function(){var rows=Array.from(t.querySelectorAll('tr')).slice(1);
var up=h.dataset.up!=='1';h.dataset.up=up?'1':'0';rows.sort(function(a,b){var x=a.children[i].textContent,
y=b.children[i].textContent,nx=parseFloat(x),ny=parseFloat(y);var c=(isNaN(nx)||isNaN(ny))?x.localeCompare(y):nx-ny;
return up?c:-c;});rows.forEach(function(r){t.appendChild(r);});});});});
"""
ITEM_ROWS = 5000  # per candidate in the report (labels.parquet has every one): a page a browser still opens at once


def _policy_words(cert: Certificate) -> str:
    """The policy in words: its betting strategy only where bets exist (the testing policies)."""
    pol = cert.policy
    kind = get_policy_kind(pol.kind)
    if kind.family is Family.ESTIMATION:
        return pol.kind + (f" (partition: {pol.partition})" if "partition" in kind.takes else "")
    drawn = ", sampling without replacement" if pol.sampling == "without-replacement" else ""
    return f"{pol.kind} ({pol.betting} betting{drawn})"


def _labels_table(cert: Certificate) -> list[list[str]]:
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


def _gpu_tables(cert: Certificate) -> list[list[list[str]]]:
    """The GPU time of the job's own model servers (``live.serve``): in all against the full budget, per server and per
    candidate; none for a job without servers of its own."""
    g = cert.gpu
    if g is None or not g.server_starts:  # none, or none started (a cached rerun): nothing measured
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
    if not any(v.gpus for v in g.servers):  # servers that hold no GPU (vLLM's CPU build): their seconds alone
        return [[row[:1] + row[2:-1] for row in servers]]
    return [summary, servers, shares]


def _gpu_heading(cert: Certificate) -> tuple[str, str] | None:
    """The report's heading and words over :func:`_gpu_tables` (None: a job without servers of its own)."""
    if cert.gpu is None:
        return None
    if not cert.gpu.server_starts:
        return "Model servers", "None started: every request was answered from the response cache."
    if not any(v.gpus for v in cert.gpu.servers):
        return "Model servers", "The job's own model servers hold no GPU: the seconds each was up, by what it did."
    return "GPU time", _GPU_WORDS


def _label_notes(cert: Certificate, goal) -> list[str]:
    """The lines under the labels table, as the job's last lines say them: the oracle's estimate, and what each stop
    or default spared or risked (``setting_lines``: the budget stop, futility, a pilot start that certified nothing)."""
    return (([oracle_line(cert.labels.oracle)] if cert.labels.oracle is not None else []) + goal.setting_lines(cert)
            + ledger_lines(cert))


def _target_words(cert: Certificate) -> str:
    """The job's target in the user's units: a recovery's or a regression's claim (its test's alpha is internal:
    ``selection.json`` keeps it as ``claim.risk_alpha``), else alpha."""
    if cert.claim is not None:
        return f", claim: {cert.claim.words}"
    return "" if cert.procedure.alpha is None else f", alpha = {cert.procedure.alpha:g}"


def _markdown(cert: Certificate, plots) -> str:
    goal = goal_of(cert)
    head, lines = goal.summary(cert)
    p = cert.procedure
    out = [f"# certsel: {cert.job}", "", f"> **{head}**", *[f"> {x}  " for x in lines], "",
           f"**Certificate:** {cert.certificate}.", "", cert.guarantee, "",
           f"Policy {_policy_words(cert)}, delta = {p.delta:g}" + _target_words(cert) + f", procedure: {p.level}.", ""]
    labels = _labels_table(cert)
    sections = [t for part in goal.sections(cert) for t in part.tables]
    for table in (labels, *_gpu_tables(cert), goal.rows(cert), *sections):
        out += ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
        out += ["| " + " | ".join(r) + " |" for r in table[1:]] + [""]
        if table is labels:
            out += [x for note in _label_notes(cert, goal) for x in (note, "")]
    note = goal.note(cert)
    if note is not None:
        out += [note, ""]
    incidents = goal.failures(cert)  # ended for a reason other than their evidence (source failed, worker lost)
    if incidents:
        out += ["**Ended without evidence:**", *[f"- {x}" for x in incidents], ""]
    out += [f"![{q.stem}]({q.name})" for q in plots] + [""]
    return "\n".join(out)


# The HTML report: one self-contained page (plots embedded), every value escaped by jinja2.
_HTML = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string("""\
<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>
<title>{{ job }} · certsel report</title><style>{{ css | safe }}</style></head><body>
{#- a table whose last column is "note" shows each note on a row of its own under its candidate's:
    free text would widen the table past a laptop's screen #}
{% macro table(rows, classes=None) %}{% set noted = rows[0][-1] == 'note' %}{% set n = rows[0]|length - (1 if noted else 0) %}
<table><tr>{% for h in rows[0][:n] %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows[1:] %}<tr{% if classes and classes[loop.index0] %} class="{{ classes[loop.index0] }}"{% endif %}>
{%- for v in r[:n] %}<td>{{ v }}</td>{% endfor %}</tr>
{%- if noted and r[-1] %}<tr class="note"><td colspan="{{ n }}">{{ r[-1] }}</td></tr>{% endif %}{% endfor %}</table>{% endmacro %}
<h1>{{ job }} <span class="muted">· certsel report</span></h1>
<div class="box{{ '' if selected else ' none' }}"><div class="big">{{ head }}</div>
{%- for x in lines %}<div>{{ x }}</div>{% endfor %}</div>
<p><b>Certificate:</b> {{ certificate }}.</p>
<p class="muted">{{ guarantee }}</p>
<p class="muted">Policy {{ policy }}, delta = {{ delta }}{{ target }}, procedure: {{ level }}.</p>
<h2>Labels</h2>{{ table(labels) }}{% for x in label_notes %}<p class="muted">{{ x }}</p>{% endfor %}
{% if gpu_heading %}
<h2>{{ gpu_heading[0] }}</h2><p class="muted">{{ gpu_heading[1] }}</p>
{% for t in gpu %}<div class="wide">{{ table(t) }}</div>{% endfor %}
{% endif %}
<h2>{{ table_heading }}</h2>
<div class="wide">{{ table(rows, classes) }}</div>
{% if note %}<p class="muted">{{ note }}</p>{% endif %}
{% for s in sections %}
<h2>{{ s.heading }}</h2><p class="muted">{{ s.note }}</p>
{% for t in s.tables %}<div class="wide">{{ table(t) }}</div>{% endfor %}
{% endfor %}
{% if incidents %}<h2>Ended without evidence</h2><ul>{% for x in incidents %}<li>{{ x }}</li>{% endfor %}</ul>{% endif %}
<h2>Plots</h2>
{% for name, data in images %}<img alt="{{ name }}" src="data:image/png;base64,{{ data }}">
{% endfor %}
{% if items %}
<h2>Items</h2><p class="muted">Every label each candidate bought, in the order it bought them (a click on a heading
sorts by it); labels.parquet beside this report has the same rows.</p>
{% for it in items %}<details><summary>{{ it.name }}: {{ it.words }}</summary>
<div class="wide"><table class="items"><tr>{% for h in it.head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in it.rows %}<tr>{% for v in r %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table></div></details>
{% endfor %}<script>{{ sort_js | safe }}</script>
{% endif %}
</body></html>
""")


@dataclass(frozen=True)
class ItemTable:
    """One candidate's labels for the report's per-item view."""

    name: str
    words: str  # what the table holds, in words
    head: tuple
    rows: list


def item_tables(result: JobResult) -> list[ItemTable]:
    """Each candidate's labels in purchase order: the order bought, the item's id, the label's role and loss, and for a
    human label the judge's loss on the item where the table has one (the first :data:`ITEM_ROWS`, said so)."""
    if result.labels is None:
        return []
    ids, table = result.data.item_ids, result.data.table
    judge = None if table is None else table.judge
    rank = {n: k for k, n in enumerate(result.data.names)}
    out = []
    for name in sorted(result.labels, key=lambda n: (rank.get(n, len(rank)), n)):
        log = result.labels[name]
        if not len(log):  # never labelled (a sequence stopped before it): nothing to show
            continue
        k = rank.get(name)
        shown = min(len(log), ITEM_ROWS)
        rows = []
        for seq in range(shown):
            item = int(log.item[seq])
            with_judge = judge is not None and k is not None and log.role[seq] == "human"
            rows.append([str(seq + 1), str(ids[item]), str(log.role[seq]), f"{log.loss[seq]:.4g}",
                         *([f"{judge[k, item]:.4g}" if with_judge else ""] if judge is not None else [])])
        humans = int(np.sum(log.role == "human"))
        words = (f"{len(log):,} labels ({humans:,} human)"
                 + (f"; the first {shown:,} shown, labels.parquet has all" if shown < len(log) else ""))
        head = ("order bought", "item", "role", "loss", *(("judge's loss on it",) if judge is not None else ()))
        out.append(ItemTable(name, words, head, rows))
    return out


_GPU_WORDS = ("The job's own model servers: measured seconds times the GPUs each holds. A server's generation "
              "time is shared between the candidates in flight; the full-budget figure is a projection at this "
              "job's measured rates, not a measurement.")


def _html(cert: Certificate, plots, items=()) -> str:
    goal = goal_of(cert)
    head, lines = goal.summary(cert)
    p = cert.procedure
    # embedded: the report is one file that opens anywhere (MLflow, a download, a mail)
    images = [(pathlib.Path(q).stem, base64.b64encode(pathlib.Path(q).read_bytes()).decode()) for q in plots]
    return _HTML.render(
        job=cert.job, css=_CSS, selected=cert.selected, head=head, lines=lines,
        certificate=cert.certificate, guarantee=cert.guarantee, policy=_policy_words(cert),
        delta=f"{p.delta:g}", target=_target_words(cert), level=p.level,
        labels=_labels_table(cert), label_notes=_label_notes(cert, goal), table_heading=goal.table_heading,
        rows=goal.rows(cert), classes=goal.classes(cert), note=goal.note(cert),
        sections=goal.sections(cert), incidents=goal.failures(cert), images=images, gpu=_gpu_tables(cert),
        gpu_heading=_gpu_heading(cert), items=list(items), sort_js=_SORT_JS)


def _write_labels(result: JobResult, path: pathlib.Path) -> pathlib.Path:
    """Every label the job bought: candidate, purchase order, item (index and id), role, loss."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = result.data.item_ids
    cols = {"candidate": [], "seq": [], "item": [], "item_id": [], "role": [], "loss": []}
    rank = {n: k for k, n in enumerate(result.data.names)}
    # in the job's candidate order, whichever host sent its labels first (the same file in-process and on Ray)
    for name in sorted(result.labels, key=lambda n: (rank.get(n, len(rank)), n)):
        log = result.labels[name]
        cols["candidate"].append(np.full(len(log), name, dtype=object))
        cols["seq"].append(np.arange(len(log)))
        cols["item"].append(log.item)
        cols["item_id"].append(ids[log.item].astype(object))
        cols["role"].append(log.role)
        cols["loss"].append(log.loss)
    table = pa.table({k: pa.array(np.concatenate(v) if v else []) for k, v in cols.items()})
    pq.write_table(table, path)
    return path


def write_report(result: JobResult, outdir, draw=write_plots) -> list[pathlib.Path]:
    """Write selection.json, report.md, report.html, labels.parquet and the plots into ``outdir``; ``draw`` draws the
    plots (:func:`~.plots.write_plots`, or the output process's)."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cert = certificate_of(result)  # checked against the published schema when it was built
    files = [outdir / "selection.json"]
    files[0].write_text(json.dumps(cert.as_json(), indent=2, allow_nan=False))
    plots = draw(plot_inputs(result, cert), outdir)
    if result.labels is not None:
        files.append(_write_labels(result, outdir / "labels.parquet"))
    files.append(outdir / "report.md")
    files[-1].write_text(_markdown(cert, plots))
    files.append(outdir / "report.html")
    files[-1].write_text(_html(cert, plots, item_tables(result)))
    return files + plots
