"""The certificate (``selection.json``) and the human report (Markdown + HTML + plots)."""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import pathlib

import numpy as np

from certsel import __version__
from certsel.policies import select

from .procedures import get_procedure
from .result import JobResult


def _round(x, nd=6):
    if x is None:
        return None
    x = float(x)
    return round(x, nd) if math.isfinite(x) else None  # selection.json stays strict JSON


def _log_level(result: JobResult) -> float:
    """The strictest e-value threshold of the job's procedure (before any certification)."""
    K = len(result.records)
    return float(np.max(get_procedure(result.cfg.procedure).log_thresholds(result.cfg.delta, np.zeros(K, dtype=bool))))


def _guarantee(cfg, n_items: int) -> str | None:
    """What R is and why the estimation policies' certificate holds (None for the testing
    policies, whose certificate is the e-value against 1/delta)."""
    if cfg.policy.kind not in ("seq", "cer-eval"):
        return None
    what = (f"R is a candidate's mean loss over the {n_items} items of the test set. Its intervals and "
            "decisions are ")
    if cfg.policy.radius == "paper":
        return what + ("the Cer-Eval paper's closed-form radii (radius: paper), per group with a union bound "
                       "over groups: exact for Seq and for a partition fixed before labelling, not for a partition "
                       "fitted to the labels (the 1-NN partition of Algorithm 2).")
    groups = {"seq": "one group", "cer-eval": f"groups from {cfg.policy.partition} refitted from past labels"}
    return what + (f"one betting confidence sequence on stratified draws without replacement ({groups[cfg.policy.kind]}): "
                   "anytime-valid for any partition, refit schedule, batch order and stopping rule, with no split "
                   "of delta over groups or refits.")


def certificate(result: JobResult) -> dict:
    """The machine-readable certificate: what was chosen, on what evidence, at what cost."""
    cfg = result.cfg
    K = len(result.records)
    sel = result.selected_record
    in_set = set(result.certified)
    proc = get_procedure(cfg.procedure)
    pairwise = proc.ranking
    if sel is None:
        statement = "no candidate certified"
    elif pairwise:
        statement = (f"{sel.name} has a lower risk than each of the other {K - 1} models; every certified order "
                     f"holds simultaneously with probability >= {1 - cfg.delta:g}")
    else:
        statement = (f"R({sel.name}) <= {cfg.alpha:g} with probability >= {1 - cfg.delta:g}, simultaneously for "
                     f"the {len(in_set)} certified of {K} candidates ({result.level})")
    ci_delta = float(proc.candidate_deltas(cfg.delta, K).min())
    guarantee = _guarantee(cfg, result.data.n_items)

    def cand(r):
        row = {
            "candidate": r.name, "objective": r.objective, "status": r.status, "reason": r.reason,
            "certified": r.name in in_set, "selected": r.name == result.selected,
            "labels_human": r.n_human, "labels_judge": r.n_judge, "requests": r.requests,
            "estimate": _round(r.estimate), "upper_bound": _round(r.upper_bound),
            "ci": None if r.ci is None else [_round(v) for v in r.ci],
            "certified_at_labels": r.certified_at or None,
            "risk_on_full_table": _round(r.true_risk),
        }
        if r.path:
            row.update(e_value=_round(math.exp(min(r.max_log_e, 700)), 4), log_e_value=_round(r.max_log_e))
        if r.rho_weights is not None and len(r.rho_weights) > 1:
            row["rho_weights"] = [_round(w, 4) for w in r.rho_weights]
        if r.judge is not None:
            row["judge"] = {k: (_round(v, 4) if isinstance(v, float) else v) for k, v in r.judge.items()}
        return row

    rows = [cand(r) for r in result.records]
    evidence = None
    if sel is not None and not pairwise:
        s = rows[sel.index]
        evidence = {k: s.get(k) for k in ("e_value", "log_e_value", "upper_bound", "ci", "estimate",
                                          "certified_at_labels", "labels_human", "labels_judge")}
        evidence["ci_level"] = 1 - ci_delta
    saved = {k: (1 - result.spent[k] / result.full[k]) if result.full[k] else 0.0 for k in result.spent}
    out = {
        "certsel_version": __version__,
        "job": cfg.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "selected": result.selected,
        "selected_objective": None if sel is None else sel.objective,
        "certificate": statement,
        "guarantee": guarantee,
        "evidence": evidence,
        "certified_set": list(result.certified),
        "procedure": {"name": cfg.procedure, "delta": cfg.delta, "level": result.level, "candidates": K,
                      **({} if pairwise else {"alpha": cfg.alpha})},
        "policy": {"kind": cfg.policy.kind, "betting": cfg.policy.strategy.describe(), "radius": cfg.policy.radius,
                   "partition": cfg.policy.partition},
        "objective": None if cfg.objective is None else cfg.objective.model_dump(),
        "labels": {"spent": result.spent, "full_budget": result.full,
                   "saved_fraction": {k: _round(v, 4) for k, v in saved.items()},
                   "budget": _budget(cfg), "rounds": result.rounds},
        "scheduling": cfg.scheduling.model_dump(),
        "data": {"path": cfg.data_path, "sha256_16": result.data.fingerprint, "items": result.data.n_items,
                 **({"judge": cfg.judge_name} if _uses_judge(cfg) else {})},
        "seed": cfg.seed,
        "job_id": result.job_id,
        "resume": result.resume,
        "recovered": result.recovered,
        "seconds": _round(result.seconds, 3),
        "candidates": _sorted_rows(cfg, rows),
    }
    if result.ranking is not None:
        out["ranking"] = result.ranking
    return out


def _uses_judge(cfg) -> bool:
    return cfg.policy.uses_judge or cfg.policy.partition == "judge"


def _budget(cfg) -> dict:
    """The budget keys that mean something for this job (no judge ratio without a judge)."""
    b = cfg.budget.model_dump()
    if not cfg.policy.uses_judge:
        b.pop("r")
    return b


def _sorted_rows(cfg, rows: list) -> list:
    """Candidates in the order the job uses them: its fixed sequence, or by objective
    (best first) for procedures that select by objective; each row keeps its ``position``."""
    for k, row in enumerate(rows):
        row["position"] = k
    proc = get_procedure(cfg.procedure)
    if proc.needs_order or proc.ranking or cfg.objective is None or any(r["objective"] is None for r in rows):
        return rows
    sign = -1.0 if cfg.objective.goal == "maximize" else 1.0
    return sorted(rows, key=lambda r: (sign * r["objective"], r["position"]))


def selected_by_budget(result: JobResult, budgets) -> list:
    """What the job would have selected with a smaller per-candidate budget b (human labels),
    recomputed from the recorded evidence (each run's evidence up to b is a prefix of it)."""
    cfg, objective = result.cfg, result.data.objective
    proc = get_procedure(cfg.procedure)
    if objective is None or proc.ranking:
        return [None] * len(budgets)
    key = -objective if cfg.objective and cfg.objective.goal == "maximize" else objective
    out = []
    for b in budgets:
        if any(r.path for r in result.records):
            max_log_e = np.array([max([0.0] + r.path[:b]) for r in result.records])
            cert = proc.certified(max_log_e, cfg.delta)
        else:
            ok = np.array([r.status == "certified" and 0 < r.certified_at <= b for r in result.records])
            cert = proc.certified_by_decisions(ok)
        k = int(select(cert, key))
        out.append(None if k < 0 else float(objective[k]))
    return out


def _plots(result: JobResult, outdir: pathlib.Path) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = result.cfg
    proc = get_procedure(cfg.procedure)
    files = []
    ran = [r for r in result.records if r.t > 0]
    if any(r.path for r in ran):
        fig, ax = plt.subplots(figsize=(7, 4))
        for r in ran:
            style = "-" if r.name in result.certified else ":"
            lw = 2.5 if r.name == result.selected else 1.0
            ax.plot(np.arange(1, len(r.path) + 1), np.asarray(r.path) / math.log(10), style, lw=lw,
                    label=r.name if r.name == result.selected else None)
        ax.axhline(_log_level(result) / math.log(10), color="k", lw=1,
                   label=f"log10 level ({proc.threshold_words(cfg.delta, len(result.records))})")
        ax.set_xlabel("human labels")
        ax.set_ylabel("log10 e-value")
        ax.set_title("e-value paths (solid: in the certified set)")
        ax.legend(loc="best", fontsize=8)
        files.append(outdir / "evalue_paths.png")
        fig.tight_layout()
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    with_ci = [r for r in ran if any("ci_low" in row for row in r.rounds)]
    fig, ax = plt.subplots(figsize=(7, 4))
    if with_ci:
        for r in with_ci[:12]:
            rows = [row for row in r.rounds if "ci_low" in row]
            x = [row["step"] for row in rows]
            line, = ax.plot(x, [row["ci_high"] for row in rows], lw=1.5 if r.name == result.selected else 0.8)
            ax.plot(x, [row["ci_low"] for row in rows], color=line.get_color(), lw=line.get_linewidth())
        ax.set_xlabel("human labels")
        ax.set_title("confidence interval shrinkage")
    else:
        pts = [(k, r) for k, r in enumerate(ran) if r.ci is not None]
        for k, r in pts:
            ax.plot([k, k], r.ci, color="C0" if r.name in result.certified else "C3", lw=2)
        ax.set_xticks([k for k, _ in pts], [r.name for _, r in pts], rotation=90, fontsize=6)
        ax.set_title("final two-sided anytime-valid intervals (blue: certified)")
    if not proc.ranking:
        ax.axhline(cfg.alpha, color="k", lw=1, ls="--", label="alpha")
        ax.legend(fontsize=8)
    ax.set_ylabel("risk R")
    files.append(outdir / "intervals.png")
    fig.tight_layout()
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    if not proc.ranking and result.data.objective is not None:
        budgets = list(range(cfg.budget.batch, cfg.budget.n + 1, cfg.budget.batch))
        if budgets and budgets[-1] != cfg.budget.n:
            budgets.append(cfg.budget.n)
        sel = selected_by_budget(result, budgets)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.step(budgets, [np.nan if s is None else s for s in sel], where="post")
        ax.set_xlabel("human labels per candidate (budget)")
        ax.set_ylabel(cfg.objective.column if cfg.objective else "objective")
        ax.set_title("selected candidate's objective vs. budget")
        files.append(outdir / "selected_vs_budget.png")
        fig.tight_layout()
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    return files


def _write_labels(result: JobResult, path: pathlib.Path) -> pathlib.Path:
    """Every label the job bought: candidate, purchase order, item (index and id), role, loss."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = result.data.item_ids
    cols = {"candidate": [], "seq": [], "item": [], "item_id": [], "role": [], "loss": []}
    for name, log in result.labels.items():
        items = np.asarray(log["item"], dtype=np.int64)
        cols["candidate"].append(np.full(items.size, name, dtype=object))
        cols["seq"].append(np.arange(items.size))
        cols["item"].append(items)
        cols["item_id"].append(ids[items].astype(object))
        cols["role"].append(np.asarray(log["role"], dtype=object))
        cols["loss"].append(np.asarray(log["loss"], dtype=np.float64))
    table = pa.table({k: pa.array(np.concatenate(v) if v else []) for k, v in cols.items()})
    pq.write_table(table, path)
    return path


def _table(cert: dict) -> list[list[str]]:
    head = ["candidate", "objective", "status", "certified", "e-value", "interval", "human", "judge", "requests",
            "note"]
    rows = [head]
    for c in cert["candidates"]:
        ci = "" if c["ci"] is None else f"[{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]"
        e = "" if c.get("e_value") is None else f"{c['e_value']:.3g}"
        obj = "" if c["objective"] is None else f"{c['objective']:g}"
        rows.append([c["candidate"] + (" *" if c["selected"] else ""), obj, c["status"],
                     "yes" if c["certified"] else "no", e, ci, str(c["labels_human"]), str(c["labels_judge"]),
                     str(c["requests"]), (c.get("reason") or "").replace("|", "/")])
    return rows


def _incidents(cert: dict) -> list[str]:
    """Candidates that ended for a reason other than their evidence (a label source that
    failed for good, a worker lost too often): not certified, and said so."""
    return [f"{c['candidate']}: not certified ({c['reason']})" for c in cert["candidates"]
            if c.get("reason", "").startswith(("source failed", "worker lost"))]


def write_report(result: JobResult, outdir) -> list[pathlib.Path]:
    """Write selection.json, report.md, report.html and the plots into ``outdir``."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cert = certificate(result)
    files = [outdir / "selection.json"]
    files[0].write_text(json.dumps(cert, indent=2, allow_nan=False))
    plots = _plots(result, outdir)
    if result.labels is not None:
        files.append(_write_labels(result, outdir / "labels.parquet"))
    lab = cert["labels"]
    summary = [
        f"# certsel: {cert['job']}",
        "",
        f"**Selected:** {cert['selected'] or 'none'}",
        "",
        f"**Certificate:** {cert['certificate']}.",
        "",
        *([cert["guarantee"], ""] if cert["guarantee"] else []),
        f"Policy {cert['policy']['kind']} ({cert['policy']['betting']} betting), alpha = {cert['procedure']['alpha']:g}, "
        f"delta = {cert['procedure']['delta']}, procedure: {cert['procedure']['level']}.",
        "",
        "| labels | spent | full budget | saved |",
        "|---|---:|---:|---:|",
    ]
    for k in ("human", "judge", "requests"):
        summary.append(f"| {k} | {lab['spent'][k]} | {lab['full_budget'][k]} | {lab['saved_fraction'][k]:.1%} |")
    incidents = _incidents(cert)
    if incidents:
        summary += ["", "**Ended without evidence:**", *[f"- {x}" for x in incidents]]
    rows = _table(cert)
    md = summary + ["", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    md += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    md += ["", *[f"![{p.stem}]({p.name})" for p in plots], ""]
    files.append(outdir / "report.md")
    files[-1].write_text("\n".join(md))
    esc = html.escape
    body = [f"<h1>certsel: {esc(cert['job'])}</h1>",
            f"<p><b>Selected:</b> {esc(str(cert['selected'] or 'none'))}</p>",
            f"<p><b>Certificate:</b> {esc(cert['certificate'])}.</p>",
            *([f"<p>{esc(cert['guarantee'])}</p>"] if cert["guarantee"] else []),
            "<table border=1 cellpadding=3><tr><th>labels</th><th>spent</th><th>full budget</th><th>saved</th></tr>"]
    for k in ("human", "judge", "requests"):
        body.append(f"<tr><td>{k}</td><td>{lab['spent'][k]}</td><td>{lab['full_budget'][k]}</td>"
                    f"<td>{lab['saved_fraction'][k]:.1%}</td></tr>")
    body.append("</table>")
    if incidents:
        body.append("<p><b>Ended without evidence:</b></p><ul>" + "".join(f"<li>{esc(x)}</li>" for x in incidents)
                    + "</ul>")
    body.append("<br><table border=1 cellpadding=3>")
    body.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in rows[0]) + "</tr>")
    body += ["<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in rows[1:]]
    body.append("</table>")
    body += [f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in plots]
    files.append(outdir / "report.html")
    files[-1].write_text("<!doctype html><html><head><meta charset='utf-8'><title>certsel report</title></head><body>"
                         + "\n".join(body) + "</body></html>")
    return files + plots
