"""A real Label Studio for the tests (started from deploy/label-studio/serve.sh's settings), a
scripted annotator that answers through Label Studio's REST API, and outputs tables with
known losses.

The server needs the environment deploy/label-studio/setup.sh builds: CERTSEL_LABEL_STUDIO_VENV
(default ``.venv-label-studio`` in the repository). Tests marked ``label_studio`` are skipped
without it, and fail (not skip) when CI asks for them (CERTSEL_REQUIRE_LABEL_STUDIO=1).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import subprocess
import threading
import time

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "certsel-test-token-0123456789abcdef"
ADMIN = "admin@certsel.local"


def venv() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CERTSEL_LABEL_STUDIO_VENV", REPO / ".venv-label-studio"))


def available() -> bool:
    return (venv() / "bin" / "label-studio").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def label_studio_server(data_dir: pathlib.Path, timeout: float = 240.0):
    """``serve.sh`` on a free port with a fresh SQLite database; yields (url, token)."""
    port = free_port()
    env = dict(os.environ, LABEL_STUDIO_USER_TOKEN=TOKEN, LABEL_STUDIO_USERNAME=ADMIN)
    log = open(data_dir.parent / f"label-studio-{port}.log", "w")
    proc = subprocess.Popen(["bash", str(REPO / "deploy/label-studio/serve.sh"), str(venv()), str(data_dir), str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"label-studio exited ({proc.returncode}); see {log.name}")
            try:
                if httpx.get(f"{url}/api/current-user/whoami", headers=auth(TOKEN), timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"label-studio did not answer within {timeout:.0f} s; see {log.name}")
            time.sleep(0.5)
        yield url, TOKEN
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()


def auth(token: str) -> dict:
    return {"Authorization": f"Token {token}"}


def write_outputs(path: pathlib.Path, losses: dict[str, np.ndarray], judge: dict[str, np.ndarray] | None = None,
                  reference: bool = True) -> pathlib.Path:
    """An outputs table whose answers say their own loss to the scripted annotator: the
    answer text of a (candidate, item) with loss x is ``answer <item> of <candidate> [x]``."""
    rows = {"candidate": [], "item": [], "question": [], "answer": []}
    if reference:
        rows["reference"] = []
    if judge is not None:
        rows["judge"] = []
    for c, ls in losses.items():
        for i, x in enumerate(np.asarray(ls, dtype=float)):
            rows["candidate"].append(c)
            rows["item"].append(f"q{i:04d}")
            rows["question"].append(f"Question {i}: what is {i} + {i}?")
            rows["answer"].append(f"answer {i} of {c} [{x:g}]")
            if reference:
                rows["reference"].append(str(2 * i))
            if judge is not None:
                rows["judge"].append(float(judge[c][i]))
    pq.write_table(pa.table(rows), path)
    return path


def true_loss(task: dict) -> float:
    """The loss an answer written by :func:`write_outputs` says it has."""
    return float(task["data"]["answer"].rsplit("[", 1)[1].rstrip("]"))


class Annotator:
    """A person answering tasks through the REST API: every task of ``project`` that it has
    not answered yet gets the choice whose loss is the answer's known loss (``verdict`` in
    ``answer(loss, task)``, overridable), one POST per task, ``delay`` seconds apart."""

    def __init__(self, url: str, token: str, project: int, choices: dict[str, float], *, delay: float = 0.0,
                 control: str = "verdict", answer=None, limit: int | None = None, who: str = "annotator"):
        self.url, self.project, self.delay, self.control = url, project, delay, control
        self.http = httpx.Client(base_url=url, headers=auth(token), timeout=30)
        self.by_loss = {float(v): k for k, v in choices.items()}
        self.answer = answer or (lambda loss, task: self.by_loss[loss])
        # the keys of the tasks it answered (Label Studio on SQLite gives a deleted task's id to
        # the next one imported: ids do not identify tasks)
        self.done: set[str] = set()
        self.limit, self.who = limit, who
        self.me = self.http.get("/api/current-user/whoami").json()["id"]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def open_tasks(self) -> list[dict]:
        out, page = [], 1
        while True:
            r = self.http.get("/api/tasks", params={"project": self.project, "page": page, "page_size": 200,
                                                    "fields": "all"})
            if r.status_code == 404:
                return out
            got = r.json()
            out.extend(got["tasks"])
            if page * 200 >= got["total"]:
                return out
            page += 1

    def annotate(self, task: dict, choice: str | None = None, *, result=None, cancelled: bool = False) -> int:
        body = {"result": result if result is not None else [
            {"from_name": self.control, "to_name": "answer", "type": "choices", "value": {"choices": [choice]}}],
            "was_cancelled": cancelled}
        r = self.http.post(f"/api/tasks/{task['id']}/annotations", json=body)
        r.raise_for_status()
        self.done.add(task["data"]["certsel"])
        return r.json()["id"]

    def sweep(self) -> int:
        """Answer every open task once; how many were answered."""
        n = 0
        for t in self.open_tasks():
            if t["data"]["certsel"] in self.done or any(a.get("completed_by") == self.me for a in t.get("annotations") or []) \
                    or (self.limit is not None and len(self.done) >= self.limit):
                continue  # answered already (by this person: Label Studio never asks them twice)
            self.annotate(t, self.answer(true_loss(t), t))
            n += 1
            if self.delay:
                time.sleep(self.delay)
        return n

    def _run(self):
        while not self._stop.is_set():
            try:
                if not self.sweep():
                    self._stop.wait(0.2)
            except Exception as exc:  # a task deleted between the list and the POST: normal when withdrawn
                self.errors.append(str(exc).splitlines()[0])
                self._stop.wait(0.2)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, name=f"annotator-{self.who}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        self.http.close()


def project_of(url: str, token: str, title: str) -> int | None:
    got = httpx.get(f"{url}/api/projects", headers=auth(token), params={"page_size": 100}).json()
    ids = [p["id"] for p in got["results"] if p["title"] == title]
    return ids[0] if ids else None


def wait_for_project(url: str, token: str, title: str, timeout: float = 120.0) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        pid = project_of(url, token, title)
        if pid is not None:
            return pid
        time.sleep(0.2)
    raise TimeoutError(f"no project {title!r} after {timeout} s")


def job_dict(outputs: pathlib.Path, url: str, tmp_path: pathlib.Path, **labels) -> dict:
    """A two-candidate R-Eval job on Label Studio (FST; change what a test needs)."""
    return {
        "name": "annotators",
        "labels": {"kind": "label-studio", "url": url, "api_key_env": "CERTSEL_TEST_LS_TOKEN", "outputs": str(outputs),
                   "choices": {"Correct": 0.0, "Wrong": 1.0}, "queue": 8, "poll": 0.2,
                   "project": {"title": labels.pop("title", "certsel test")},
                   "candidates": [{"id": "good", "objective": 2.0}, {"id": "bad", "objective": 1.0}], **labels},
        "policy": {"kind": "r-eval"}, "alpha": 0.3, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "cost", "goal": "minimize"},
        "budget": {"n": 150, "batch": 8}, "seed": 3, "scheduling": {"futility": 0.05},
        "state": {"dir": str(tmp_path / "jobs")},
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db", "intervals": "final"},
    }


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True)


def add_annotator(url: str, token: str, email: str, password: str = "Annotat0r-Pass!") -> str:
    """A second person in the organisation, through an invite link (plain HTTP, as a person
    signs up); their API token."""
    invite = httpx.get(f"{url}/api/invite", headers=auth(token)).json()["invite_url"]
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as s:
        s.get(invite)
        csrf = s.cookies.get("csrftoken")
        r = s.post(invite, data={"email": email, "password": password, "csrfmiddlewaretoken": csrf},
                   headers={"Referer": url + invite})
        if r.status_code not in (302, 303):
            raise RuntimeError(f"sign-up of {email} answered {r.status_code}")
        return s.get("/api/current-user/token").json()["token"]
