"""Label-source kinds: where a job's labels come from, as a typed registry.

A :class:`SourceKind` says, for one kind of label source, everything the driver needs:

* :meth:`~SourceKind.provides`: whether it gives a judge and item features (the job file's
  validation checks the policy's needs against it, naming the key to set);
* :meth:`~SourceKind.load`: the job's :class:`~certsel.orchestrator.inputs.jobdata.JobData` (the
  candidates, the number of items, objectives, features, a fingerprint), read and checked
  before anything runs;
* :meth:`~SourceKind.spec`: one candidate's source spec for the workers, a frozen dataclass
  whose ``build(shared, rows)`` returns the :class:`~certsel.workers.contracts.LabelSource`
  the candidate's policy asks for labels (Ray ships it; in user code, by value);
* :meth:`~SourceKind.items_words`: what the items are, for the certificate.

The built-in sources are the job file's sections ``data`` (a recorded loss table, replay),
``live`` (model servers) and ``source`` (a Python function). A new source is a subclass
registered with :func:`register_source_kind`; a job selects it with
``labels: {kind: NAME, ...its options}``, its options validated by the kind's ``options``
model (a pydantic model) when the job's data is loaded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from pydantic import BaseModel, ValidationError

from certsel.config import RunConfig
from certsel.errors import as_input_errors
from certsel.workers.live import LiveSpec
from certsel.workers.python_source import PythonSpec
from certsel.workers.replay import ReplaySpec

from .jobdata import JobData, check_count, check_size, load_live, load_python, load_replay


@dataclass(frozen=True)
class Provides:
    """What a source gives a policy besides human labels, and the job-file keys that set it."""

    judge: bool
    features: bool
    judge_key: str
    features_key: str


class SourceKind:
    """One kind of label source (see the module docstring)."""

    name: ClassVar[str] = ""
    options: ClassVar[type[BaseModel] | None] = None  # the schema of ``labels:`` besides ``kind`` (registered kinds)

    def settings(self, cfg: RunConfig):
        """The job file's section for this source (a validated model)."""
        if self.options is None:
            raise NotImplementedError
        try:
            return self.options.model_validate(cfg.labels.options)
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(x) for x in e["loc"])
            raise ValueError(f"labels.{where}: {e['msg']}" if where else f"labels: {e['msg']}") from None

    def provides(self, cfg: RunConfig) -> Provides:
        raise NotImplementedError

    def load(self, cfg: RunConfig) -> JobData:
        raise NotImplementedError

    def spec(self, cfg: RunConfig, data, k: int, with_judge: bool):
        raise NotImplementedError

    def items_words(self, n_items: int) -> str:
        return f"the {n_items} items of the {self.name} source"


class ReplayKind(SourceKind):
    name = "replay"

    def provides(self, cfg):
        return Provides(cfg.data.judge is not None, cfg.data.features is not None, "data.judge", "data.features")

    def load(self, cfg):
        return load_replay(cfg)

    def spec(self, cfg, data, k, with_judge):
        return ReplaySpec()

    def items_words(self, n_items):
        return f"the {n_items} items of the loss table"


class LiveKind(SourceKind):
    name = "live"

    def provides(self, cfg):
        return Provides(cfg.live.judge is not None, cfg.live.features is not None, "live.judge", "live.features")

    def load(self, cfg):
        return load_live(cfg)

    def spec(self, cfg, data, k, with_judge):
        live = cfg.live
        judge = None if live.judge is None or not with_judge else live.judge.model_dump()
        return LiveSpec(candidate=data.live[k].model_dump(), judge=judge, loss=live.loss, cache_dir=str(live.cache_dir),
                        reference=live.reference_endpoint())

    def items_words(self, n_items):
        return f"the {n_items} items of the items file"


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


SOURCE_KINDS: dict[str, SourceKind] = {}


def register_source_kind(kind: SourceKind | type[SourceKind]) -> SourceKind:
    """Add a label-source kind (an instance, or a class with a no-argument constructor) to
    :data:`SOURCE_KINDS`; from then on ``labels: {kind: NAME, ...}`` selects it. Returns the
    instance."""
    if isinstance(kind, type):
        kind = kind()
    if not isinstance(kind, SourceKind):
        raise TypeError(f"a label source kind must subclass SourceKind, got {kind!r}")
    if not isinstance(kind.name, str) or not kind.name:
        raise ValueError("a label source kind needs a non-empty name")
    if kind.name not in BUILT_IN and kind.options is None:
        raise ValueError(f"label source kind {kind.name!r}: set options (a pydantic model of its labels: keys)")
    SOURCE_KINDS[kind.name] = kind
    return kind


BUILT_IN = ("replay", "live", "python")  # the job file's data, live and source sections
for _k in (ReplayKind, LiveKind, PythonKind):
    register_source_kind(_k)


def get_source_kind(name: str) -> SourceKind:
    try:
        return SOURCE_KINDS[name]
    except KeyError:
        known = [n for n in SOURCE_KINDS if n not in BUILT_IN]
        raise ValueError(f"labels.kind must be one of the registered label sources "
                         f"({', '.join(known) or 'none registered'}), got {name!r}") from None


def source_of(cfg: RunConfig) -> SourceKind:
    """The kind of the job's label source."""
    return get_source_kind(cfg.source_kind)


__all__ = ["SOURCE_KINDS", "load_job_data", "Provides", "SourceKind", "get_source_kind", "register_source_kind", "source_of"]


def load_job_data(cfg: RunConfig) -> JobData:
    """Read, validate and arrange the job's data through its source kind: a one-line
    :class:`~certsel.errors.InputError` for anything wrong with it (a registered source's
    options, what the policy needs from it), before any Ray or MLflow work."""
    with as_input_errors():
        kind = source_of(cfg)
        if cfg.labels is None:
            return kind.load(cfg)
        cfg.check_policy_inputs(asdict(kind.provides(cfg)))  # the checks config makes for the built-in sections
        data = kind.load(cfg)
        # what the built-in loaders check, for whatever a registered source returned
        check_size(cfg, data.n_items, f"the {kind.name} source")
        check_count(cfg, len(data.names))
        if cfg.objective is not None and data.objective is None:
            missing = [c.id for c in data.live if c.objective is None]
            raise ValueError(f"objective: the {kind.name} source gives no objective for candidate(s) "
                             f"{', '.join(missing[:5])}")
        return data


from . import lm_eval_kind  # noqa: E402,F401  (registers the lm-eval source kind; lm-eval itself loads when used)
