"""Certified gates for CI: each candidate of a job passes, fails or stays undecided.

    import certsel
    res = certsel.gate("examples/gate_recovery.yaml", only=["mx_m8_r4_k64"])
    res.exit_code, res.outcomes        # 0 / 1 / 3, {"mx_m8_r4_k64": "pass"}

A gate takes ``certsel run``'s job file and its claim (``alpha``: R <= alpha; ``recovery``: recovery >= r against a
reference) and tests every candidate on its own at ``delta`` (procedure ``gate``): **pass** when the claim is
certified, **fail** when its opposite is (the futility test at delta), **undecided** when the budget runs out first.
Items come in the job's seeded random order, never the first N. Exit status:
:func:`~certsel.orchestrator.results.outcomes.gate_exit_code`. See docs/gate.md.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from certsel.errors import InputError

if TYPE_CHECKING:
    from certsel.orchestrator.outputs.gate_files import GateRow
    from certsel.orchestrator.outputs.selection_schema import Certificate

__all__ = ["GateResult", "RegressionAsk", "gate", "gate_config"]

# a selection's keys that a gate does not use: its fixed sequence and where that sequence starts
_SELECTION_ONLY = ("order",)
_PILOT_ONLY = ("start", "pilot_items", "pilot_margin", "pilot_check")


@dataclass(frozen=True)
class RegressionAsk:
    """A regression gate asked for on the command line (``--baseline``, ``--margin``, ``--superiority``): it replaces
    the job file's target."""

    baseline: str | None = None
    margin: float | None = None
    superiority: bool = False

    @classmethod
    def of(cls, baseline, margin, superiority) -> RegressionAsk | None:
        if baseline is None and margin is None and not superiority:
            return None
        return cls(baseline, margin, superiority)

    def apply(self, raw: dict, warn=None) -> dict:
        """``raw`` with this regression claim (the file's ``regression:`` completed, or its target replaced)."""
        given = dict(raw.get("regression") or {})
        if self.baseline is None and not given:
            raise InputError("--margin and --superiority are a regression gate's: name its --baseline (or set "
                             "regression.baseline in the job file)")
        reg = {**given, **({"baseline": self.baseline} if self.baseline is not None else {}),
               **({"margin": self.margin} if self.margin is not None else {}),
               **({"superiority": True} if self.superiority else {})}
        raw = {**raw, "regression": reg}
        replaced = [k for k in ("alpha", "recovery") if raw.pop(k, None) is not None]
        data = dict(raw.get("data") or {})
        replaced += [f"data.{k}" for k in ("reference", "judge_reference") if data.pop(k, None) is not None]
        if raw.get("data") is not None:
            raw["data"] = data
        live = raw.get("live")
        if isinstance(live, dict) and isinstance(live.get("reference"), str) and live["reference"] != reg.get("baseline"):
            raw["live"] = {k: v for k, v in live.items() if k != "reference"}  # the baseline becomes the reference
            replaced.append("live.reference")
        if replaced and warn is not None:
            warn(f"{', '.join(replaced)}: replaced by the regression claim against {reg['baseline']!r}")
        return raw


def as_gate(raw: dict, only=None, warn=None, labels=None, regression: RegressionAsk | None = None,
            series: str | None = None) -> dict:
    """A job's mapping as its gate: procedure ``gate``, no fixed sequence or pilot, futility at delta (the fail
    rule), only the candidates ``only``, labels kept across runs in ``labels`` (default: the job's ``state.store``,
    else CERTSEL_HOME/labels.db); ``regression``: against a baseline instead of the file's target; ``series``: a
    release of this series."""
    from certsel.config import RunConfig
    from certsel.config.ledger import raw_with_ledger

    raw = dict(raw)
    if regression is not None:
        raw = regression.apply(raw, warn)
    if series is not None:
        raw["series"] = series
    raw = raw_with_ledger(raw, labels)
    if raw.get("tasks") is not None:
        raise InputError("certsel gate: gates one table or source; gate each task of a multi-task job as a job of "
                         "its own")
    raw["procedure"] = "gate"
    dropped = [key for key in _SELECTION_ONLY if raw.pop(key, None) is not None]
    sched = dict(raw.get("scheduling") or {})
    dropped += [f"scheduling.{key}" for key in _PILOT_ONLY if sched.pop(key, None) is not None]
    if dropped and warn is not None:
        warn(f"{', '.join(dropped)}: a selection's keys, not used by a gate (each candidate is gated on its own)")
    if "futility" in sched:  # a selection's early stop (or null: none); a gate's fail rule is at delta
        futility, delta = sched.pop("futility"), raw.get("delta", RunConfig.model_fields["delta"].default)
        if futility != delta and warn is not None:
            warn(f"scheduling.futility {futility} is the selection's early stop; a gate fails a candidate when "
                 f"the opposite of its claim is certified at delta = {delta}")
    raw["scheduling"] = sched
    if only:
        raw["candidates"] = list(only)
    return raw


def gate_config(job, overrides=(), only=None, warn=None, compressed=None, base=None, labels=None, regression=None,
                series=None):
    """The :class:`~certsel.config.RunConfig` of ``job``'s gate (a job file, a mapping or a RunConfig; ``overrides``:
    ``KEY=VALUE`` strings), checked as ``certsel run`` checks a job. An llm-compressor lm-eval test config gates the
    checkpoint ``compressed`` against ``base`` (default: the config's model; :mod:`certsel.config.llmcompressor`)."""
    from certsel.api import job_config
    from certsel.config import RunConfig
    from certsel.config.llmcompressor import gate_job, is_llmcompressor
    from certsel.config.loading import apply_overrides, load_config

    def adjust(raw, where="job"):
        if is_llmcompressor(raw):
            raw = gate_job(raw, compressed=compressed, base=base, name=raw.get("name", "llm-compressor"),
                           where=where)
        elif compressed is not None or base is not None:
            raise InputError(f"{where}: --compressed and --base are for llm-compressor test configs; this is a "
                             "certsel job (name its candidates and reference in the file)")
        return as_gate(raw, only, warn, labels, regression, series)

    if isinstance(job, (str, pathlib.Path)):
        return load_config(job, overrides, adjust=lambda raw: adjust(raw, str(job)))
    raw = job.model_dump(mode="json", exclude_none=True) if isinstance(job, RunConfig) else dict(job)
    return job_config(apply_overrides(adjust(raw), overrides, "job"))


@dataclass
class GateResult:
    """A finished gate: the outcome of every candidate, the exit status and the certificate."""

    exit_code: int
    outcomes: dict[str, str]
    rows: list[GateRow] = field(repr=False)
    selection: Certificate = field(repr=False)  # the certificate (selection.json), typed
    job_id: str | None = None
    output_dir: pathlib.Path | None = None
    mlflow_run: str | None = None  # its run in the tracking store (None: not tracked)

    @property
    def answered_by(self) -> str | None:
        """The finished job that answered this gate without running it (None: it ran now)."""
        return self.selection.answered_by

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def result_of(cert, output_dir=None, mlflow_run=None) -> GateResult:
    from certsel.orchestrator.outputs.gate_files import gate_rows

    rows = gate_rows(cert)
    return GateResult(cert.gate.exit_code, {r.candidate: r.outcome for r in rows}, rows, cert, cert.job_id,
                      None if output_dir is None else pathlib.Path(output_dir), mlflow_run)


def gate(job, *, only=None, overrides=(), output=None, track: bool = True, fresh: bool = False,
         progress=None, warn=None, compressed=None, base=None, labels=None, regression: RegressionAsk | None = None,
         series: str | None = None, on_runtime=None) -> GateResult:
    """Gate ``job``'s candidates (a job file, a mapping or a RunConfig) and return the :class:`GateResult`.

    A finished job of the same configuration answers without running (``fresh=True`` runs it anew). ``compressed``,
    ``base``: an llm-compressor test config's checkpoint and base model (:func:`gate_config`). ``labels``: the label
    store's file (:func:`as_gate`); a label an earlier gate bought for the same model, task, item and settings is
    reused and counted as such. ``regression`` (:class:`RegressionAsk`): gate each candidate against a baseline on
    the same items; ``series``: gate a release of this series (its level delta / (k (k + 1)),
    :mod:`~certsel.orchestrator.engine.series`). Bad input raises :class:`~certsel.errors.InputError`."""
    cfg = gate_config(job, overrides, only, warn, compressed, base, labels, regression, series)
    from certsel.orchestrator.outputs.output_process import outputs_for

    outputs = outputs_for(cfg, track)  # importing MLflow (or matplotlib) from now on, beside everything below
    try:
        return _gate(cfg, outputs, only=only, output=output, track=track, fresh=fresh, progress=progress, warn=warn,
                     on_runtime=on_runtime)
    finally:  # unused (a finished job answered), failed, or done: closing again after execute is closing once
        if outputs is not None:
            outputs.close()


def _gate(cfg, outputs, *, only, output, track, fresh, progress, warn, on_runtime) -> GateResult:
    from certsel.orchestrator.commands.job import answer_finished, execute  # after the job file is read
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.certificate import certificate_of
    from certsel.workers.label_store import check_store

    if fresh:
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"resume": "never"})})
    try:
        data = load_job_data(cfg)
    except InputError as exc:  # a candidate --only names is not in the job: say so under its own name
        if only and str(exc).startswith("candidates: unknown"):
            raise InputError("--only" + str(exc).removeprefix("candidates")) from None
        raise
    if cfg.state.store is not None:  # a store CI restored corrupt or locked is bad input, before any answer
        check_store(cfg.state.store)
    if cfg.series is not None:  # each release's place in its series and its level (a rerun: the same ones)
        from certsel.orchestrator.engine.series import in_series

        cfg = in_series(cfg, data)
    done = None if fresh or output is not None else answer_finished(cfg, data, track)
    if done is not None:  # the same gate finished before: its answer, nothing bought now
        return result_of(done.certificate, done.output, done.mlflow_run)
    result, run_id = execute(cfg, output=output, track=track, progress=progress, data=data, warn=warn,
                             on_runtime=on_runtime, outputs=outputs)
    return result_of(certificate_of(result), result.output_dir, run_id)
