"""The label-source sections of a job file: ``data`` (a recorded loss table), ``live`` (models behind
OpenAI-compatible servers), ``source`` (a Python function) and ``labels`` (a registered source kind)."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator


from certsel.home import home

from .base import Strict, no_duplicates


class DataConfig(Strict):
    path: pathlib.Path
    candidate: str = "candidate"
    item: str = "item"
    human: str = "loss_human"
    judge: str | None = None
    order: str | None = None
    features: pathlib.Path | None = None  # item embeddings (Parquet: item, e0..e{d-1}) for Cer-Eval
    # what the human loss measures, in words ("accuracy drop against full precision"); wording only, not identity
    measures: str | None = Field(None, min_length=1, max_length=200)
    # recovery jobs: per-item scores in [0, 1] (higher is better) of candidate and reference, human and judge
    score: str | None = None
    reference: str | None = None
    judge_score: str | None = None
    judge_reference: str | None = None

    @property
    def recovery_columns(self) -> dict[str, str]:
        """The score columns a recovery job reads, by key."""
        keys = ("score", "reference", "judge_score", "judge_reference")
        return {f"data.{k}": getattr(self, k) for k in keys if getattr(self, k) is not None}


class ServeConfig(Strict):
    """A model certsel serves itself (``vllm serve`` in a Ray actor, :mod:`certsel.workers.serving`); endpoints
    refer to it as ``server: NAME``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: str = Field(min_length=1)  # a local model directory or a model id the server can load
    served_model_name: str | None = None  # default: name
    args: list[str] = Field(default_factory=list)  # more `vllm serve` arguments, e.g. [--dtype, bfloat16]
    python: str | None = None  # the interpreter with vLLM; default CERTSEL_VLLM_PYTHON, else certsel's own
    module: str = "vllm.entrypoints.openai.api_server"
    num_gpus: float = Field(0, ge=0)
    num_cpus: float = Field(0, ge=0)
    resources: dict[str, float] = Field(default_factory=dict)  # custom Ray resources: which nodes may host it
    host: str | None = None  # default: the Ray node's IP address
    port: int | None = Field(None, ge=1, le=65535)  # default: a free port
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout: float = Field(900.0, gt=0)

    @property
    def served(self) -> str:
        return self.served_model_name or self.name


class EndpointConfig(Strict):
    """An OpenAI-compatible server and one of its models: ``base_url`` and ``model``, or ``server``, a ``live.serve``
    entry's name (``model`` then defaults to its served name)."""

    base_url: str | None = Field(None, pattern=r"^https?://")
    server: str | None = None
    model: str | None = Field(None, min_length=1)
    api_key_env: str | None = None  # the key is read from this environment variable, never from the file
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0)
    concurrency: int = Field(16, ge=1)
    sampling: dict = Field(default_factory=dict)
    # the server's name in the response cache (default: base_url; for `server:`, the served model and its
    # arguments, so a restarted server on a new port hits the cache)
    cache_key: str | None = None

    @model_validator(mode="after")
    def _one_address(self):
        if (self.base_url is None) == (self.server is None):
            raise ValueError("give exactly one of base_url (a running server) or server (a live.serve name)")
        if self.base_url is not None and self.model is None:
            raise ValueError("model: the served model name is required with base_url")
        return self


class _Templated(EndpointConfig):
    """An endpoint sent each item through ``template`` (which must contain ``{question}``)."""

    template: str = "{question}"

    @field_validator("template")
    @classmethod
    def _placeholder(cls, v):
        if "{question}" not in v:
            raise ValueError("must contain {question}")
        return v


class LabelsConfig(BaseModel):
    """A registered label source: ``kind`` and its options (checked by the kind when the data is loaded)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: str = Field(min_length=1)

    @property
    def options(self) -> dict:
        return dict(self.model_extra or {})


class LiveCandidateRef(Strict):
    """A candidate of a python source: its id (passed to the function) and objective."""

    id: str = Field(min_length=1)
    objective: float | None = None  # e.g. model size in GB or prompt length

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v):
        return {"id": v} if isinstance(v, str) else v


class LiveCandidate(_Templated):
    id: str = Field(min_length=1)
    objective: float | None = None  # e.g. model size in GB or prompt length


class ReferenceConfig(_Templated):
    """The model every candidate is compared with (``live.reference``) when it is not a candidate (e.g. the
    full-precision checkpoint next to its quantized versions)."""


class JudgeConfig(EndpointConfig):
    # answer: the judge answers itself; grade: it grades the candidate's answer; pairwise: it compares it with the
    # reference model's (live.reference)
    mode: Literal["answer", "grade", "pairwise"] = "answer"
    template: str | None = None
    scale: tuple[float, float] = (0.0, 10.0)
    # grade / pairwise: the verdict constrained to the scale (or A/B) by structured outputs (vLLM); a server that
    # refuses them is asked without and its verdicts are parsed
    constrained: bool = True
    # grade: a yes/no verdict, loss P(no) from token probabilities; pairwise: loss P(the reference's letter)
    soft: bool = False
    # pairwise: both orders (candidate as A, then as B: position bias cancels in the mean) or one per item, by its id
    order: Literal["both", "random"] = "both"

    @model_validator(mode="after")
    def _soft_grades(self):
        if self.soft and self.mode == "answer":
            raise ValueError("judge.soft needs judge.mode 'grade' or 'pairwise' (a verdict with token probabilities)")
        if self.order != "both" and self.mode != "pairwise":
            raise ValueError("judge.order applies to judge.mode 'pairwise' only")
        if self.mode == "pairwise" and self.template is not None:
            missing = [f for f in ("{question}", "{answer_a}", "{answer_b}") if f not in self.template]
            if missing:
                raise ValueError(f"judge.template of a pairwise judge must contain {', '.join(missing)}")
        return self


class FeaturesConfig(_Templated):
    """Item embeddings from a ``/v1/embeddings`` endpoint (Cer-Eval's partition features); ``template`` makes the
    embedded text."""


class LiveConfig(Strict):
    """Candidates served by OpenAI-compatible servers (vLLM), scored against references."""

    items: pathlib.Path  # Parquet or JSON Lines with id, question, answers (list) or answer
    loss: Literal["exact_match", "normalized_exact_match", "contains", "token_f1", "numeric"] = "normalized_exact_match"
    # the response cache (one SQLite file shared by the job's actors): certsel's home unless the job says
    cache_dir: pathlib.Path = Field(default_factory=lambda: home() / "cache")
    candidates: list[LiveCandidate] = Field(min_length=1)
    judge: JudgeConfig | None = None
    # losses relative to a reference model (a candidate's id, or an endpoint): an item's loss is
    # max(score(reference) - score(candidate), 0), scored by the human references or the judge
    reference: Annotated[Annotated[str, Tag("id")] | Annotated[ReferenceConfig, Tag("endpoint")],
                         Discriminator(lambda v: "id" if isinstance(v, str) else "endpoint")] | None = None
    features: FeaturesConfig | None = None  # item embeddings, for Cer-Eval
    serve: list[ServeConfig] = Field(default_factory=list)  # models certsel starts itself

    @field_validator("candidates")
    @classmethod
    def _unique_ids(cls, v):
        no_duplicates([c.id for c in v], "candidate ids")
        return v

    @model_validator(mode="after")
    def _servers(self):
        no_duplicates([s.name for s in self.serve], "server names in serve")
        served = {s.name: s.served for s in self.serve}
        endpoints = [(f"candidate {c.id!r}", c) for c in self.candidates]
        endpoints += [(k, e) for k, e in (("judge", self.judge), ("features", self.features)) if e is not None]
        if isinstance(self.reference, ReferenceConfig):
            endpoints.append(("reference", self.reference))
        elif self.reference is not None and self.reference not in {c.id for c in self.candidates}:
            raise ValueError(f"reference {self.reference!r} is not a candidate id; give a candidate's id or an "
                             "endpoint (base_url + model, or server)")
        if self.judge is not None and self.judge.mode == "pairwise" and self.reference is None:
            raise ValueError("judge.mode 'pairwise' compares each candidate's answer with the reference model's: "
                             "set live.reference (a candidate's id, or an endpoint)")
        for what, ep in endpoints:
            if ep.server is not None and ep.server not in served:
                raise ValueError(f"{what}: server {ep.server!r} is not in live.serve "
                                 f"({', '.join(served) or 'which is empty'})")
        return self

    def resolved(self) -> LiveConfig:
        """Every ``server: NAME`` endpoint given the served model name and a cache key naming what it serves (not
        its URL, which changes at every start)."""
        served = {s.name: s for s in self.serve}

        def fix(ep):
            if ep is None or ep.server is None:
                return ep
            s = served[ep.server]
            key = ep.cache_key or "serve:" + json.dumps([s.model, s.served, s.module, s.args], separators=(",", ":"))
            return ep.model_copy(update={"model": ep.model or s.served, "cache_key": key})

        ref = fix(self.reference) if isinstance(self.reference, ReferenceConfig) else self.reference
        return self.model_copy(update={"candidates": [fix(c) for c in self.candidates], "judge": fix(self.judge),
                                       "features": fix(self.features), "reference": ref})

    def reference_endpoint(self) -> dict | None:
        """The reference model's endpoint dict (a candidate's, or the ``reference`` section's); None without one."""
        if self.reference is None:
            return None
        if isinstance(self.reference, ReferenceConfig):
            return self.reference.model_dump()
        return next(c for c in self.candidates if c.id == self.reference).model_dump()


class PythonSourceConfig(Strict):
    """Labels from a user function ``module:function`` (:mod:`certsel.workers.python_source`), called as
    ``f(candidate, items, role)``."""

    python: str
    items: int = Field(gt=0, description="number of items; the function is asked about indices 0..items-1")
    candidates: list[LiveCandidateRef] = Field(min_length=1)
    judge: bool = False  # the function also answers role "judge"
    features: pathlib.Path | None = None  # item embeddings (Parquet: item, e0..e{d-1}) for Cer-Eval
    # what the human loss measures, in words (as in DataConfig); wording only, not identity
    measures: str | None = Field(None, min_length=1, max_length=200)
    retries: int = Field(2, ge=0, description="calls retried after an exception before the source fails")

    @field_validator("python")
    @classmethod
    def _module_function(cls, v):
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", v):
            raise ValueError(f"source.python must name a function as 'module:function' (e.g. my_labels:losses), "
                             f"got {v!r}")
        return v

    @field_validator("candidates")
    @classmethod
    def _unique_ids(cls, v):
        no_duplicates([c.id for c in v], "candidate ids")
        return v
