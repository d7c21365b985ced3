"""Label-source kinds: where a job's labels come from, as a typed registry.

A :class:`SourceKind` (interface and registry: :mod:`~certsel.orchestrator.inputs.source_kind`) gives the driver, for
one kind of source, what it provides (judge, item features: checked against the policy's needs), the job's
:class:`~certsel.orchestrator.inputs.jobdata.JobData` (read and checked before anything runs), each candidate's source
spec for the workers (a frozen dataclass whose ``build`` returns the candidate's
:class:`~certsel.workers.contracts.LabelSource`; Ray ships it, by value in user code) and the items' words for the
certificate.

The built-in sources are the job file's sections ``data`` (replay), ``live`` (model servers,
:mod:`~certsel.orchestrator.inputs.live_kind`) and ``source`` (a Python function); :mod:`.lm_eval_kind` and
:mod:`.label_studio_kind` register theirs. A new source is a subclass registered with :func:`register_source_kind`; a
job selects it with ``labels: {kind: NAME, ...its options}``, validated by the kind's ``options`` pydantic model when
the job's data is loaded.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib
from dataclasses import asdict

import numpy as np

from certsel.config import RunConfig
from certsel.errors import as_input_errors
from certsel.workers.python_source import PythonSpec
from certsel.workers.label_store import identity_key
from certsel.workers.paired import PairedReplaySpec
from certsel.workers.replay import ReplaySpec

from .jobdata import JobData, check_count, check_size, load_python, load_replay
from .live_kind import LiveKind
from .stacked_tasks import load_aggregate
from .source_kind import SOURCE_KINDS, Provides, SourceKind, get_source_kind, register_source_kind
from . import lm_eval_kind  # noqa: F401  (registers the lm-eval source kind; lm-eval itself loads when used)
from . import label_studio_kind  # noqa: F401  (registers the label-studio source kind)


class ReplayKind(SourceKind):
    name = "replay"
    parallel = False  # a recorded table: its labels are lookups

    def provides(self, cfg):
        return Provides(cfg.data.judge is not None, cfg.data.features is not None, "data.judge", "data.features")

    def load(self, cfg):
        return load_replay(cfg)

    def spec(self, cfg, data, k, with_judge):
        if data.paired is None:
            return ReplaySpec()
        p = data.paired  # a regression job: the candidate's and the baseline's labels apart
        baseline = None if cfg.state.store is None else identity_key(
            {**table_identity(data.table.items, p.baseline_human, p.baseline_judge), "unit": data.unit})
        return PairedReplaySpec(p.claim, p.baseline, baseline)

    def items_words(self, n_items):
        return f"the {n_items} items of the loss table"

    def claim_place(self, cfg, data, k):
        return f"{pathlib.Path(cfg.data.path).resolve()}#{data.names[k]}"

    def loss_words(self, cfg):
        """The table's words for its loss column (data.measures), else the column's name."""
        return cfg.data.measures or f"loss (column {cfg.data.human!r})"

    def label_identity(self, cfg, data, k):
        # derived from what the candidate's source serves (its item ids and its rows of losses as read, after any
        # transform), never from the keys that chose them: a job that reads other rows, ids or columns for the same
        # name is another identity whatever key made the difference (tests/test_label_identity.py walks the schema)
        t, p = data.table, data.paired
        if p is not None:  # a regression candidate's own labels (the pairing is the claim's, not the labels')
            return table_identity(t.items, p.human[k], None if p.judge is None else p.judge[k])
        return {"source": "table", "values": rows_digest(t.items, t.human[k], None if t.judge is None else t.judge[k]),
                "recovery": None if cfg.recovery is None else cfg.recovery.at_least}

    def claim_identity(self, cfg, data, k):
        # the human losses alone (a judge column decides only judge labels, and a test stays valid with any judge), as
        # measured, not as written: ids normalised when read (workers/tables.id_column), values at CLAIM_DECIMALS
        t, p, rec = data.table, data.paired, data.recovery
        if p is not None:  # the candidate's and the baseline's human losses (the margin is in the claim's alpha)
            return {"source": "table", "values": claim_digest(t.items, p.human[k]),
                    "regression": {"baseline": claim_digest(t.items, p.baseline_human)}}
        if rec is not None:  # the scores the losses are compiled from (a transform of rounded scores rounds anew)
            weight = None if rec.weight is None else claim_digest(t.items, rec.weight)
            return {"source": "table", "values": claim_digest(t.items, rec.score[k]),
                    "recovery": {"at_least": cfg.recovery.at_least, "reference": claim_digest(t.items, rec.reference[k]),
                                 "weight": weight}}
        return {"source": "table", "values": claim_digest(t.items, t.human[k]),
                "recovery": None if cfg.recovery is None else cfg.recovery.at_least}

    def mirror_claim_identity(self, cfg, data, k):
        t, p = data.table, data.paired
        if p is None:
            return None
        return {"source": "table", "values": claim_digest(t.items, p.baseline_human),
                "regression": {"baseline": claim_digest(t.items, p.human[k])}}

    def legacy_claim_identity(self, cfg, data, k):
        # the identity of certsel 0.2 (exact values; a recovery claim by its compiled losses)
        t, p = data.table, data.paired
        if p is not None:
            return {"source": "table", "values": rows_digest(t.items, p.human[k]),
                    "regression": {"baseline": rows_digest(t.items, p.baseline_human)}}
        return {"source": "table", "values": rows_digest(t.items, t.human[k]),
                "recovery": None if cfg.recovery is None else cfg.recovery.at_least}


def table_identity(items, human, judge) -> dict:
    """The label identity of one model's rows of raw losses in a table (a plain risk job's candidate, a regression
    job's candidate or baseline alike: the same losses are the same labels)."""
    return {"source": "table", "values": rows_digest(items, human, judge), "recovery": None}


# a claim's values are what was measured to this many decimals: a table written again (a CSV round trip, values
# rounded to 6 places) is the same claim; values that differ beyond it are another claim (docs/statistics.md)
CLAIM_DECIMALS = 6


def claim_digest(items, *rows) -> str:
    """:func:`rows_digest` of ``rows`` rounded to :data:`CLAIM_DECIMALS` (-0.0 read as 0.0). Values already given to
    that many decimals (0/1 losses) digest as before, so their claims keep their keys."""
    return rows_digest(items, *(np.round(np.asarray(r, dtype=np.float64), CLAIM_DECIMALS) + 0.0 for r in rows))


def rows_digest(items, *rows) -> str:
    """sha256 of item ids (as strings) and loss rows (float64; None: absent): what a replay candidate's labels are."""
    h = hashlib.sha256()
    h.update(_ids_text(np.asarray(items)))
    for row in rows:
        h.update(b"\x1e" if row is None else b"\x1d" + np.ascontiguousarray(row, dtype=np.float64).tobytes())
    return h.hexdigest()[:32]


def _ids_text(items: np.ndarray) -> bytes:
    """The item ids as the digest reads them (as strings, joined); one table's ids are read once for all its
    candidates (a 48-candidate table's identities spent most of their time writing the same ids as strings)."""
    if items.dtype.kind in "iuU":
        return _ids_text_of(items.tobytes(), items.dtype.str)
    return "\x1f".join(items.astype(str).tolist()).encode()


@functools.lru_cache(maxsize=8)
def _ids_text_of(raw: bytes, dtype: str) -> bytes:
    return "\x1f".join(np.frombuffer(raw, dtype=np.dtype(dtype)).astype(str).tolist()).encode()


class PythonKind(SourceKind):
    name = "python"

    def provides(self, cfg):
        src = cfg.source
        return Provides(src.judge, src.features is not None, "source.judge: true", "source.features")

    def load(self, cfg):
        return load_python(cfg)

    def spec(self, cfg, data, k, with_judge):
        src = cfg.source
        return PythonSpec(function=data.function, candidate=data.names[k], n_items=data.n_items,
                          judge=src.judge and with_judge, retries=src.retries)

    def items_words(self, n_items):
        return f"the {n_items} items of the label function"


class TasksKind(SourceKind):
    """``tasks:`` with ``aggregate:``: one stacked table (:mod:`.stacked_tasks`); without it the tasks run as jobs of
    their own (:mod:`certsel.orchestrator.commands.tasks_job`)."""

    name = "tasks"
    parallel = False  # recorded tables, stacked

    def provides(self, cfg):
        recovery = cfg.recovery is not None
        return Provides(all((t.data.judge_score if recovery else t.data.judge) is not None for t in cfg.tasks),
                        all(t.data.features is not None for t in cfg.tasks), "tasks[].data.judge",
                        "tasks[].data.features")

    def load(self, cfg):
        if cfg.aggregate is None:
            raise ValueError("a multi-task job without aggregate: runs each task as a job of its own "
                             "(certsel.orchestrator.commands.tasks_job.execute_tasks)")
        return load_aggregate(cfg)

    def spec(self, cfg, data, k, with_judge):
        return ReplaySpec()

    def items_words(self, n_items):
        return f"the {n_items} items of the stacked tasks"


for _k in (ReplayKind, LiveKind, PythonKind, TasksKind):
    register_source_kind(_k)


def source_of(cfg: RunConfig) -> SourceKind:
    """The kind of the job's label source."""
    return get_source_kind(cfg.source_kind)


__all__ = ["SOURCE_KINDS", "load_job_data", "Provides", "SourceKind", "get_source_kind", "register_source_kind", "source_of"]


def load_job_data(cfg: RunConfig) -> JobData:
    """Read, validate and arrange the job's data through its source kind: a one-line :class:`~certsel.errors.InputError`
    for anything wrong with it (a registered source's options, what the policy needs from it), before any Ray or MLflow
    work."""
    with as_input_errors():
        kind = source_of(cfg)
        if cfg.labels is None:
            return kind.load(cfg)
        has = kind.provides(cfg)
        cfg.check_policy_inputs(asdict(has))  # the checks config makes for the built-in sections
        if cfg.recovery is not None and not has.reference:
            raise ValueError(f"recovery: needs a reference model's scores; the {kind.name} source has none"
                             + (" (set labels.reference)" if "reference" in (kind.options.model_fields if kind.options
                                                                           else {}) else ""))
        if cfg.regression is not None and not has.paired:
            raise ValueError(f"regression: the {kind.name} source cannot compare a candidate with a baseline item by "
                             "item (gate its candidates on alpha or recovery)")
        data = kind.load(cfg)
        # what the built-in loaders check, for whatever a registered source returned
        check_size(cfg, data.n_items, f"the {kind.name} source")
        check_count(cfg, len(data.names))
        if cfg.objective is not None and data.objective is None:
            missing = [c.id for c in data.live if c.objective is None]
            raise ValueError(f"objective: the {kind.name} source gives no objective for candidate(s) "
                             f"{', '.join(missing[:5])}")
        return data

