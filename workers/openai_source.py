"""Client for OpenAI-compatible servers (vLLM's ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``): many
requests in flight, retries, and a durable response cache.

* Concurrency: up to ``Endpoint.concurrency`` requests in flight on one ``httpx.AsyncClient`` (vLLM batches what is in
  flight).
* Retries: connection errors, timeouts, the HTTP statuses of ``_RETRY_STATUS`` (408, 409, 425, 429, 5xx) and malformed
  bodies are retried with exponential backoff up to ``max_retries`` times, then :class:`SourceError` says what failed,
  where and how often; other 4xx answers fail at once.
* Cache: every successful answer is stored in SQLite keyed by the SHA-256 of (kind, server URL or ``cache_key``, served
  model, payload with sampling parameters); a rerun or restarted actor reads it back instead of paying again. Identical
  requests in one batch are sent once, and ``stats`` counts what was actually sent, so no label is counted twice.
* Secrets: the API key is read from the environment variable ``Endpoint.api_key_env`` and never appears in errors, logs
  or ``repr``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from .contracts import SourceError  # noqa: F401  (re-exported)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class Endpoint:
    """One served model. ``base_url`` ends before ``/v1`` (e.g. ``http://host:8000``); or ``server``, a server of the
    job's fleet whose URL the client asks for on its first cache miss
    (:class:`~certsel.workers.server_fleet.ServerHandle`; ``cache_key`` then names it)."""

    base_url: str | None
    model: str
    api_key_env: str | None = None
    timeout: float = 60.0
    max_retries: int = 4
    backoff: float = 0.5  # seconds before the first retry; doubles, capped at 8 s
    concurrency: int = 16
    # names the server in the response cache (default: base_url); a server certsel starts gets a new port every run
    cache_key: str | None = None
    server: str | None = None

    def __post_init__(self):
        if (self.base_url is None) == (self.server is None):
            raise ValueError("an endpoint needs exactly one of base_url and server")
        if self.server is not None and self.cache_key is None:
            raise ValueError(f"endpoint of server {self.server!r} needs a cache_key (its URL changes when it restarts)")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("endpoint model must be a non-empty served-model name")
        if self.timeout <= 0 or self.max_retries < 0 or self.backoff < 0 or self.concurrency < 1:
            raise ValueError("endpoint needs timeout > 0, max_retries >= 0, backoff >= 0, concurrency >= 1")

    def headers(self) -> dict:
        if self.api_key_env is None:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise SourceError(f"environment variable {self.api_key_env} (the API key for "
                              f"{self.base_url or self.server}) is not set")
        return {"Authorization": f"Bearer {key}"}


def check_served(ep: Endpoint, seconds: float = 4.0) -> str | None:
    """Whether the server at ``ep.base_url`` serves ``ep.model``, asked once (``GET /v1/models``, no retries) before a
    job spends anything: None when it does (or has no model list), else what is wrong."""
    import httpx  # here: a job that never calls a server never imports the client

    url = ep.base_url.rstrip("/") + "/v1/models"
    try:
        got = httpx.get(url, headers=ep.headers(), timeout=seconds)
    except httpx.TimeoutException:
        return f"no answer from {url} within {seconds:g} s"
    except httpx.TransportError as exc:
        return f"no server answers at {ep.base_url} ({type(exc).__name__}: {str(exc) or 'connection failed'})"
    if got.status_code in (401, 403):
        return f"{url} refused the request ({got.status_code}): check api_key_env"
    if got.status_code != 200:
        return None  # no model list to compare with: the first request will say more
    try:
        served = [m["id"] for m in got.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return None
    if served and ep.model not in served:
        from certsel.policies.registry import did_you_mean

        return f"{ep.base_url} serves {', '.join(served[:5])}, not {ep.model!r}{did_you_mean(ep.model, served)}"
    return None


class ResponseCache:
    """Durable answers keyed by request (SQLite; safe to share between threads of a process)."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one file may be shared by the actors of a job (processes): wait on its lock
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=60)
        with self._db:
            self._db.execute("create table if not exists responses (key text primary key, value text not null)")

    @staticmethod
    def key(kind: str, endpoint: str, model: str, payload: dict) -> str:
        canon = json.dumps({"kind": kind, "endpoint": endpoint.rstrip("/"), "model": model, "payload": payload},
                           sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canon.encode()).hexdigest()

    def get(self, key: str):
        with self._lock:
            row = self._db.execute("select value from responses where key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value) -> None:
        self.put_many([(key, value)])

    def put_many(self, pairs) -> None:
        """Store several answers in one transaction (one commit: a group commit)."""
        rows = [(k, json.dumps(v)) for k, v in pairs]
        if rows:
            with self._lock, self._db:
                self._db.executemany("insert or replace into responses values (?, ?)", rows)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("select count(*) from responses").fetchone()[0]

    def close(self) -> None:
        self._db.close()


@dataclass
class Stats:
    sent: int = 0  # requests answered by the server and used
    cache_hits: int = 0
    retries: int = 0
    failed: int = 0
    errors: dict = field(default_factory=dict)  # error kind -> count


MAX_BODY = 8 << 20  # bytes; a larger answer is treated as malformed (never read whole into memory)


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError("the answer is not a string")
    value.encode("utf-8")  # a lone surrogate is not text: UnicodeEncodeError (a ValueError)
    return value


def _extract(kind: str, body) -> object:
    """The useful part of an answer; ValueError/KeyError/IndexError/TypeError for a malformed body."""
    if kind == "chat":
        return _text(body["choices"][0]["message"]["content"])
    if kind == "chat_logprobs":  # the answer and the top log-probabilities of its first token
        choice = body["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or [{}]
        top = {_text(t["token"]): float(t["logprob"]) for t in content[0].get("top_logprobs", [])}
        return {"text": _text(choice["message"]["content"]), "top": top}
    if kind == "completion":
        return _text(body["choices"][0]["text"])
    if kind == "embedding":
        vecs = [d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])]
        for v in vecs:
            if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                raise TypeError("an embedding is not a list of numbers")
        return vecs
    raise ValueError(kind)


class _GroupCommit:
    """Answers go to the cache in groups: a commit (an fsync) per group, not per answer.

    A writer task commits what arrived every ``every`` seconds in a worker thread while the event loop keeps sending. A
    batch returns only after :meth:`close` (which commits the rest), so no policy sees an answer that is not durable; a
    crash loses at most the last few milliseconds' answers, which a rerun asks again (requests are idempotent).
    """

    def __init__(self, cache: ResponseCache | None, every: float = 0.005):
        self.cache, self.every = cache, every
        self.pending: list = []
        self.task = None if cache is None else asyncio.get_running_loop().create_task(self._loop())
        self.done = False

    def add(self, key: str, value) -> None:
        if self.cache is not None:
            self.pending.append((key, value))

    async def _flush(self) -> None:
        batch, self.pending = self.pending, []
        if batch:
            await asyncio.to_thread(self.cache.put_many, batch)

    async def _loop(self) -> None:
        while not self.done:
            await asyncio.sleep(self.every)
            await self._flush()

    async def close(self) -> None:
        if self.task is None:
            return
        self.done = True
        await self.task
        await self._flush()


_PATHS = {"chat": "/v1/chat/completions", "chat_logprobs": "/v1/chat/completions", "completion": "/v1/completions", "embedding": "/v1/embeddings"}


class _Retry(Exception):
    """A failed attempt worth repeating; ``str()`` says why."""


class OpenAIClient:
    """Batched, cached, retried calls to one :class:`Endpoint`."""

    def __init__(self, endpoint: Endpoint, cache: ResponseCache | None = None, server=None):
        self.endpoint = endpoint
        self.cache = cache
        self.stats = Stats()
        # a server of the job's fleet (ServerHandle): asked for its URL on a cache miss, told each batch's GPU time
        self.server = server
        if (endpoint.server is None) != (server is None):
            raise ValueError("an endpoint that names a server needs its handle, and only then")

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIClient({self.endpoint.base_url or self.endpoint.server!r}, model={self.endpoint.model!r})"

    async def _post(self, client: httpx.AsyncClient, base: str, kind: str, payload: dict):
        """One request, retried up to ``max_retries`` times (exponential backoff, at most 8 s) on failures
        :meth:`_attempt` marks."""
        ep = self.endpoint
        url = base.rstrip("/") + _PATHS[kind]
        retrying = AsyncRetrying(stop=stop_after_attempt(ep.max_retries + 1),
                                 wait=wait_exponential(multiplier=ep.backoff, max=8.0),
                                 retry=retry_if_exception_type(_Retry), before_sleep=self._count_retry, reraise=True)
        try:
            value = await retrying(self._attempt, client, url, kind, payload)
        except _Retry as exc:
            self.stats.failed += 1
            raise SourceError(f"{url}: {exc} on all {ep.max_retries + 1} attempts") from None
        self.stats.sent += 1
        return value

    def _count_retry(self, _state) -> None:
        self.stats.retries += 1

    async def _attempt(self, client: httpx.AsyncClient, url: str, kind: str, payload: dict):
        """One POST: the value, :class:`_Retry` (a failure worth retrying), or :class:`SourceError` (a 4xx outside
        ``_RETRY_STATUS``)."""
        import httpx

        try:
            status, text, raw = await self._send(client, url, payload)
        except httpx.TimeoutException:
            raise self._retry("timeout", f"timed out after {self.endpoint.timeout:g} s") from None
        except httpx.TransportError as exc:
            raise self._retry("connection", f"connection failed ({exc.__class__.__name__})") from None
        if status in _RETRY_STATUS:
            raise self._retry(f"http_{status}", f"HTTP {status}")
        if status >= 400:
            self.stats.failed += 1
            raise SourceError(f"{url}: HTTP {status} (not retried): {text[:200]!r}", status)
        if raw is None:
            raise self._retry("too_large", f"response body larger than {MAX_BODY >> 20} MiB")
        try:
            return _extract(kind, json.loads(raw))
        except (ValueError, KeyError, IndexError, TypeError):
            raise self._retry("malformed", "malformed response body") from None

    def _retry(self, counter: str, reason: str) -> _Retry:
        self._count(counter)
        return _Retry(reason)

    async def _send(self, client: httpx.AsyncClient, url: str, payload: dict):
        """POST; returns (status, short text for errors, body bytes or None when the body exceeds :data:`MAX_BODY`)."""
        ep = self.endpoint
        async with client.stream("POST", url, json=payload, headers=ep.headers(), timeout=ep.timeout) as resp:
            chunks, size = [], 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > MAX_BODY:
                    return resp.status_code, "", None
                chunks.append(chunk)
        raw = b"".join(chunks)
        return resp.status_code, raw[:200].decode("utf-8", "replace"), raw

    def _count(self, kind: str) -> None:
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    async def _run(self, kind: str, payloads: list[dict]) -> list:
        import httpx

        ep = self.endpoint
        keys = [ResponseCache.key(kind, ep.cache_key or ep.base_url, ep.model, p) for p in payloads]
        results: dict[str, object] = {}
        todo: dict[str, dict] = {}
        for k, p in zip(keys, payloads, strict=True):
            if k in results or k in todo:
                continue  # the same request twice in one batch is sent once
            hit = None if self.cache is None else self.cache.get(k)
            if hit is not None:
                results[k] = hit
                self.stats.cache_hits += 1
            else:
                todo[k] = p
        if todo:
            # only now is a server needed: one of the fleet's is started here if it is down
            base = ep.base_url if self.server is None else await asyncio.to_thread(self.server.url)
            t0 = time.time()
            sem = asyncio.Semaphore(ep.concurrency)
            limits = httpx.Limits(max_connections=ep.concurrency, max_keepalive_connections=ep.concurrency)
            saver = _GroupCommit(self.cache)
            try:
                async with httpx.AsyncClient(limits=limits) as client:
                    async def one(k, p):
                        async with sem:
                            value = await self._post(client, base, kind, {"model": ep.model, **p})
                        saver.add(k, value)
                        results[k] = value

                    outcome = await asyncio.gather(*(one(k, p) for k, p in todo.items()), return_exceptions=True)
            finally:
                # every answer that arrived (paid for) is stored before the batch returns or fails
                await saver.close()
                if self.server is not None:
                    self.server.record(t0, time.time(), len(todo))
            errors = [e for e in outcome if isinstance(e, BaseException)]
            if errors:
                first = next((e for e in errors if isinstance(e, SourceError)), errors[0])
                raise SourceError(f"{len(errors)} of {len(todo)} requests failed; first: {first}",
                                  getattr(first, "status", None)) from None
        return [results[k] for k in keys]

    def _call(self, kind, payloads):
        return asyncio.run(self._run(kind, payloads))

    def chat(self, conversations: list[list[dict]], **params) -> list[str]:
        """One chat completion per conversation (a list of ``{"role", "content"}``)."""
        return self._call("chat", [{"messages": c, **params} for c in conversations])

    def chat_logprobs(self, conversations: list[list[dict]], top: int = 20, **params) -> list[dict]:
        """Chat completions with the ``top`` log-probabilities of the first generated token: ``{"text": answer, "top":
        {token: logprob}}`` per conversation."""
        return self._call("chat_logprobs", [{"messages": c, "logprobs": True, "top_logprobs": top, **params}
                                            for c in conversations])

    def complete(self, prompts: list[str], **params) -> list[str]:
        return self._call("completion", [{"prompt": p, **params} for p in prompts])

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of ``texts`` (one request per text, so each is cached on its own)."""
        return [v[0] for v in self._call("embedding", [{"input": [t]} for t in texts])]
