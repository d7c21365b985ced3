"""A gate's answer in the forms CI reads: rows (:class:`GateRow`), ``--json``, JUnit XML (``--junit``), a
Markdown summary (``--summary``) and step outputs (``--outputs``, GitHub Actions' ``$GITHUB_OUTPUT`` format). Every
number is the certificate's own."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass

from .cells import ledger_lines
from .goals import goal_of
from .goals.regression import diff_text
from .numbers import bound_text, share_text


@dataclass(frozen=True)
class GateRow:
    """One gated candidate: its outcome, human labels (``labels`` bought by this run, ``reused`` from the label
    store; the test used both) and its claim's one-sided bound at delta."""

    candidate: str
    outcome: str
    labels: int
    reused: int
    bound: float | None
    bound_side: str  # "upper" (R <= bound) or "lower" (recovery >= bound)
    e_value: float | None
    threshold: float | None
    fail_e_value: float | None
    estimate: float | None
    reason: str
    fail_claim: str  # what a fail certifies, in words (the gate's opposite of its claim)
    # its claim's test continued from earlier runs (docs/gate.md, "Reruns"): their labels and runs, the last one's job
    earlier_labels: int = 0
    earlier_runs: int = 0
    earlier_job: str | None = None
    # a regression gate: the baseline, and its labels this run bought and reused from the store
    baseline: str | None = None
    baseline_bought: int = 0
    baseline_reused: int = 0

    def bound_words(self) -> str:
        if self.bound is None:
            return "no bound"
        if self.bound_side == "lower":
            return f"recovery >= {share_text(self.bound)}"
        if self.bound_side == "difference":
            return f"score - {self.baseline!r} >= {diff_text(self.bound)}"
        return f"R <= {bound_text(self.bound)}"

    def evidence(self) -> tuple[str, str]:
        """What decided it, as the terminal, the summary and JUnit all say it: a fail's certified opposite and its
        fail test's e-value; else the claim's bound and its test's e-value (each against its threshold; "" for none)."""
        if self.outcome == "fail":
            e = "" if self.fail_e_value is None else f"{self.fail_e_value:.3g} / {self.threshold:.3g}"
            return f"{self.fail_claim} certified", e
        return self.bound_words(), "" if self.e_value is None else f"{self.e_value:.3g} / {self.threshold:.3g}"

    def line(self) -> str:
        """The one line a CI log shows for it: bound (a fail's certified opposite) and e-value."""
        said, e = self.evidence()
        if self.outcome == "fail":
            claim = f"{said} (fail e-value {e})" if e else said
        else:
            claim = f"{said}, e-value {e}" if e else said
        used = f"{self.labels} labels" if not self.reused else \
            f"{self.labels + self.reused} labels ({self.labels} bought, {self.reused} reused)"
        if self.earlier_runs:
            runs = "run" if self.earlier_runs == 1 else "runs"
            used = (f"{self.labels + self.reused + self.earlier_labels} labels ({used} now, {self.earlier_labels} in "
                    f"{self.earlier_runs} earlier {runs} of its claim, last job {self.earlier_job or '?'})")
        if self.baseline is not None and (self.baseline_bought or self.baseline_reused):
            used += f" (baseline: {self.baseline_bought} bought, {self.baseline_reused} reused)"
        return f"{self.outcome.upper():9} {self.candidate}: {used}, {claim}"


def gate_rows(cert) -> list[GateRow]:
    """The gate's candidates, in the certificate's order."""
    out = []
    for c in cert.candidates:
        rec, reg = c.recovery, c.regression
        bound, side = (c.upper_bound, "upper") if rec is None else (rec.lower_bound, "lower")
        estimate = c.estimate if rec is None else rec.estimate
        paired = {}
        if reg is not None:  # a regression gate: its bound and estimate are on the score difference
            bound, side, estimate = reg.lower_bound, "difference", reg.estimate
            paired = {"baseline": reg.baseline, "baseline_bought": reg.baseline_bought,
                      "baseline_reused": reg.baseline_reused}
        reused = c.reused or 0
        before = c.continued
        earlier = (before.labels, before.runs, before.jobs[-1] if before.jobs else None) if before else (0, 0, None)
        bought = (c.labels_human - reused, reused)
        if cert.answered_by is not None:  # answered by the finished job: its labels are an earlier run's, none now
            earlier, bought = (earlier[0] + c.labels_human, earlier[1] + 1, cert.answered_by), (0, 0)
        out.append(GateRow(c.candidate, c.outcome, *bought, bound, side, c.e_value, c.threshold, c.futility_e_value,
                           estimate, c.reason or "", cert.gate.opposite, *earlier, **paired))
    return out


def gate_json(cert, files: dict | None = None) -> dict:
    """``--json``: the outcome per candidate, with the claim, the level and the exit status."""
    g = cert.gate
    return {"job": cert.job, "job_id": cert.job_id, "answered_by": cert.answered_by, "claim": g.claim, "delta": g.delta,
            "exit_code": g.exit_code, "passed": g.passed, "failed": g.failed, "undecided": g.undecided,
            "candidates": [asdict(r) for r in gate_rows(cert)], "note": g.note, **({"files": files} if files else {})}


def write_json(cert, path, files: dict | None = None) -> None:
    path.write_text(json.dumps(gate_json(cert, files), indent=2, allow_nan=False) + "\n")


def junit_xml(cert) -> str:
    """JUnit XML: a test case per candidate; a fail is a ``<failure>``, an undecided one ``<skipped>``."""
    rows, g = gate_rows(cert), cert.gate
    counts = {"tests": str(len(rows)), "failures": str(len(g.failed)), "errors": "0", "skipped": str(len(g.undecided)),
              "time": f"{cert.seconds:.3f}"}
    root = ET.Element("testsuites", name="certsel gate", **counts)
    suite = ET.SubElement(root, "testsuite", name=f"certsel gate: {cert.job}", **counts)
    props = ET.SubElement(suite, "properties")
    for k, v in (("claim", g.claim), ("delta", f"{g.delta:g}"), ("job_id", cert.job_id or ""),
                 ("answered_by", cert.answered_by or "")):
        ET.SubElement(props, "property", name=k, value=v)
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"certsel.gate.{cert.job}", name=r.candidate, time="0")
        said = f"{r.fail_claim} certified" if r.outcome == "fail" else r.bound_words()
        message = f"{r.outcome}: {said} at level {g.delta:g} after {r.labels + r.reused + r.earlier_labels} labels"
        if r.outcome == "fail":
            ET.SubElement(case, "failure", message=message, type="certsel.gate.fail").text = \
                f"{r.line()}\n{g.note}"
        elif r.outcome == "undecided":
            ET.SubElement(case, "skipped", message=message + (f" ({r.reason})" if r.reason else ""))
        ET.SubElement(case, "system-out").text = r.line()
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def gate_markdown(cert) -> str:
    """A Markdown summary: the headline, a table of the candidates and what the outcomes mean."""
    goal, g = goal_of(cert), cert.gate
    icon = {"pass": "✅ pass", "fail": "❌ fail", "undecided": "⚠️ undecided"}
    rows = gate_rows(cert)
    paired = any(r.baseline is not None for r in rows)  # a regression gate: what the baseline's side cost
    base_head, base_rule = (" baseline bought / reused |", "---:|") if paired else ("", "")
    lines = [f"### {goal.headline(cert)}", "", f"**{cert.job}**: pass when {g.claim} is certified at delta = "
             f"{g.delta:g}", "", f"| candidate | outcome | labels bought | reused |{base_head} what holds | "
             "max e-value / threshold |", f"|---|---|---:|---:|{base_rule}---|---:|"]
    for r in rows:
        said, e = r.evidence()  # a fail: its fail test's bound and e-value, as its terminal line says
        base = f" {r.baseline_bought} / {r.baseline_reused} |" if paired else ""
        lines.append(f"| {r.candidate} | {icon[r.outcome]} | {r.labels} | {r.reused} |{base} {said} | {e} |")
    lines += ["", g.note, *(f"\n{line}" for line in ledger_lines(cert)), ""]
    if cert.answered_by is not None:
        lines.insert(2, f"Answered by the finished job {cert.answered_by} (same configuration and data): no label "
                        "was bought by this run (`certsel gate --fresh` runs it again).\n")
    return "\n".join(lines)


def step_outputs(cert, report: str | None = None) -> str:
    """``--outputs``: NAME=VALUE lines as GitHub Actions reads ``$GITHUB_OUTPUT`` (the candidates of each outcome as
    JSON lists, one line each, so a workflow reads them with ``fromJSON``)."""
    g = cert.gate
    values = {"exit-code": str(g.exit_code), "passed": json.dumps(g.passed), "failed": json.dumps(g.failed),
              "undecided": json.dumps(g.undecided), "delta": f"{g.delta:g}", "job-id": cert.job_id or "",
              "answered-by": cert.answered_by or "", "report": report or ""}
    return "".join(f"{k}={v}\n" for k, v in values.items())
