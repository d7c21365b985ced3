"""Where candidates run: the runtime protocol, the in-process runtime and the Ray runtime.

A runtime hosts ``CandidateHost`` objects and hands them the driver's typed requests (:mod:`certsel.workers.contracts`).
The driver uses only the :class:`Runtime` protocol, so :class:`LocalRuntime` (in-process, no Ray) and
:class:`RayRuntime` (one actor per host) are interchangeable; only Ray can lose a host, and
:meth:`Runtime.gather_tolerant` reports that as a :class:`HostLost` in the reply's place, so the driver never handles a
Ray exception itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import types
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlparse

from certsel.errors import InputError, first_line
from certsel.workers.actor import CandidateHost, NotLoaded, worker_class
from certsel.workers.contracts import HostRequest


class RuntimeProblem(InputError):
    """The job could not start (Ray unreachable, ...): one-line message."""


@dataclass
class HostLost:
    """A candidate host (actor) that died during a call; ``restarting`` when Ray is still bringing it back (the call may
    be sent again shortly)."""

    host: int
    why: str
    restarting: bool = False


class Runtime(Protocol):
    """What the driver needs from the place candidates run. ``calls`` are ``(host, request)`` pairs; replies come back
    in their order."""

    def default_hosts(self, n_candidates: int) -> int: ...

    def ensure_hosts(self, n: int) -> None: ...

    def call(self, host: int, request: HostRequest): ...

    def gather_tolerant(self, calls: list[tuple[int, HostRequest]]) -> list:
        """Each call's reply, or a :class:`HostLost` where its host died."""

    def replace_host(self, host: int) -> None:
        """A fresh, empty host in place of a lost one (the driver rebuilds its candidates)."""

    def put(self, obj): ...

    def ship_by_value(self, objects) -> None: ...

    def close(self) -> None: ...


class LocalRuntime:
    """Candidates hosted in this process (benchmarks' in-process baseline; no Ray). A host here cannot be lost, so
    :meth:`gather_tolerant` is :meth:`gather`."""

    def __init__(self, n_hosts: int = 1):
        self.hosts = [CandidateHost() for _ in range(n_hosts)]
        self._packing: tuple[int | None, int | None] | None = None  # like_ray's (num_cpus, max_actors)

    @classmethod
    def like_ray(cls, num_cpus: int | None = None, max_actors: int | None = None) -> LocalRuntime:
        """Hosts packed as a local Ray packs its actors (one per CPU, ``max_actors`` at most): a host computes its
        candidates as one vectorised block, whose matrix products can round their last bit by the block's size, so
        the same packing gives the same e-values to the last bit in-process and on Ray. The CPUs are os.cpu_count()
        unless ``num_cpus`` names them; Ray reads a container's CPU quota, so where the two differ, ``ray.num_cpus``
        pins both."""
        rt = cls()
        rt._packing = (num_cpus, max_actors)
        return rt

    def default_hosts(self, n_candidates: int) -> int:
        if self._packing is None:
            return len(self.hosts)
        num_cpus, max_actors = self._packing
        if max_actors is not None:
            return min(max_actors, n_candidates)
        return max(1, min(n_candidates, num_cpus or os.cpu_count() or 1))

    def ensure_hosts(self, n: int) -> None:
        while len(self.hosts) < n:
            self.hosts.append(CandidateHost())

    def call(self, host: int, request: HostRequest):
        return self.hosts[host].handle(request)

    def gather_tolerant(self, calls):
        return [self.call(h, req) for h, req in calls]

    def replace_host(self, host: int) -> None:
        self.hosts[host] = CandidateHost()

    def put(self, obj):
        return obj

    def ship_by_value(self, objects) -> None:
        pass

    def close(self):
        pass


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast with one line when an explicit Ray address does not answer."""
    if address in ("auto", "local"):
        return
    url = urlparse(address if "://" in address else f"tcp://{address}")
    host, port = url.hostname, url.port
    if host is None or port is None:
        raise RuntimeProblem(f"ray.address: expected HOST:PORT or ray://HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise RuntimeProblem(f"Ray cluster at {address} is unreachable ({exc.strerror or exc})") from None


class RayRuntime:
    """Ray: the local machine by default, or the cluster in ``address`` / ``RAY_ADDRESS`` (under ``ray job submit`` the
    job's driver joins its cluster this way). A runtime made while Ray is already initialised (a test fixture, a
    notebook) uses that session and leaves it running."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None, max_actors: int | None = None):
        import ray

        self.ray = ray
        self.owns = False
        if not ray.is_initialized():
            target = address or os.environ.get("RAY_ADDRESS")
            if target:
                _check_reachable(target)
            try:
                if target:
                    ray.init(address=target, log_to_driver=False, logging_level=logging.ERROR)
                else:
                    # "local": always a new instance, never an unrelated one already on this machine
                    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                             logging_level=logging.ERROR)
            except Exception as exc:  # ConnectionError, RuntimeError, ... from ray.init
                raise RuntimeProblem(f"could not start or join Ray ({first_line(exc)})") from None
            self.owns = True
        self.max_actors = max_actors
        self.hosts: list = []
        self._cls = worker_class()

    def ensure_hosts(self, n: int) -> None:
        while len(self.hosts) < n:
            self.hosts.append(self._cls.remote())

    def default_hosts(self, n_candidates: int) -> int:
        if self.max_actors is not None:
            return min(self.max_actors, n_candidates)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return max(1, min(n_candidates, cpus))

    def call(self, host: int, request: HostRequest):
        return self.ray.get(self.hosts[host].handle.remote(request))

    def gather_tolerant(self, calls) -> list:
        """Every call's reply; a host that died (kill -9, OOM, node loss: Ray reports it as soon as it notices, so
        nothing waits forever) gives a :class:`HostLost` in its place instead of failing the whole round."""
        refs = [self.hosts[h].handle.remote(req) for h, req in calls]
        out = []
        for (h, _), ref in zip(calls, refs, strict=True):
            try:
                out.append(self.ray.get(ref))
            except self.ray.exceptions.ActorUnavailableError as err:  # Ray is restarting it
                out.append(HostLost(h, first_line(err, "actor unavailable"), restarting=True))
            except self.ray.exceptions.RayActorError as err:
                out.append(HostLost(h, first_line(err, "actor died")))
            except self.ray.exceptions.RayTaskError as err:
                if not isinstance(getattr(err, "cause", None), NotLoaded):
                    raise
                # the call reached an actor Ray had restarted, before its candidates were rebuilt
                out.append(HostLost(h, "restarted actor without its candidates"))
        return out

    def replace_host(self, host: int) -> None:
        """A fresh actor in place of a lost one (its candidates are rebuilt by the driver)."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.hosts[host])
        self.hosts[host] = self._cls.remote()

    def put(self, obj):
        return self.ray.put(obj)

    def ship_by_value(self, objects) -> None:
        """Extension objects (a betting strategy, a label function) defined in modules the actors cannot import (a test
        file, a notebook, a script next to the job) travel by value: their modules are registered with Ray's pickler."""
        import ray.cloudpickle as cloudpickle

        for obj in objects:
            owner = obj if isinstance(obj, (types.FunctionType, type)) else type(obj)
            mod = sys.modules.get(getattr(owner, "__module__", "") or "")
            # certsel's own modules are importable everywhere; __main__ already travels by value
            if mod is None or mod.__name__ == "__main__" or mod.__name__.split(".")[0] in ("certsel", "builtins"):
                continue
            with contextlib.suppress(ValueError):  # already registered
                cloudpickle.register_pickle_by_value(mod)

    def close(self):
        for h in self.hosts:
            self.ray.kill(h)
        self.hosts = []
        if self.owns:
            self.ray.shutdown()
