"""A live label source that runs lm-evaluation-harness tasks: ``labels: {kind: lm-eval, ...}``.

lm-eval's task definition (documents, prompt, request type, filters, metrics) is used as it is: for the items a policy
asks for, exactly those documents (``evaluate(..., samples={task: [doc ids]})``) run through the candidate's lm-eval
model (e.g. ``local-completions`` against a vLLM server), and each document's metric becomes a loss: 1 - metric when
higher is better, else the metric. Only new documents are sent; lm-eval's ``CachingLM`` (a SQLite file per candidate in
``cache_dir``) answers repeats across runs, and the label log keeps every label.

Only metrics known to lie in [0, 1] per document are accepted (:data:`BOUNDED_METRICS`): a loss outside [0, 1] would
void the certificate.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import pathlib
from dataclasses import dataclass, field

import numpy as np

from .contracts import SourceError

# per-document metrics of lm-eval that are 0/1 or a share: safe as losses after 1 - x
BOUNDED_METRICS = frozenset({"acc", "acc_norm", "acc_mutual_info", "exact_match", "f1", "em", "contains",
                             "mc1", "mc2", "acc_stderr_free"})


def _quiet() -> None:
    for name in ("lm-eval", "lm_eval", "datasets", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)


def load_task(task: str, include_path: str | None):
    """lm-eval's task object (from its registry, or a task config under ``include_path``).

    A task under ``include_path`` is looked up there alone first: indexing lm-eval's whole registry takes about 10 s, in
    the driver and every worker. Only a task not found there, or one whose config needs the registry (an ``include:`` of
    a built-in template), goes through the full index, which also gives the errors.
    """
    _quiet()
    from lm_eval.tasks import TaskManager

    if include_path:
        loaded = None
        try:
            own = TaskManager(include_path=include_path, include_defaults=False)
            if task in own.all_tasks:
                loaded = own.load([task])
        except Exception:  # noqa: BLE001 -- the config needs the registry: the full index decides
            loaded = None
        if loaded is not None and loaded["tasks"].get(task) is not None:
            return _one_task(loaded, task)
    manager = _full_index(include_path)
    if task not in manager.all_tasks:
        where = f" or under {include_path}" if include_path else ""
        raise ValueError(f"labels.task: unknown lm-eval task {task!r} (not in lm-eval's registry{where})")
    return _one_task(manager.load([task]), task)


@functools.lru_cache(maxsize=4)
def _full_index(include_path: str | None):
    """lm-eval's whole task index (built once per process: the driver asks for it more than once)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path) if include_path else TaskManager()


def _one_task(loaded: dict, task: str):
    obj = loaded["tasks"].get(task)
    if obj is None or loaded.get("groups") or not hasattr(obj, "eval_docs"):
        raise ValueError(f"labels.task: {task!r} is a group of lm-eval tasks; give one task")
    return obj


def task_metric(obj, metric: str | None) -> tuple[str, bool]:
    """The metric (the task's only one when not given) and whether higher is better; one-line errors for a metric the
    task does not compute, without a direction, or not in [0, 1]."""
    directions = dict(obj.higher_is_better() or {})
    if metric is None:
        if len(directions) != 1:
            raise ValueError(f"labels.metric: task {obj.config.task!r} computes {', '.join(sorted(directions))}; "
                             "choose one")
        metric = next(iter(directions))
    if metric not in directions:
        raise ValueError(f"labels.metric: task {obj.config.task!r} does not compute {metric!r} "
                         f"(it computes {', '.join(sorted(directions))})")
    if not isinstance(directions[metric], bool):
        raise ValueError(f"labels.metric: {metric!r} of task {obj.config.task!r} is not marked higher- or "
                         "lower-is-better")
    if metric not in BOUNDED_METRICS:
        raise ValueError(f"labels.metric: {metric!r} is not known to lie in [0, 1] per document (certsel takes "
                         f"{', '.join(sorted(BOUNDED_METRICS))}); turn runs of other metrics into a table of "
                         "scores in [0, 1] (certsel lm-eval-table) after rescaling them")
    return metric, directions[metric]


def task_fingerprint(obj) -> str:
    """What the task is, for the job's fingerprint: its config and its documents."""
    h = hashlib.sha256(json.dumps(obj.dump_config() if hasattr(obj, "dump_config") else str(obj.config),
                                  sort_keys=True, default=str).encode())
    for doc in obj.eval_docs:
        h.update(json.dumps(doc, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class LmEvalSpec:
    """One candidate's lm-eval source, shipped to its worker (see the module docstring)."""

    candidate: str
    task: str
    include_path: str | None
    model: str
    model_args: str
    metric: str
    higher_is_better: bool
    apply_chat_template: bool
    num_fewshot: int | None
    filter: str | None
    cache_dir: str
    batch_size: int = 1
    gen_kwargs: dict = field(default_factory=dict)
    # a model compared with the candidate on each document: the loss is then the recovery loss
    # (r s_ref - s + 1) / (1 + r) when ``recovery`` is r, else the drop max(s_ref - s, 0)
    reference: LmEvalSpec | None = None
    recovery: float | None = None

    def build(self, arrays, rows):
        return LmEvalSource(self)


class LmEvalSource:
    """The :class:`~certsel.workers.contracts.LabelSource` of one candidate on one lm-eval task."""

    def __init__(self, spec: LmEvalSpec):
        self.spec = spec
        self._task = load_task(spec.task, spec.include_path)
        if spec.num_fewshot is not None:
            self._task.set_config(key="num_fewshot", value=spec.num_fewshot)
        self._docs = self._task.eval_docs
        self._lm = None
        self._ref = None if spec.reference is None else LmEvalSource(spec.reference)
        self._loss: dict[int, float] = {}
        self.requests = 0
        self.log: list = []  # (items, role, losses) of every label bought, in order

    @property
    def n_items(self) -> int:
        return len(self._docs)

    @property
    def human_labels(self) -> int:
        return len(self._loss)

    @property
    def judge_labels(self) -> int:
        return 0

    def _model(self):
        if self._lm is None:
            from lm_eval.api.model import CachingLM
            from lm_eval.api.registry import get_model

            s = self.spec
            lm = get_model(s.model).create_from_arg_string(s.model_args, {"batch_size": s.batch_size})
            key = hashlib.sha256(json.dumps([s.model, s.model_args, s.task, s.apply_chat_template, s.num_fewshot])
                                 .encode()).hexdigest()[:16]
            path = pathlib.Path(s.cache_dir) / "lm-eval" / f"{s.candidate}-{key}.db"
            self._lm = CachingLM(lm, str(path))
        return self._lm

    def _run(self, docs: list[int]) -> dict[int, float]:
        """lm-eval on these documents: doc id -> loss."""
        from lm_eval.evaluator import evaluate

        s = self.spec
        # sorted: lm-eval 0.4.13 labels the documents of an unsorted `samples` list with the wrong doc_id
        # (the i-th smallest id on the i-th document given), so each row's document is checked below too
        docs = sorted(docs)
        try:
            res = evaluate(self._model(), {s.task: self._task}, samples={s.task: docs}, bootstrap_iters=0,
                           log_samples=True, apply_chat_template=s.apply_chat_template, verbosity="WARNING")
        except Exception as exc:  # a server that fails for good, a model that cannot be built
            raise SourceError(f"lm-eval task {s.task!r}, candidate {s.candidate!r}: {type(exc).__name__}: {exc}") from exc
        out = {}
        for row in res["samples"][s.task]:
            if s.filter is not None and row.get("filter") != s.filter:
                continue
            v = row[s.metric]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise SourceError(f"lm-eval task {s.task!r}: metric {s.metric!r} of doc {row['doc_id']} is {v!r}, "
                                  "not in [0, 1]")
            doc = int(row["doc_id"])
            if json.dumps(row["doc"], sort_keys=True, default=str) != json.dumps(self._docs[doc], sort_keys=True,
                                                                                  default=str):
                raise SourceError(f"lm-eval task {s.task!r}: the result logged as doc {doc} is of another document")
            if doc in out:
                raise SourceError(f"lm-eval task {s.task!r} logs doc {doc} under several filters; set labels.filter")
            out[doc] = 1.0 - float(v) if s.higher_is_better else float(v)
        missing = sorted(set(docs) - set(out))
        if missing:
            raise SourceError(f"lm-eval task {s.task!r} returned no {s.metric!r} for doc(s) {missing[:5]}")
        return out

    def _losses(self, docs: list[int]) -> dict[int, float]:
        """Each document's loss: the candidate's own, or against the reference's score."""
        got = self._run(docs)
        if self._ref is None:
            return got
        ref = self._ref._run(docs)
        self.requests += len(docs)  # the reference's evaluations
        s = np.array([1.0 - got[d] for d in docs])  # back to scores
        s_ref = np.array([1.0 - ref[d] for d in docs])
        if self.spec.recovery is not None:
            from certsel.policies.recovery import Recovery

            loss = Recovery(self.spec.recovery).losses(s, s_ref)
        else:
            loss = np.maximum(s_ref - s, 0.0)
        return dict(zip(docs, loss.tolist(), strict=True))

    def human(self, items) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        new = [i for i in dict.fromkeys(items.tolist()) if i not in self._loss]
        if new:
            got = self._losses(new)
            self._loss.update(got)
            self.requests += len(new)
            self.log.append((np.array(new, dtype=np.int64), "human", np.array([got[i] for i in new])))
        return np.array([self._loss[i] for i in items.tolist()], dtype=np.float64)

    def judge(self, items) -> np.ndarray:
        raise SourceError("the lm-eval source has no judge")
