"""The ``lm-eval`` label source kind: lm-evaluation-harness tasks run live, item by item
(:mod:`certsel.workers.lm_eval_source`), selected by ``labels: {kind: lm-eval, task: ..., candidates: [...], ...}``
(docs/lm_eval.md, 'Tasks run live').

With a ``reference`` model, each document's loss compares the candidate's score s with the reference's s_ref (score: the
metric, or 1 - metric when lower is better): with ``recovery: r`` the recovery loss (r s_ref - s + 1) / (1 + r), else
the drop max(s_ref - s, 0). A regression job's baseline is one of the candidates (or the reference): each side is its
own source under its own label identity (:class:`~certsel.workers.paired.PairedSpec`), so a baseline's documents are
evaluated once across jobs.

Everything is checked when the job's data is loaded, before any label is bought: the task exists and is one task, the
metric is computed by it, has a direction and lies in [0, 1].
"""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict, Field, field_validator

from certsel.config import LiveCandidateRef
from certsel.config.base import no_duplicates
from certsel.home import home
from certsel.workers.label_store import identity_key
from certsel.workers.lm_eval_source import LmEvalSpec, load_task, task_fingerprint, task_metric
from certsel.workers.paired import PairedSpec

from .jobdata import JobData, listed
from .source_kind import Provides, SourceKind, register_source_kind


class LmEvalCandidate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)
    model: str = Field("local-chat-completions", description="a registered lm-eval model (lm_eval --model)")
    model_args: str = Field(description="lm_eval --model_args, e.g. base_url=...,model=...,tokenizer_backend=None")
    batch_size: int = Field(1, ge=1)
    # ways of asking the same model can be the candidates: these override the task-level keys
    num_fewshot: int | None = Field(None, ge=0)
    apply_chat_template: bool | None = None
    objective: float | None = None


class LmEvalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    task: str = Field(min_length=1)
    include_path: str | None = None
    metric: str | None = None
    filter: str | None = None
    num_fewshot: int | None = Field(None, ge=0)
    apply_chat_template: bool = False
    cache_dir: str = Field(default_factory=lambda: str(home() / "cache"))  # certsel's home unless the job says
    candidates: list[LmEvalCandidate] = Field(min_length=1)
    # a model the candidates are compared with, document by document (recovery or drop)
    reference: LmEvalCandidate | None = None

    @field_validator("candidates")
    @classmethod
    def _unique(cls, v):
        no_duplicates([c.id for c in v], "candidate ids")
        return v


class LmEvalKind(SourceKind):
    name = "lm-eval"
    options = LmEvalOptions

    def provides(self, cfg):
        return Provides(False, False, "a judge (the lm-eval source has none)", "features (the lm-eval source has none)",
                        reference=self.settings(cfg).reference is not None, paired=True)

    def load(self, cfg):
        opts = self.settings(cfg)
        task = load_task(opts.task, opts.include_path)
        metric, higher = task_metric(task, opts.metric)
        cands = listed(cfg, [LiveCandidateRef(id=c.id, objective=c.objective) for c in opts.candidates],
                       "labels.candidates")
        if cfg.regression is not None:  # the baseline is what the others are compared with, not gated itself
            self._baseline(opts, cfg.regression.baseline)
            cands = tuple(c for c in cands if c.id != cfg.regression.baseline)
        return JobData(table=None, features=None, fingerprint=task_fingerprint(task), live=cands,
                       function=(metric, higher), n_source_items=len(task.eval_docs))

    @staticmethod
    def _baseline(opts, name: str) -> LmEvalCandidate:
        """A regression job's baseline: a candidate, or the reference of that id."""
        models = {c.id: c for c in opts.candidates}
        if opts.reference is not None:
            if opts.reference.id != name:
                raise ValueError(f"labels.reference: {opts.reference.id!r} is not the regression's baseline {name!r}; "
                                 "a regression job's reference is its baseline (leave labels.reference out)")
            models[name] = opts.reference
        if name not in models:
            raise ValueError(f"regression.baseline: {name!r} is not among labels.candidates "
                             f"({', '.join(list(models)[:8])}) or labels.reference")
        return models[name]

    def spec(self, cfg, data, k, with_judge):
        opts = self.settings(cfg)
        c = next(c for c in opts.candidates if c.id == data.names[k])
        if cfg.regression is not None:  # each side alone, kept under its own identity
            reg = cfg.regression
            base = self._model_spec(opts, self._baseline(opts, reg.baseline), data)
            identity = None if cfg.state.store is None else identity_key(self._identity(base, data))
            return PairedSpec(self._model_spec(opts, c, data), base, reg.claim, reg.baseline, identity)
        ref = None if opts.reference is None else self._model_spec(opts, opts.reference, data)
        return dataclasses.replace(self._model_spec(opts, c, data), reference=ref,
                                   recovery=None if cfg.recovery is None else cfg.recovery.at_least)

    @staticmethod
    def _model_spec(opts, c, data) -> LmEvalSpec:
        metric, higher = data.function
        return LmEvalSpec(candidate=c.id, task=opts.task, include_path=opts.include_path, model=c.model,
                          model_args=c.model_args, metric=metric, higher_is_better=higher,
                          apply_chat_template=opts.apply_chat_template if c.apply_chat_template is None
                          else c.apply_chat_template,
                          num_fewshot=opts.num_fewshot if c.num_fewshot is None else c.num_fewshot,
                          filter=opts.filter, cache_dir=opts.cache_dir, batch_size=c.batch_size)

    def label_identity(self, cfg, data, k):
        # the model, every request setting, the task's content, the reference and the claim; a local checkpoint
        # by its files too (one rebuilt at the same path is another model)
        spec = self.spec(cfg, data, k, False)
        if isinstance(spec, PairedSpec):  # a regression candidate's own labels: those of the model alone
            return self._identity(spec.candidate, data)
        return self._identity(spec, data)

    def claim_identity(self, cfg, data, k):
        spec = self.spec(cfg, data, k, False)
        if isinstance(spec, PairedSpec):  # the candidate's and the baseline's models (the margin is in alpha)
            return {**self._identity(spec.candidate, data),
                    "regression": {"baseline": self._identity(spec.baseline_spec, data)}}
        return self._identity(spec, data)

    def mirror_claim_identity(self, cfg, data, k):
        spec = self.spec(cfg, data, k, False)
        if not isinstance(spec, PairedSpec):
            return None
        return {**self._identity(spec.baseline_spec, data),
                "regression": {"baseline": self._identity(spec.candidate, data)}}

    def legacy_claim_identity(self, cfg, data, k):
        # certsel 0.2's: model_args as written, a local checkpoint's files by modification time
        spec = self.spec(cfg, data, k, False)
        if isinstance(spec, PairedSpec):
            return {**self._identity(spec.candidate, data, legacy=True),
                    "regression": {"baseline": self._identity(spec.baseline_spec, data, legacy=True)}}
        return self._identity(spec, data, legacy=True)

    @staticmethod
    def _identity(spec: LmEvalSpec, data, legacy: bool = False) -> dict:
        # what decides a loss, as measured: the model's arguments parsed (not their spelling), a local checkpoint by
        # the content of its files (not where or when they were written)
        out = dataclasses.asdict(spec)
        for one in (out, out["reference"]):
            if one is not None:
                for key in ("candidate", "cache_dir", "batch_size"):  # names and plumbing, not what decides a loss
                    one.pop(key)
                if legacy:
                    one["checkpoint_files"] = local_checkpoint(one["model_args"], by="mtime")
                else:
                    one["checkpoint_files"] = local_checkpoint(one["model_args"])
                    one["model_args"] = parsed_args(one["model_args"])
        return {"source": "lm-eval", "task": data.fingerprint, **out}

    def loss_words(self, cfg):
        opts = self.settings(cfg)
        if opts.reference is None or cfg.recovery is not None or cfg.regression is not None:  # words of their own
            return None
        return (f"drop against the reference model {opts.reference.id!r} (per document: max(s_ref - s, 0), s the "
                f"task's metric as a score)")

    def items_words(self, n_items):
        return f"the {n_items} documents of the lm-eval task"


def parsed_args(model_args: str) -> dict[str, str]:
    """``model_args`` as lm-eval reads it (``key=value`` pairs split on commas), keys and values stripped: one set of
    arguments however it is spaced or ordered. A checkpoint's path is left out when the checkpoint is local (its
    content is its identity, :func:`local_checkpoint`)."""
    out = {}
    for part in model_args.split(","):
        key, _, value = part.partition("=")
        if key.strip():
            out[key.strip()] = value.strip()
    if _checkpoint_path(model_args) is not None:
        for key in _PATH_KEYS:
            out.pop(key, None)
    return dict(sorted(out.items()))


_PATH_KEYS = ("pretrained", "path", "model")  # the model_args that name a checkpoint


def _checkpoint_path(model_args: str):
    import pathlib

    for part in model_args.split(","):
        key, _, value = part.partition("=")
        if key.strip() in _PATH_KEYS and value.strip():
            p = pathlib.Path(value.strip()).expanduser()
            if p.is_file() or p.is_dir():
                return p
    return None


_HASHES: dict[tuple, str] = {}  # (path, size, mtime_ns, inode) -> sha256: a checkpoint is hashed once per process


def _content(f) -> str:
    import hashlib

    st = f.stat()
    key = (str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _HASHES:
        with open(f, "rb") as fh:
            _HASHES[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    return _HASHES[key]


def local_checkpoint(model_args: str, by: str = "content") -> list | None:
    """The files of a local checkpoint named in ``model_args`` (``pretrained=``, ``path=`` or ``model=`` a folder or
    file on this machine): (name, size, sha256) of each, so that a checkpoint copied or written again with the same
    weights is the same model and one rebuilt with other weights, even at the same path, is another. ``by="mtime"``:
    the modification time in place of the hash (certsel 0.2's identity). None for a model that is not a local path (a
    served model, a hub id: its arguments name it)."""
    p = _checkpoint_path(model_args)
    if p is None:
        return None
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    return [[str(f.relative_to(p) if f != p else f.name), f.stat().st_size,
             f.stat().st_mtime_ns if by == "mtime" else _content(f)] for f in files]


register_source_kind(LmEvalKind)
