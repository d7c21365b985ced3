"""The ``live`` label source kind: candidates, judge and reference answered by model servers (``live:``), through
:mod:`certsel.workers.live`.

Its hooks do what only a live job needs, before any tracking run exists: start the job's own servers (``live.serve``)
and say which of them each candidate needs up together, generate the reference model's answers and a served answer-mode
judge's answers once, and fetch the items' embeddings (``live.features``). A server, reference or embedding endpoint
that fails is a one-line input error and leaves no half-written run.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from certsel.config import RunConfig
from certsel.errors import InputError, first_line
from certsel.workers.contracts import SourceError
from certsel.workers.live import LiveSpec
from certsel.workers.replay import label_orders

from .jobdata import JobData, load_live
from .source_kind import Provides, ServerFleet, SourceKind

log = logging.getLogger("certsel.job")


def reference_items(cfg: RunConfig, n_items: int):
    """The items whose reference answers a job will need: the human and judge-only items of R-Eval/R-AutoEval(+)
    (:func:`~certsel.workers.replay.label_orders`), which label exactly those; every item for the policies that choose
    items as they go (judge-stratified, Seq, Cer-Eval, pairwise)."""
    if cfg.policy.is_testing and not cfg.policy.judge_first and not cfg.proc.ranking:
        r = cfg.budget.r if cfg.policy.uses_judge else 0
        human, judge = label_orders(n_items, cfg.seed, cfg.budget.n, r, cfg.policy.without_replacement)
        if not cfg.policy.without_replacement:
            return np.concatenate([human, judge])  # the order's first n (1 + r) items, in order
        return np.unique(np.concatenate([human, judge]))
    return range(n_items)


def _judge_used(cfg: RunConfig) -> bool:
    return cfg.live.judge is not None and (cfg.policy.uses_judge or cfg.policy.judge_first)


class LiveKind(SourceKind):
    name = "live"
    prepare_stage = "starting servers"

    def provides(self, cfg):
        return Provides(cfg.live.judge is not None, cfg.live.features is not None, "live.judge", "live.features")

    def precheck(self, cfg):
        """Every running server the job names (a ``base_url`` endpoint) answers and serves its model: asked once each,
        all at once, within seconds (a request would retry for half a minute first)."""
        from concurrent.futures import ThreadPoolExecutor

        from certsel.config.sources import ReferenceConfig
        from certsel.workers.openai_source import Endpoint, check_served

        live = cfg.live
        named = [(f"live.candidates[{c.id}]", c) for c in live.candidates]
        if live.judge is not None and _judge_used(cfg):
            named.append(("live.judge", live.judge))
        if isinstance(live.reference, ReferenceConfig):
            named.append(("live.reference", live.reference))
        if live.features is not None and cfg.policy.needs_features:
            named.append(("live.features", live.features))
        servers = {}  # one question per server, model and key: the first key that names it
        for key, ep in named:
            if ep.base_url is not None:
                servers.setdefault((ep.base_url, ep.model, ep.api_key_env), key)

        def ask(server):
            try:
                return check_served(Endpoint(server[0], server[1], api_key_env=server[2]))
            except SourceError as exc:  # its API key is not set
                return first_line(exc)

        with ThreadPoolExecutor(max(1, min(16, len(servers)))) as pool:
            for key, problem in zip(servers.values(), list(pool.map(ask, servers)), strict=True):
                if problem is not None:
                    raise InputError(f"{key}: {problem}")

    def load(self, cfg):
        return load_live(cfg)

    def spec(self, cfg, data, k, with_judge):
        live = cfg.live
        judge = None if live.judge is None or not with_judge else live.judge.model_dump()
        return LiveSpec(candidate=data.live[k].model_dump(), judge=judge, loss=live.loss, cache_dir=str(live.cache_dir),
                        reference=live.reference_endpoint(),
                        recovery=None if cfg.recovery is None else cfg.recovery.at_least, fleet=data.servers,
                        preference=live.judge is not None and live.judge.mode == "pairwise",
                        regression=None if cfg.regression is None else cfg.regression.claim)

    def loss_words(self, cfg):
        """The answer's loss in words; with a reference model, each item's loss is the candidate's drop against it."""
        from certsel.workers.losses import LOSS_WORDS

        ref = cfg.live.reference
        if ref is None:
            return LOSS_WORDS.get(cfg.live.loss)
        name = ref if isinstance(ref, str) else (ref.server or ref.model)
        return (f"drop against the reference model {name!r} (per item: max(loss(candidate) - loss(reference), 0), "
                "with score = 1 - loss)")

    def items_words(self, n_items):
        return f"the {n_items} items of the items file"

    def server_specs(self, cfg):
        live = cfg.live
        log_dir = str(live.cache_dir / "servers")
        python = os.environ.get("CERTSEL_VLLM_PYTHON")  # settled here, where the environment is the user's
        return [{**s.model_dump(), "python": s.python or python, "served_model_name": s.served, "log_dir": log_dir}
                for s in live.serve or ()]

    def server_needs(self, specs, prefetched):
        return {s.name: s.source.servers(prefetched) for s in specs if isinstance(s.source, LiveSpec)}

    def prepare(self, cfg: RunConfig, data: JobData, fleet: ServerFleet | None):
        from certsel.workers.live import embed_items, prefetch_answers, prefetch_reference

        live, name = cfg.live, None
        if fleet is not None:
            name = fleet.name
            # the servers each candidate needs up together must fit the cluster: checked here,
            # before any run exists (the engine checks again with each candidate's exact needs);
            # an answer-mode judge is not among them: its answers are generated first (below)
            judge = live.judge
            shared = judge.server if _judge_used(cfg) and judge.mode != "answer" else None
            fleet.set_needs({c.id: {s for s in (c.server, shared) if s is not None} for c in live.candidates})
            live = live.resolved()
            cfg = cfg.model_copy(update={"live": live})
            by_id = {c.id: c for c in live.candidates}
            data = dataclasses.replace(data, live=tuple(by_id[c.id] for c in data.live), servers=name)
        ref = live.reference_endpoint()
        if ref is not None:
            try:
                sent, cached = prefetch_reference(ref, data.items, reference_items(cfg, len(data.items)),
                                                  live.cache_dir, name)
            except SourceError as exc:
                raise InputError(f"live.reference: {first_line(exc)}") from exc
            log.info("reference answers: %d generated, %d from the cache", sent, cached)
            if fleet is not None and ref.get("server") is not None:
                fleet.prefetched.add(ref["server"])  # its answers are all in the cache now
        judge = live.judge
        if fleet is not None and _judge_used(cfg) and judge.server is not None and judge.mode == "answer":
            # a served judge that answers the questions itself: its answers do not depend on
            # the candidate, so they are generated once, now, and its server is not held idle
            # while the candidates' servers load (each candidate template, when it has none)
            templates = [judge.template] if judge.template else sorted({c.template for c in live.candidates})
            indices = reference_items(cfg, len(data.items))
            try:
                for t in templates:
                    sent, cached = prefetch_answers(judge.model_dump(), t, data.items, indices, live.cache_dir, name,
                                                    "job:judge")
                    log.info("judge answers: %d generated, %d from the cache", sent, cached)
            except SourceError as exc:
                raise InputError(f"live.judge: {first_line(exc)}") from exc
            fleet.prefetched.add(judge.server)
        if live.features is not None and cfg.policy.needs_features:
            try:
                feats = embed_items(live.features.model_dump(), data.items, live.cache_dir, name)
            except SourceError as exc:  # before the job starts: its input cannot be read
                raise InputError(f"live.features: {first_line(exc)}") from exc
            data = dataclasses.replace(data, features=feats)
        return cfg, data
