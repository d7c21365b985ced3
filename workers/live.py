"""A live label source: a candidate model answers through an OpenAI-compatible server, its answers are scored against
human references, and a judge model gives synthetic labels.

It has the interface of :class:`certsel.workers.replay.ReplaySource`. Human loss: ``loss(candidate answer, references)``
(:data:`certsel.workers.losses.LOSSES`). Judge loss, by ``judge_mode``: ``"answer"``, the judge's own answer is the
synthetic reference (R-AutoEval+'s setting); ``"grade"``, ``1 - score`` of a rubric grade
(:func:`certsel.workers.losses.parse_score`); ``"pairwise"`` (with a reference model), the probability that the
candidate's answer loses to the reference's, whose human loss is then :func:`certsel.workers.losses.preference_loss`. An
unparsable verdict is asked again with another sampling seed (a new request, so the cache does not replay it), then
fails with :class:`SourceError`; it never counts as a loss of 0 or 1. Details: docs/live.md, 'What a label is'.
"""

from __future__ import annotations

import hashlib
import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from certsel.policies.recovery import Recovery
from certsel.policies.regression import Regression

from .losses import (
    LOSSES,
    UnparsableVerdict,
    answer_loss,
    pairwise_verdict,
    parse_score,
    preference_loss,
    relative_loss,
    soft_verdict,
)
from .contracts import SourceError

if TYPE_CHECKING:  # the client and its retries (tenacity, asyncio) load when a live job makes one, not with a table's
    from .openai_source import OpenAIClient, ResponseCache


@dataclass(frozen=True)
class Item:
    """One evaluation item: an id, the question, the human reference answers."""

    id: str
    question: str
    references: tuple[str, ...]


DEFAULT_SOFT_PROMPT = (
    "You are grading an answer to a question.\nQuestion: {question}\nAnswer: {answer}\n"
    "Is the answer correct? Reply with yes or no."
)
DEFAULT_PAIRWISE_PROMPT = (
    "You are comparing two answers to a question.\nQuestion: {question}\nAnswer A: {answer_a}\n"
    "Answer B: {answer_b}\nWhich answer is better? Reply with A or B."
)
DEFAULT_GRADE_PROMPT = (
    "You are grading an answer to a question.\nQuestion: {question}\nAnswer: {answer}\n"
    "Is the answer correct? Reply with 'Score: X' where X is an integer from 0 (wrong) to 10 (correct)."
)


class LiveSource:
    """Labels for one candidate (``target`` + ``template``) on ``items``; see the module docstring."""

    def __init__(self, items: list[Item], target: OpenAIClient, template: str = "{question}", *,
                 loss: str = "normalized_exact_match", sampling: dict | None = None,
                 judge: OpenAIClient | None = None, judge_mode: str = "answer", judge_template: str | None = None,
                 judge_sampling: dict | None = None, grade_scale=(0, 10), verdict_attempts: int = 3,
                 reference: OpenAIClient | None = None, reference_template: str = "{question}",
                 reference_sampling: dict | None = None, judge_constrained: bool = True, judge_soft: bool = False,
                 recovery: float | None = None, judge_order: str = "both", preference: bool | None = None,
                 regression: Regression | None = None):
        if "{question}" not in template:
            raise ValueError("the prompt template must contain {question}")
        if judge_mode not in ("answer", "grade", "pairwise"):
            raise ValueError(f"judge_mode must be 'answer', 'grade' or 'pairwise', got {judge_mode!r}")
        if judge_mode == "pairwise" and reference is None:
            raise ValueError("a pairwise judge compares the candidate's answer with the reference model's: "
                             "it needs a reference")
        if judge_order not in ("both", "random"):
            raise ValueError(f"judge_order must be 'both' or 'random', got {judge_order!r}")
        self.judge_order = judge_order
        # a pairwise job's losses against the reference are "does it lose", whether or not its policy asks the judge
        self.preference = judge_mode == "pairwise" if preference is None else preference
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {loss!r}")
        self.items, self.target, self.template, self.loss = list(items), target, template, loss
        self.sampling = {"temperature": 0.0, **(sampling or {})}
        self.judge_client, self.judge_mode = judge, judge_mode
        if judge_soft and judge_mode == "answer":
            raise ValueError("a soft judge (token probabilities of its verdict) needs judge_mode 'grade' or 'pairwise'")
        self.judge_soft = judge_soft
        # structured outputs (the verdict constrained to the scale) until the server refuses them
        self._constrain = judge_constrained
        default = DEFAULT_PAIRWISE_PROMPT if judge_mode == "pairwise" else \
            DEFAULT_SOFT_PROMPT if judge_soft else DEFAULT_GRADE_PROMPT
        self.judge_template = judge_template or (template if judge_mode == "answer" else default)
        self.judge_sampling = {"temperature": 0.0, **(judge_sampling or {})}
        self.grade_scale, self.verdict_attempts = grade_scale, verdict_attempts
        # with a reference model: the drop (default), the recovery loss at this r (recovery jobs), or the paired loss
        # against the baseline (regression jobs)
        self.recovery = None if recovery is None else Recovery(recovery)
        if regression is not None and (reference is None or self.preference or recovery is not None):
            raise ValueError("a regression against a baseline needs the baseline as the reference, and neither a "
                             "pairwise judge nor a recovery")
        self.regression = regression
        if reference is not None and "{question}" not in reference_template:
            raise ValueError("the reference's prompt template must contain {question}")
        self.reference, self.reference_template = reference, reference_template
        self.reference_sampling = {"temperature": 0.0, **(reference_sampling or {})}
        self._answers: dict[int, str] = {}
        self._reference_answers: dict[int, str] = {}
        self._human: set[int] = set()
        self._judged: set[int] = set()
        self.log: list = []  # (items, role, losses) of every label bought, in order

    # -- counters (the ReplaySource interface) -------------------------------------------
    @property
    def n_items(self) -> int:
        return len(self.items)

    @property
    def human_labels(self) -> int:
        return len(self._human)

    @property
    def judge_labels(self) -> int:
        return len(self._judged)

    @property
    def requests(self) -> int:
        return sum(c.stats.sent for c in (self.target, self.judge_client, self.reference) if c is not None)

    @property
    def baseline_labels(self) -> tuple[int, int] | None:
        """A regression job's baseline labels, (bought, reused): its answers scored on every item the candidate's
        were; none from the label store (a served model is asked, its answers cached by the response cache)."""
        return None if self.regression is None else (self.human_labels, 0)

    # -- labels ----------------------------------------------------------------------------
    def _generate(self, client, template, sampling, store: dict, items) -> list[str]:
        idx = [int(i) for i in items]
        new = [i for i in dict.fromkeys(idx) if i not in store]
        if new:
            prompts = [[{"role": "user", "content": template.format(question=self.items[i].question)}] for i in new]
            store.update(zip(new, client.chat(prompts, **sampling), strict=True))
        return [store[i] for i in idx]

    def answers(self, items) -> list[str]:
        """The candidate's answers (generated once per item; cached on disk by the client)."""
        return self._generate(self.target, self.template, self.sampling, self._answers, items)

    def reference_answers(self, items) -> list[str]:
        """The reference model's answers (``live.reference``; shared through the response cache)."""
        return self._generate(self.reference, self.reference_template, self.reference_sampling,
                              self._reference_answers, items)

    def human(self, items) -> np.ndarray:
        """Human losses: the candidate's answers against the human references; with a reference model, against the
        reference's answer on the item (:meth:`_against_reference`)."""
        idx = [int(i) for i in items]
        refs = [list(self.items[i].references) for i in idx]
        out = np.array([answer_loss(self.loss, a, r) for a, r in zip(self.answers(idx), refs, strict=True)],
                       dtype=np.float64)
        if self.reference is not None:
            base = [answer_loss(self.loss, a, r) for a, r in zip(self.reference_answers(idx), refs, strict=True)]
            out = self._against_reference(out, base)
        self._record(idx, "human", out, self._human)
        return out

    def _against_reference(self, candidate, reference) -> np.ndarray:
        """The candidate's loss against the reference model's on the same items: the drop max(loss - loss_ref, 0)
        (:func:`~certsel.workers.losses.relative_loss`); with a pairwise judge, whether it loses
        (:func:`~certsel.workers.losses.preference_loss`); in a recovery job (r s_ref - s + 1)/(1 + r) with score = 1 -
        loss."""
        if self.preference:
            return preference_loss(candidate, reference)
        if self.regression is not None:
            return self.regression.losses(np.asarray(candidate, dtype=np.float64),
                                          np.asarray(reference, dtype=np.float64))
        if self.recovery is None:
            return relative_loss(candidate, reference)
        return self.recovery.losses(1.0 - np.asarray(candidate, dtype=np.float64),
                                    1.0 - np.asarray(reference, dtype=np.float64))

    def _record(self, idx, role, losses, done: set) -> None:
        new = [k for k, i in enumerate(idx) if i not in done]
        if new:
            self.log.append((np.array([idx[k] for k in new], dtype=np.int64), role, losses[new]))
        done.update(idx)

    def judge(self, items) -> np.ndarray:
        """Judge losses (the settings: module docstring)."""
        if self.judge_client is None:
            raise ValueError("this source has no judge")
        idx = [int(i) for i in items]
        answers = self.answers(idx)
        if self.judge_mode == "answer":
            prompts = [[{"role": "user", "content": self.judge_template.format(question=self.items[i].question)}]
                       for i in idx]
            refs = self.judge_client.chat(prompts, **self.judge_sampling)
            out = np.array([answer_loss(self.loss, a, [r]) for a, r in zip(answers, refs, strict=True)])
            if self.reference is not None:  # both answers against the judge's
                base = [answer_loss(self.loss, a, [r]) for a, r in zip(self.reference_answers(idx), refs, strict=True)]
                out = self._against_reference(out, base)
        elif self.judge_mode == "pairwise":  # the judge compares the two answers itself
            out = np.array(self._preferences(idx, answers, self.reference_answers(idx)))
        else:
            out = np.array(self._grades(idx, answers))
            if self.reference is not None:  # both answers graded by the judge
                out = self._against_reference(out, self._grades(idx, self.reference_answers(idx)))
        out = np.asarray(out, dtype=np.float64)
        self._record(idx, "judge", out, self._judged)
        return out

    def _choices(self) -> list[str] | None:
        """The verdicts allowed by structured outputs: A/B (pairwise), yes/no (soft), "Score: v" per integer of an
        integer scale (at most 101), else None."""
        if not self._constrain:
            return None
        if self.judge_mode == "pairwise":
            return ["A", "B"]
        if self.judge_soft:
            return ["yes", "no"]
        lo, hi = self.grade_scale
        if float(lo).is_integer() and float(hi).is_integer() and 0 < hi - lo <= 100:
            return [f"Score: {v}" for v in range(int(lo), int(hi) + 1)]
        return None

    def _ask_judge(self, prompts, params):
        """The judge's replies, constrained to :meth:`_choices` until a server refuses structured outputs
        (HTTP 400/422): then parsed."""
        ask = self.judge_client.chat_logprobs if self.judge_soft else self.judge_client.chat
        choices = self._choices()
        if choices is None:
            return ask(prompts, **params)
        try:
            return ask(prompts, **params, structured_outputs={"choice": choices})
        except SourceError as err:
            if err.status not in (400, 422):
                raise
            self._constrain = False
            return ask(prompts, **params)

    def _verdict_loss(self, reply) -> float:
        """1 - score of a verdict, or the soft loss of a yes/no one; UnparsableVerdict if neither."""
        if self.judge_soft:
            loss = soft_verdict(reply)
            if loss is None:
                raise UnparsableVerdict(f"not a yes/no verdict: {str(reply.get('text'))[:80]!r}")
            return loss
        return 1.0 - parse_score(reply, self.grade_scale)

    def _grades(self, idx, answers) -> list[float]:
        asks = [(idx[k], {"question": self.items[idx[k]].question, "answer": answers[k]}) for k in range(len(idx))]
        return self._verdicts(asks, [self._verdict_loss] * len(asks))

    def candidate_first(self, item: int) -> list[bool]:
        """The orders a pairwise judge sees the two answers in for ``item``: both (a judge's position bias cancels in
        the mean), or one chosen by the item's id (``random``: the same in every run)."""
        if self.judge_order == "both":
            return [True, False]
        digest = hashlib.sha256(self.items[item].id.encode()).digest()
        return [bool(digest[0] & 1)]

    def _preferences(self, idx, answers, reference) -> list[float]:
        """P(the candidate's answer loses to the reference's) per item, the mean over :meth:`candidate_first`'s orders.
        """
        asks, parsers, owner = [], [], []
        for k, i in enumerate(idx):
            for first in self.candidate_first(i):
                a, b = (answers[k], reference[k]) if first else (reference[k], answers[k])
                asks.append((i, {"question": self.items[i].question, "answer_a": a, "answer_b": b}))
                parsers.append(lambda reply, first=first: pairwise_verdict(reply, first, self.judge_soft))
                owner.append(k)
        losses = np.zeros(len(idx))
        counts = np.bincount(owner, minlength=len(idx))
        np.add.at(losses, owner, self._verdicts(asks, parsers))
        return (losses / counts).tolist()

    def _verdicts(self, asks, parsers) -> list[float]:
        """The judge's parsed verdicts on ``asks`` ((item, template fields) pairs); an unparsable one is asked again
        with another sampling seed up to ``verdict_attempts`` times, then :class:`SourceError`."""
        losses: dict[int, float] = {}
        pending = list(range(len(asks)))
        for attempt in range(self.verdict_attempts):
            if not pending:
                break
            params = dict(self.judge_sampling)
            if attempt:  # a new request: the cached unparsable verdict is not replayed
                params["seed"] = attempt
            prompts = [[{"role": "user", "content": self.judge_template.format(**asks[k][1])}] for k in pending]
            verdicts = self._ask_judge(prompts, params)
            still = []
            for k, v in zip(pending, verdicts, strict=True):
                try:
                    losses[k] = parsers[k](v)
                except UnparsableVerdict:
                    still.append(k)
            pending = still
        if pending:
            bad = list(dict.fromkeys(self.items[asks[k][0]].id for k in pending))[:3]
            raise SourceError(f"judge verdict unparsable after {self.verdict_attempts} attempts for item(s) "
                              f"{', '.join(bad)}")
        return [losses[k] for k in range(len(asks))]


_ENDPOINT_KEYS = ("base_url", "model", "api_key_env", "timeout", "max_retries", "concurrency", "cache_key", "server")


def client(ep: dict, cache: ResponseCache, fleet: str | None, who: str) -> OpenAIClient:
    """An :class:`OpenAIClient` for an endpoint dict; one naming a fleet ``server`` asks the fleet for its URL on a
    cache miss."""
    from .openai_source import Endpoint, OpenAIClient

    endpoint = Endpoint(**{k: ep.get(k) for k in _ENDPOINT_KEYS if k in ep})
    handle = None
    if endpoint.server is not None:
        if fleet is None:
            raise ValueError(f"endpoint of server {endpoint.server!r} outside a job that serves it")
        from .server_fleet import ServerHandle

        handle = ServerHandle(fleet, endpoint.server, who)
    return OpenAIClient(endpoint, cache, handle)


@dataclass(frozen=True)
class LiveSpec:
    """A model behind an OpenAI-compatible server, scored against references (and a judge): ``cache_dir`` is one SQLite
    response cache shared by the job's actors; ``reference`` the model of relative losses (``live.reference``)."""

    candidate: dict
    judge: dict | None
    loss: str
    cache_dir: str
    reference: dict | None = None
    recovery: float | None = None  # a recovery job's r (losses against the reference)
    fleet: str | None = None  # the job's server fleet (a named Ray actor), for endpoints that name a server
    preference: bool = False  # a pairwise job: losses are "loses to the reference" (judge.mode: pairwise)
    regression: Regression | None = None  # a regression job's claim (paired losses against the reference)
    kind = "live"

    def servers(self, prefetched=frozenset()) -> set[str]:
        """The fleet's servers this candidate's labels ask (its target, the judge, the reference), leaving out shared
        ones whose answers were all generated before the rounds (``prefetched``); its own server is always in."""
        own = {self.candidate.get("server")}
        shared = {ep.get("server") for ep in (self.judge, self.reference) if ep is not None} - set(prefetched)
        return (own | shared) - {None}

    def build(self, arrays, rows) -> LiveSource:
        return live_source(self, arrays.items)


def live_source(spec: LiveSpec, items) -> LiveSource:
    """A :class:`LiveSource` from a job's :class:`LiveSpec` and its items."""
    cache = _cache(spec.cache_dir)
    cand = spec.candidate
    who = cand["id"]
    target = client(cand, cache, spec.fleet, who)
    judge = spec.judge
    kw = {}
    if judge is not None:
        kw = {"judge": client(judge, cache, spec.fleet, who),
              "judge_mode": judge["mode"], "judge_template": judge["template"], "judge_sampling": judge["sampling"],
              "grade_scale": tuple(judge["scale"]), "judge_constrained": judge.get("constrained", True),
              "judge_soft": judge.get("soft", False), "judge_order": judge.get("order", "both")}
    ref = spec.reference
    if ref is not None:
        kw.update(reference=client(ref, cache, spec.fleet, who),
                  reference_template=ref["template"], reference_sampling=ref["sampling"])
    return LiveSource(list(items), target, cand["template"], loss=spec.loss, sampling=cand["sampling"],
                      recovery=spec.recovery, preference=spec.preference, regression=spec.regression, **kw)


def _cache(cache_dir) -> ResponseCache:
    from .openai_source import ResponseCache

    return ResponseCache(pathlib.Path(cache_dir) / "responses.db")


def prefetch_answers(spec: dict, template: str, items, indices, cache_dir, fleet: str | None = None,
                     who: str = "job:reference") -> tuple[int, int]:
    """Generate one model's answers to ``template`` on ``indices`` once, in the driver, before the candidates start: the
    reference model's or an answer-mode judge's (independent of the candidate's answer). The candidates then read them
    from the shared response cache (same requests, same keys) instead of asking at the same time, and no job server is
    kept up for them. Returns (sent, cached)."""
    model = client(spec, _cache(cache_dir), fleet, who)
    prompts = [[{"role": "user", "content": template.format(question=items[int(i)].question)}] for i in indices]
    model.chat(prompts, **{"temperature": 0.0, **(spec.get("sampling") or {})})
    return model.stats.sent, model.stats.cache_hits


def prefetch_reference(spec: dict, items, indices, cache_dir, fleet: str | None = None) -> tuple[int, int]:
    """The reference model's answers (:func:`prefetch_answers` with its own template)."""
    return prefetch_answers(spec, spec["template"], items, indices, cache_dir, fleet)


def embed_items(cfg: dict, items, cache_dir, fleet: str | None = None) -> np.ndarray:
    """Item features for Cer-Eval's partition: ``/v1/embeddings`` of ``cfg["template"]`` filled with each item's
    question, as an ``(n_items, d)`` array (cached like any answer). Vectors of different lengths, or with NaN/inf, are
    an error, not silently repaired."""
    embedder = client(cfg, _cache(cache_dir), fleet, "job:features")
    vectors = embedder.embed([cfg["template"].format(question=it.question) for it in items])
    where = cfg.get("base_url") or f"server {cfg.get('server')}"
    dims = {len(v) for v in vectors if isinstance(v, list)}
    if len(dims) != 1 or not all(isinstance(v, list) for v in vectors) or 0 in dims:
        raise SourceError(f"{where}: embeddings of model {cfg['model']!r} are not vectors of one length "
                          f"(lengths {sorted(dims)[:5]})")
    try:
        out = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError):
        raise SourceError(f"{where}: embeddings of model {cfg['model']!r} are not numeric") from None
    if not np.isfinite(out).all():
        raise SourceError(f"{where}: embeddings of model {cfg['model']!r} contain NaN or inf")
    return out
