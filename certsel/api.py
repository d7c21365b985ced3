"""The job-level Python API: ``certsel.run`` and ``certsel.audit`` from a notebook or a script.

    import certsel
    res = certsel.run("examples/quantization.yaml", data=df, alpha=0.05, budget={"n": 200})
    res.selected, res.certificate       # the answer and the statement it comes with
    res.to_frame()                      # one row per candidate (pandas)
    res.report                          # the HTML report on disk

``job`` is a job file, a mapping with the same keys, a :class:`~certsel.config.RunConfig`, or None (every key from
the keyword arguments). Keyword arguments override the job's keys; a mapping merges into the section it names
(``budget={"n": 200}`` keeps ``budget.r``). ``data`` replaces a replay job's table: a path (Parquet, CSV, JSON Lines)
or an in-memory table (pandas, polars, pyarrow), stored once as Parquet in the job's state folder so the job stays
resumable and its fingerprint names the content. Everything is checked before the first label, raising the command
line's one-line :class:`~certsel.errors.InputError`.
"""

from __future__ import annotations

import copy
import hashlib
import pathlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from certsel.home import jobs_dir
from certsel.errors import InputError, as_input_errors

if TYPE_CHECKING:  # the schema imports pydantic: not at `import certsel`
    from certsel.orchestrator.outputs.selection_schema import Certificate
    from certsel.orchestrator.outputs.tasks_schema import TasksCertificate

__all__ = ["Result", "audit", "run"]


@dataclass
class Result:
    """A finished job: its answer, its certificate, per-candidate rows and where it wrote them."""

    selected: str | None
    certificate: str  # the certified statement, in words
    certified: list[str]  # the certified set of the multiple-testing procedure
    # the typed certificate (selection_schema.Certificate; a multi-task job's TasksCertificate); to_dict(): selection.json
    selection: Certificate | TasksCertificate = field(repr=False)
    job_id: str | None = None  # certsel run --resume JOB_ID (durable jobs)
    run_id: str | None = None  # the MLflow parent run (tracked jobs)
    output_dir: pathlib.Path | None = None
    files: list[pathlib.Path] = field(default_factory=list, repr=False)
    job: object = field(default=None, repr=False)  # the engine's JobResult, for everything else

    @property
    def report(self) -> pathlib.Path | None:
        """The HTML report (None when nothing was written to disk)."""
        return None if self.output_dir is None else self.output_dir / "report.html"

    @property
    def rows(self) -> list[dict]:
        """One flat dict per candidate, in the table's order (the columns of ``--format csv``)."""
        from certsel.orchestrator.outputs.goals import candidate_records

        return candidate_records(self.selection)

    def to_dict(self) -> dict:
        """selection.json as a dict (a fresh one)."""
        return self.selection.as_json()

    def __repr__(self) -> str:
        """One short line: what was selected, how many were certified, where the rest is."""
        where = f", report={str(self.report)!r}" if self.report is not None else ""
        return (f"Result(selected={self.selected!r}, certified={len(self.certified)} of {len(self.rows)}, "
                f"job_id={self.job_id!r}{where}; .certificate: the statement, .to_frame(): every column)")

    # the columns a notebook shows first (all of them: to_frame())
    SHOWN = ("candidate", "status", "certified", "selected", "e_value", "threshold", "simultaneous_bound",
             "upper_bound", "estimate", "labels_human")

    def _repr_html_(self) -> str:
        """Jupyter's view: the certified statement, then a table of the candidates (the first columns of
        :attr:`rows`; :meth:`to_frame` has every one)."""
        import html

        rows = self.rows
        cols = [c for c in self.SHOWN if any(c in r for r in rows)]

        def cell(v) -> str:
            if isinstance(v, float):
                return f"{v:.4g}"
            return "" if v is None else html.escape(str(v))

        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr" + (' style="font-weight:bold"' if csv_row.get("selected") else "") + ">"
                       + "".join(f"<td>{cell(csv_row.get(c))}</td>" for c in cols) + "</tr>" for csv_row in rows)
        report = "" if self.report is None else f"<p>report: <code>{html.escape(str(self.report))}</code></p>"
        return (f"<div><p><b>selected: {html.escape(str(self.selected or 'none'))}</b></p>"
                f"<p>{html.escape(self.certificate)}</p><table><thead><tr>{head}</tr></thead><tbody>{body}"
                f"</tbody></table><p>{len(self.certified)} certified of {len(rows)}; <code>.to_frame()</code> has every "
                f"column</p>{report}</div>")

    def to_frame(self):
        """The per-candidate rows as a pandas DataFrame, indexed by candidate."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Result.to_frame() needs pandas (pip install pandas); Result.rows has the same rows")
        return pd.DataFrame(self.rows).set_index("candidate")


def _merge(base: dict, updates: dict) -> dict:
    """``updates`` into ``base``: a mapping merges into a mapping, anything else replaces."""
    out = dict(base)
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _stored_table(table, state_dir: pathlib.Path) -> pathlib.Path:
    """An in-memory table as Parquet in ``state_dir/tables/``, named by its content's hash (stored once; a rerun
    finds the same job to resume)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from certsel.workers.tables import read_table

    with as_input_errors():
        table = read_table(table, "data")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest = hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]
    path = state_dir / "tables" / f"{digest}.parquet"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(path)
    return path


def job_config(job=None, data=None, **overrides):
    """The :class:`~certsel.config.RunConfig` that :func:`run` and :func:`audit` run (arguments: module docstring)."""
    from certsel.config import RunConfig, parse_config
    from certsel.config.loading import job_path, read_job_file

    base_dir, source = pathlib.Path.cwd(), "job"
    if job is None:
        raw = {}
    elif isinstance(job, RunConfig):
        if data is None and not overrides:
            return job
        raw = job.model_dump(mode="json", exclude_none=True)
        if job.state.store is None and "store" in job.state.model_fields_set:  # the ledger turned off stays off
            raw.setdefault("state", {})["store"] = None
    elif isinstance(job, dict):
        raw = copy.deepcopy(job)
    elif isinstance(job, (str, pathlib.Path)):
        job = job_path(job)  # a bundled example by its name, where no such file is here
        raw, base_dir, source = read_job_file(job), job.parent, str(job)
        raw.setdefault("name", pathlib.Path(job).stem)  # as `certsel run` names it
    else:
        raise InputError(f"job: expected a job file, a mapping or a RunConfig, got {type(job).__name__}")
    raw = _merge(raw, overrides)
    if data is not None:
        if any(k in raw for k in ("live", "source", "labels")):
            raise InputError("data: replaces a replay job's loss table, but this job's labels come from "
                             + next(k for k in ("live", "source", "labels") if k in raw))
        if not isinstance(data, (str, pathlib.Path)):
            state = pathlib.Path(raw.get("state", {}).get("dir", jobs_dir()))
            data = _stored_table(data, state if state.is_absolute() else base_dir / state)
        raw["data"] = {**raw.get("data", {}), "path": str(pathlib.Path(data).resolve())}
    return parse_config(raw, source=source, base_dir=base_dir)


def run(job=None, data=None, *, output=None, track: bool = True, resume: str | None = None, fresh: bool = False,
        progress=None, **overrides) -> Result:
    """Run a selection job (a local Ray, MLflow unless ``track=False``) and return its :class:`Result`.

    ``output``: the folder for report.html, selection.json and labels.parquet (default: the job's folder in
    ``state.dir``). ``resume``: continue an unfinished job by id; ``fresh``: start a new one even if an unfinished job
    with this configuration exists; ``progress(records, rounds)``: called after every round."""
    from certsel.orchestrator.outputs.certificate import certificate_of
    from certsel.orchestrator.commands.job import execute

    from certsel.config.ledger import with_ledger

    cfg = with_ledger(job_config(job, data, **overrides))
    if fresh:
        if resume:
            raise InputError("fresh=True and resume exclude each other")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"resume": "never"})})
    if cfg.tasks is not None and cfg.aggregate is None:  # every task as a job of its own, then combined
        from certsel.orchestrator.outputs.tasks_outputs import tasks_certificate
        from certsel.orchestrator.commands.tasks_job import execute_tasks

        if resume:
            raise InputError("resume names one job; a multi-task job resumes each task by itself (run it again)")
        res = execute_tasks(cfg, output=output, track=track, progress=progress)
        cert = tasks_certificate(res)
        return Result(selected=res.selected, certificate=cert.certificate, certified=list(res.certified),
                      selection=cert, run_id=res.run_id, output_dir=res.output_dir, files=list(res.files), job=res)
    result, run_id = execute(cfg, output=output, track=track, resume=resume, progress=progress)
    cert = certificate_of(result)
    return Result(selected=result.selected, certificate=cert.certificate, certified=list(result.certified),
                  selection=cert, job_id=result.job_id, run_id=run_id, output_dir=result.output_dir,
                  files=list(result.files), job=result)


def audit(job=None, data=None, *, reps: int = 1000, seed: int = 0, workers: int | None = None, output=None,
          progress=None, **overrides):
    """Repeat a replay job's policy ``reps`` times on random item orders of its table; returns the
    :class:`~certsel.orchestrator.audit.base.AuditResult` (failure rates with Clopper-Pearson bounds, coverage,
    FT-Eval). ``output``: also write audit.json, audit.md and audit.png there."""
    from certsel.orchestrator.audit.job_audit import write_audit
    from certsel.orchestrator.commands.audit import audit as run_audit
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.paths import output_dir

    cfg = job_config(job, data, **overrides)
    if output is not None:
        output = output_dir(output, "output")
    if cfg.tasks is not None and cfg.aggregate is None:
        raise InputError("audit() takes one job; audit a multi-task job with certsel audit JOB.yaml")
    jobdata = load_job_data(cfg)
    cfg = jobdata.policy_config(cfg)  # an aggregate is audited in its stacked table's units
    if jobdata.table is None:
        raise InputError("certsel audit needs a replay job (data:), whose table gives the true risks")
    with as_input_errors():
        result = run_audit(cfg, jobdata, reps=reps, seed=seed, workers=workers, progress=progress)
    if output is not None:
        write_audit(result, output)
    return result
