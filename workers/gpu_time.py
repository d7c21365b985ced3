"""GPU time of a job's own model servers, measured like labels (docs/live.md, 'GPU time').

A server's life is a sequence of spells: ``requested``, ``placed`` by Ray (it holds its GPUs from here), ``ready``
(``/health`` says 200) and ``stopped``. Clients report :class:`Busy` spans (one per batch of requests a candidate sent).
Per server: waiting for placement, loading (placed -> ready), busy (the union of the spans within ready spells) and idle
(the rest of the time it held its GPUs), in seconds and GPU-seconds. Per candidate: the GPU-seconds of its generations,
each instant of busy time shared equally between the candidates with requests in flight then.

Clocks are the reporting processes' wall clocks: on a cluster, clock disagreement shifts the spans; the totals per
server come from one process (the fleet's) and do not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


JOB = "job:"  # a Busy span's ``who`` for work done for the job as a whole, e.g. "job:judge"


@dataclass
class Spell:
    """One start-to-stop of a server (times in seconds since the epoch; None: not yet)."""

    requested: float
    placed: float | None = None
    ready: float | None = None
    stopped: float | None = None
    node: str | None = None


@dataclass(frozen=True)
class Busy:
    """Requests of candidate ``who`` in flight on a server from ``t0`` to ``t1``."""

    t0: float
    t1: float
    who: str
    requests: int


@dataclass
class ServerUsage:
    """What one server cost (see the module docstring); ``gpus``: GPUs it holds while up."""

    name: str
    gpus: float
    starts: int = 0
    wait_s: float = 0.0
    load_s: float = 0.0
    busy_s: float = 0.0
    idle_s: float = 0.0
    requests: int = 0

    @property
    def up_s(self) -> float:
        return self.load_s + self.busy_s + self.idle_s

    @property
    def gpu_s(self) -> float:
        return self.up_s * self.gpus

    def as_dict(self) -> dict:
        return {"name": self.name, "gpus": self.gpus, "starts": self.starts, "wait_s": self.wait_s,
                "load_s": self.load_s, "busy_s": self.busy_s, "idle_s": self.idle_s, "up_s": self.up_s,
                "gpu_s": self.gpu_s, "requests": self.requests}


@dataclass
class FleetUsage:
    """A job's servers: each one's :class:`ServerUsage`, each candidate's generation GPU-seconds and requests, and the
    most servers (and GPUs) up at one time."""

    servers: list[ServerUsage] = field(default_factory=list)
    candidate_gpu_s: dict[str, float] = field(default_factory=dict)
    candidate_requests: dict[str, dict[str, int]] = field(default_factory=dict)  # who -> server -> requests
    # work done for the job as a whole before the rounds (who = "job:reference", "job:judge",
    # "job:features": answers and embeddings every candidate shares), by what it was
    job_gpu_s: dict[str, float] = field(default_factory=dict)
    max_up: int = 0
    max_gpus_up: float = 0.0

    @property
    def gpu_s(self) -> float:
        return float(sum(s.gpu_s for s in self.servers))

    @property
    def starts(self) -> int:
        return int(sum(s.starts for s in self.servers))


def _union_length(spans: np.ndarray) -> float:
    """Total length of the union of ``(n, 2)`` intervals."""
    if not len(spans):
        return 0.0
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    ends = np.maximum.accumulate(spans[:, 1])
    # a new block starts where an interval begins after every earlier one has ended
    starts_block = np.r_[True, spans[1:, 0] > ends[:-1]]
    block = np.cumsum(starts_block) - 1
    lo = spans[starts_block, 0]
    hi = np.zeros(lo.size)
    np.maximum.at(hi, block, spans[:, 1])
    return float(np.sum(hi - lo))


def _clip(spans: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """The parts of ``spans`` inside the ``windows`` (both ``(n, 2)``; windows disjoint)."""
    if not len(spans) or not len(windows):
        return np.zeros((0, 2))
    lo = np.maximum(spans[:, None, 0], windows[None, :, 0])
    hi = np.minimum(spans[:, None, 1], windows[None, :, 1])
    keep = hi > lo
    return np.stack([lo[keep], hi[keep]], axis=1)


def fair_shares(busy: list[Busy], windows: np.ndarray) -> dict[str, float]:
    """Seconds of busy time charged to each candidate: every elementary stretch between two span ends is split equally
    between the candidates in flight then (within ``windows``)."""
    if not busy:
        return {}
    whos = sorted({b.who for b in busy})
    idx = {w: k for k, w in enumerate(whos)}
    edges = np.unique(np.concatenate([[b.t0 for b in busy], [b.t1 for b in busy], windows.ravel()]))
    if edges.size < 2:
        return {w: 0.0 for w in whos}
    mids = (edges[:-1] + edges[1:]) / 2
    length = np.diff(edges)
    inside = np.zeros(mids.size, dtype=bool)
    for lo, hi in windows:
        inside |= (mids > lo) & (mids < hi)
    flight = np.zeros((len(whos), mids.size), dtype=bool)
    for b in busy:
        flight[idx[b.who]] |= (mids > b.t0) & (mids < b.t1)
    n = flight.sum(axis=0)
    per = np.where((n > 0) & inside, length / np.maximum(n, 1), 0.0)
    return {w: float(flight[k] @ per) for w, k in idx.items()}


def server_usage(name: str, gpus: float, spells: list[Spell], busy: list[Busy], now: float) -> ServerUsage:
    """One server's :class:`ServerUsage` (a spell not stopped yet counts up to ``now``)."""
    out = ServerUsage(name, gpus, starts=len(spells), requests=int(sum(b.requests for b in busy)))
    ready = []
    for s in spells:
        placed = s.placed if s.placed is not None else (s.stopped if s.stopped is not None else now)
        end = s.stopped if s.stopped is not None else now
        out.wait_s += max(placed - s.requested, 0.0)
        if s.placed is None:
            continue
        up_from = s.ready if s.ready is not None else end
        out.load_s += max(min(up_from, end) - s.placed, 0.0)
        if s.ready is not None and end > s.ready:
            ready.append((s.ready, end))
    windows = np.array(ready, dtype=np.float64).reshape(-1, 2)
    spans = np.array([(b.t0, b.t1) for b in busy], dtype=np.float64).reshape(-1, 2)
    out.busy_s = _union_length(_clip(spans, windows))
    out.idle_s = max(float(np.sum(windows[:, 1] - windows[:, 0])) - out.busy_s, 0.0)
    return out


def fleet_usage(gpus: dict[str, float], spells: dict[str, list[Spell]], busy: dict[str, list[Busy]],
                now: float, max_up: int = 0, max_gpus_up: float = 0.0) -> FleetUsage:
    """Every server's usage and each candidate's share of the GPU time of its generations."""
    out = FleetUsage(max_up=max_up, max_gpus_up=max_gpus_up)
    for name in gpus:
        b = busy.get(name, [])
        out.servers.append(server_usage(name, gpus[name], spells.get(name, []), b, now))
        ready = [(s.ready, s.stopped if s.stopped is not None else now) for s in spells.get(name, [])
                 if s.ready is not None]
        for who, secs in fair_shares(b, np.array(ready, dtype=np.float64).reshape(-1, 2)).items():
            job = who.startswith(JOB)
            into, key = (out.job_gpu_s, who[len(JOB):]) if job else (out.candidate_gpu_s, who)
            into[key] = into.get(key, 0.0) + secs * gpus[name]
        for x in b:
            per = out.candidate_requests.setdefault(x.who, {})
            per[name] = per.get(name, 0) + x.requests
    return out
