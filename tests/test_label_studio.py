"""The label-studio source against a real Label Studio (deploy/label-studio/setup.sh), with
scripted annotators that answer through its REST API with known losses.

Marked ``label_studio``: skipped unless CERTSEL_LABEL_STUDIO_VENV names the environment
setup.sh built (or CERTSEL_LABEL_STUDIO_URL + CERTSEL_LABEL_STUDIO_TOKEN a running server).
The module starts one server (a fresh SQLite database) and every test works in a project
of its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.workers.annotations import AnswerScale, labelling_config
from certsel.workers.labellog import LabelLog, log_path

from helpers.label_studio import (ADMIN, Annotator, add_annotator, auth, job_dict, label_studio_server, wait_for_project, write_outputs)

URL = os.environ.get("CERTSEL_LABEL_STUDIO_URL")
pytestmark = [pytest.mark.label_studio, pytest.mark.skipif(
    URL is None and not os.environ.get("CERTSEL_LABEL_STUDIO_VENV"),
    reason="set CERTSEL_LABEL_STUDIO_VENV (deploy/label-studio/setup.sh) or CERTSEL_LABEL_STUDIO_URL")]

CHOICES = {"Correct": 0.0, "Wrong": 1.0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if URL is not None:
        token = os.environ["CERTSEL_LABEL_STUDIO_TOKEN"]
        os.environ["CERTSEL_TEST_LS_TOKEN"] = token
        yield URL, token
        return
    with label_studio_server(tmp_path_factory.mktemp("label-studio") / "data") as (url, token):
        os.environ["CERTSEL_TEST_LS_TOKEN"] = token
        yield url, token


def losses(n=300, seed=0, good=0.08, bad=0.5):
    rng = np.random.default_rng(seed)
    return {"good": (rng.random(n) < good).astype(float), "bad": (rng.random(n) < bad).astype(float)}


def start_job(tmp_path, job):
    """``execute`` in a thread (as ``certsel run`` runs it); join() returns (result, run id)."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    cfg = load_config(path)
    out: dict = {}

    def run():
        try:
            out["result"] = execute(cfg, output=tmp_path / "report")
        except BaseException as exc:  # noqa: BLE001  (re-raised in the test's thread)
            out["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()

    def join(timeout=600):
        th.join(timeout)
        assert not th.is_alive(), "the job did not finish"
        if "error" in out:
            raise out["error"]
        return out["result"]

    join.done = lambda: not th.is_alive()
    return join


def journal(result, tmp_path, name):
    log = LabelLog(log_path(tmp_path / "jobs" / result.job_id, name), name)
    try:
        return log.records(), log.rows()
    finally:
        log.close()


def project_tasks(url, token, project):
    return Annotator(url, token, project, CHOICES).open_tasks()


def test_job_certifies_the_right_candidate_and_asks_only_for_what_it_needs(server, ray_session, tmp_path):
    url, token = server
    table = losses()
    out = write_outputs(tmp_path / "outputs.parquet", table)
    job = job_dict(out, url, tmp_path, title=f"needs-{time.time_ns()}")
    join = start_job(tmp_path, job)
    project = wait_for_project(url, token, job["labels"]["project"]["title"])
    with Annotator(url, token, project, CHOICES, delay=0.4):
        result, run_id = join()
    by = {r.name: r for r in result.records}
    assert result.selected == "good"
    assert str(by["good"].status) == "certified" and str(by["bad"].status) != "certified"
    queue, budget = job["labels"]["queue"], job["budget"]["n"]
    withdrawn_all = []
    for name, r in by.items():
        q = r.queue
        # tasks imported: the labels used plus at most the queue ahead, far below the budget
        assert r.t <= q.tasks_imported <= r.t + queue < budget, (name, q)
        assert q.annotations_used == r.t and q.annotations_refused == 0
        records, rows = journal(result, tmp_path, name)
        used = rows.item[rows.role == "human"]
        assert used.size == r.t == np.unique(used).size  # each label once, in the durable log
        # the label is the person's answer: the known loss of that item
        np.testing.assert_array_equal(rows.loss[rows.role == "human"], table[name][used])
        withdrawn = [b for k, b in records.items() if k.startswith("task/") and b["withdrawn"]]
        assert len(withdrawn) == q.tasks_withdrawn
        assert q.annotations_saved == q.tasks_withdrawn
        withdrawn_all += withdrawn
    # something was withdrawn (the annotator is slower than the test), and it is gone for everyone
    # (Label Studio on SQLite gives a deleted task's id to the next task imported: keys tell them apart)
    assert withdrawn_all, {n: (r.t, r.queue) for n, r in by.items()}
    left = {t["data"]["certsel"] for t in project_tasks(url, token, project)}
    assert not left & {b["key"] for b in withdrawn_all}
    for b in withdrawn_all:
        got = httpx.get(f"{url}/api/tasks/{b['task']}", headers=auth(token))
        assert got.status_code == 404 or got.json()["data"]["certsel"] != b["key"]
    assert len(left) == sum(r.queue.tasks_imported - r.queue.tasks_withdrawn for r in result.records)


def flip(task, rate=0.15):
    """A second person who disagrees with the known loss on about ``rate`` of the items."""
    i = int(task["data"]["item_id"][1:])
    return (i * 2654435761 % 1000) / 1000 < rate


def test_two_annotators_per_item_give_the_loss_and_the_agreement(server, ray_session, tmp_path):
    url, token = server
    table = losses(n=500, seed=1)
    rng = np.random.default_rng(5)
    judge = {c: np.where(rng.random(500) < 0.1, 1 - v, v) for c, v in table.items()}
    out = write_outputs(tmp_path / "outputs.parquet", table, judge=judge)
    title = f"overlap-{time.time_ns()}"
    job = job_dict(out, url, tmp_path, title=title, judge="judge", annotators_per_item=2)
    job["policy"] = {"kind": "r-autoeval+"}
    job["budget"] = {"n": 150, "r": 2, "batch": 8}
    job["candidates"] = ["good"]  # one is enough here (and saves a minute of the scripted people's time)
    second = add_annotator(url, token, f"second-{time.time_ns()}@certsel.local")
    join = start_job(tmp_path, job)
    project = wait_for_project(url, token, title)
    other = {"Correct": "Wrong", "Wrong": "Correct"}
    with Annotator(url, token, project, CHOICES, who="first"), \
            Annotator(url, second, project, CHOICES, who="second",
                      answer=lambda loss, t: other[{0.0: "Correct", 1.0: "Wrong"}[loss]] if flip(t) else
                      {0.0: "Correct", 1.0: "Wrong"}[loss]):
        result, run_id = join()
    by = {r.name: r for r in result.records}
    assert result.selected == "good"
    for name, r in by.items():
        q = r.queue
        assert q.annotators == 2 and q.annotations_used == 2 * r.t
        records, rows = journal(result, tmp_path, name)
        answers: dict = {}
        for k, b in records.items():
            if k.startswith("annotation/") and b["status"] == "valid":
                answers.setdefault(b["item"], []).append(b)
        human = rows.item[rows.role == "human"]
        for i, loss in zip(human.tolist(), rows.loss[rows.role == "human"].tolist(), strict=True):
            two = sorted(answers[i], key=lambda b: b["n"])[:2]
            assert {b["annotator"] for b in two} == {two[0]["annotator"], two[1]["annotator"]} and len(
                {b["annotator"] for b in two}) == 2
            assert loss == pytest.approx(np.mean([b["loss"] for b in two]))  # the mean of the two people
        agree = q.agreement
        # independent: the second person flips ~15% of binary answers: Cohen's kappa from the answers
        from sklearn.metrics import cohen_kappa_score
        pairs = [sorted(v, key=lambda b: b["annotator"]) for v in answers.values() if len(v) == 2]
        kappa = cohen_kappa_score([p[0]["answer"] for p in pairs], [p[1]["answer"] for p in pairs])
        assert agree["cohen_kappa"] == pytest.approx(kappa)
        assert 0.3 < agree["krippendorff_alpha"] < 0.95 and agree["annotators"] == 2
    sel = json.loads((tmp_path / "report" / "selection.json").read_text())
    cand = {c["candidate"]: c for c in sel["candidates"]}
    assert cand["good"]["annotators"]["agreement"]["krippendorff_alpha"] == pytest.approx(
        by["good"].queue.agreement["krippendorff_alpha"])
    assert cand["good"]["judge"] is not None  # the judge's agreement beside the people's
    report = (tmp_path / "report" / "report.md").read_text()
    assert "annotators agree: alpha (kappa)" in report and "judge agrees" in report


def test_a_job_killed_while_waiting_resumes_without_a_duplicate_task_or_label(server, tmp_path):
    url, token = server
    table = losses(seed=2)
    out = write_outputs(tmp_path / "outputs.parquet", table)
    title = f"resume-{time.time_ns()}"
    job = job_dict(out, url, tmp_path, title=title)
    job["candidates"] = ["good"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    cmd = [sys.executable, "-m", "certsel.cli", "run", str(path), "--no-progress", "--output", str(tmp_path / "report")]
    first = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        project = wait_for_project(url, token, title)
        with Annotator(url, token, project, CHOICES, limit=12) as person:  # answers 12 tasks, then stops
            t0 = time.monotonic()
            while len(person.done) < 12 and time.monotonic() - t0 < 120:
                time.sleep(0.2)
        time.sleep(3)  # the job takes up what was answered, then waits for the rest
        assert first.poll() is None, first.stdout.read().decode()[-2000:]
    finally:
        os.killpg(first.pid, 9)  # killed while waiting for people (no clean shutdown)
        first.wait()
    before = project_tasks(url, token, project)
    keys = [t["data"]["certsel"] for t in before]
    assert len(keys) == len(set(keys)) and len(keys) <= job["labels"]["queue"] + 12
    jobs = list((tmp_path / "jobs").iterdir())
    assert len(jobs) == 1
    # a second run of the same job resumes it: the answers given are not asked for again
    with Annotator(url, token, project, CHOICES, delay=0.05) as person:
        second = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert list((tmp_path / "jobs").iterdir()) == jobs
    assert not person.done & {t["data"]["certsel"] for t in before if t["total_annotations"]}  # nothing answered twice
    sel = json.loads((tmp_path / "report" / "selection.json").read_text())
    assert sel["selected"] == "good"
    for c in sel["candidates"]:
        log = LabelLog(log_path(jobs[0], c["candidate"]), c["candidate"])
        try:
            records, rows = log.records(), log.rows()
        finally:
            log.close()
        human = rows.item[rows.role == "human"]
        assert human.size == c["labels_human"] == np.unique(human).size  # each label once
        imports = [b for k, b in records.items() if k.startswith("task/")]
        assert len({b["key"] for b in imports}) == len(imports)  # no item imported twice
        seen = [(b["seq"], b["id"]) for k, b in records.items() if k.startswith("annotation/")]
        assert len(seen) == len(set(seen))
        people = c["annotators"]
        assert people["tasks_imported"] == len(imports) and people["annotations_used"] == c["labels_human"]
    final = project_tasks(url, token, project)
    keys = [t["data"]["certsel"] for t in final]
    assert len(keys) == len(set(keys))


def bad_job(f, url, **labels):
    """A job file for tests/helpers/mistakes.attempt (the CLI: one line, exit 2, nothing left)."""
    out = write_outputs(f.path / "outputs.parquet", losses(n=100))
    job = job_dict(out, url, f.path, title=labels.pop("title", "bad input"), **labels)
    (f.path / "job.yaml").write_text(yaml.safe_dump(job))
    return ["run", str(f.path / "job.yaml"), "--no-progress"]


def test_bad_input_is_one_line_and_exit_2_before_any_task_is_imported(server, tmp_path, monkeypatch):
    from helpers.label_studio import free_port
    from helpers.mistakes import Mistake, attempt

    url, token = server
    monkeypatch.setenv("CERTSEL_TEST_LS_WRONG", "not-the-token")
    monkeypatch.delenv("CERTSEL_TEST_LS_UNSET", raising=False)
    # a project whose labelling config has nothing certsel can map to a loss
    plain = httpx.post(f"{url}/api/projects", headers=auth(token), json={
        "title": "no control", "label_config": '<View><Text name="question" value="$question"/></View>'}).json()["id"]
    wrong_choices = httpx.post(f"{url}/api/projects", headers=auth(token), json={
        "title": "other choices", "label_config": '<View><Text name="answer" value="$answer"/><Choices name="verdict" '
        'toName="answer"><Choice value="Yes"/><Choice value="No"/></Choices></View>'}).json()["id"]
    overlap_one = httpx.post(f"{url}/api/projects", headers=auth(token), json={
        "title": "one person per task", "maximum_annotations": 1, "label_config": labelling_config(
            AnswerScale("verdict", "choices", CHOICES), instructions="?", reference=True, judge=False)}).json()["id"]
    dead = f"http://127.0.0.1:{free_port()}"
    cases = [
        Mistake("Label Studio unreachable", lambda f: bad_job(f, dead), f"cannot reach Label Studio at {dead}"),
        Mistake("wrong token", lambda f: bad_job(f, url, api_key_env="CERTSEL_TEST_LS_WRONG"),
                "refused the API token (401"),
        Mistake("token variable unset", lambda f: bad_job(f, url, api_key_env="CERTSEL_TEST_LS_UNSET"),
                "environment variable CERTSEL_TEST_LS_UNSET (the Label Studio API token) is not set"),
        Mistake("project without a control", lambda f: bad_job(f, url, project=plain),
                f"project {plain}: its labelling config has no Choices or Rating control"),
        Mistake("project with other choices", lambda f: bad_job(f, url, project=wrong_choices),
                "offers ['Yes', 'No'], the job declares losses for ['Correct', 'Wrong']"),
        Mistake("project that does not exist", lambda f: bad_job(f, url, project=99999), "has no project 99999"),
        Mistake("a loss outside [0, 1]", lambda f: bad_job(f, url, choices={"Correct": 0, "Wrong": 2}),
                "the loss of choice 'Wrong' must lie in [0, 1]"),
        Mistake("a project asking fewer people than the job needs",
                lambda f: bad_job(f, url, project=overlap_one, annotators_per_item=2),
                "asks 1 annotator(s) per task (maximum_annotations), the job annotators_per_item: 2"),
        Mistake("an address that is not one", lambda f: bad_job(f, "http://[::1"), "not a usable Label Studio address"),
        Mistake("star losses that do not fit the scale",
                lambda f: bad_job(f, url, choices=None, rating={"scale": 5, "losses": [1, 0]}), "one per star"),
    ]
    for k, m in enumerate(cases):
        got = attempt(m, tmp_path / f"case{k}")
        assert got.status == 2 and got.lines == 1 and got.message.startswith("certsel: error: "), (m.what, got)
        assert m.expect in got.message, (m.what, got)
        assert got.left == [], (m.what, got)
    for project in (plain, wrong_choices, overlap_one):  # nothing was imported
        assert project_tasks(url, token, project) == []
    titles = [p["title"] for p in httpx.get(f"{url}/api/projects", headers=auth(token),
                                            params={"page_size": 100}).json()["results"]]
    assert "bad input" not in titles  # no project was created either


def test_an_answer_outside_the_declared_choices_is_refused_and_recorded(server, ray_session, tmp_path):
    url, token = server
    table = losses(seed=4)
    out = write_outputs(tmp_path / "outputs.parquet", table)
    title = f"refusals-{time.time_ns()}"
    # Label Studio calls the job when an answer comes: with a 30 s poll it would take minutes otherwise
    job = job_dict(out, url, tmp_path, title=title, webhook=True, poll=30.0)
    job["budget"] = {"n": 40, "batch": 8}
    job["candidates"] = ["good"]
    t0 = time.monotonic()
    join = start_job(tmp_path, job)
    project = wait_for_project(url, token, title)
    careless = add_annotator(url, token, f"careless-{time.time_ns()}@certsel.local")
    with Annotator(url, careless, project, CHOICES, answer=lambda loss, t: "Maybe", who="careless") as bad:
        t0 = time.monotonic()
        while len(bad.done) < 5 and time.monotonic() - t0 < 60:
            time.sleep(0.1)
    with Annotator(url, token, project, CHOICES, delay=0.02):
        result, _ = join()
    seconds = time.monotonic() - t0
    r = result.records[0]
    assert r.queue.annotations_refused == len(bad.done) >= 5
    waits = [row for row in r.rounds]  # rounds that took labels; the job waited between them
    assert seconds < 30, f"{seconds:.0f} s: the webhook did not wake the job ({len(waits)} rounds)"
    hooks = httpx.get(f"{url}/api/webhooks", headers=auth(token), params={"project": project}).json()
    assert hooks == []  # the job's webhook is deleted when it ends
    records, rows = journal(result, tmp_path, "good")
    refused = [b for k, b in records.items() if k.startswith("annotation/") and b["status"] == "refused"]
    assert all("'Maybe' is not one of the declared answers" in b["reason"] for b in refused)
    human = rows.item[rows.role == "human"]
    np.testing.assert_array_equal(rows.loss[rows.role == "human"], table["good"][human])  # never a loss from 'Maybe'


CHROMIUM = os.environ.get("CERTSEL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
PASSWORD = os.environ.get("LABEL_STUDIO_PASSWORD", "certsel-admin")  # deploy/label-studio/serve.sh's default
ANSWER = re.compile(r"answer (\d+) of good \[([01])\]")


def shot(page, name: str) -> None:
    where = os.environ.get("CERTSEL_SCREENSHOTS")
    if where:
        pathlib.Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(pathlib.Path(where) / name))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (apt install chromium, or CERTSEL_CHROMIUM)")
def test_clicks_on_the_labelling_page_become_certsel_labels(server, ray_session, tmp_path):
    """A person's clicks on Label Studio's own page become certsel labels: headless Chromium
    (Debian's ``chromium``, driven by Playwright, no browser download) logs in, opens the
    project's labelling stream, reads each answer and clicks its verdict while a real certsel
    job waits for them. With CERTSEL_SCREENSHOTS=DIR the annotator's view and certsel's report
    are saved there (docs/img has the ones docs/annotators.md shows)."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) drives the browser")
    url, token = server
    n = 60
    truth = {"good": (np.arange(n) % 10 == 3).astype(float)}  # 10% wrong answers
    out = write_outputs(tmp_path / "outputs.parquet", truth)
    title = f"browser-{time.time_ns()}"
    job = job_dict(out, url, tmp_path, title=title, queue=4,
                   instructions="Is the answer to the question correct? Compare it with the reference.")
    job["labels"]["candidates"] = [{"id": "good", "objective": 1.0}]
    job.update(alpha=0.5, budget={"n": 40, "batch": 4})
    join = start_job(tmp_path, job)
    project = wait_for_project(url, token, title)
    clicked: dict[int, str] = {}
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/user/login/")
        page.fill("input[name=email]", ADMIN)
        page.fill("input[name=password]", PASSWORD)
        page.press("input[name=password]", "Enter")
        page.wait_for_url(lambda u: "/user/login" not in u, timeout=60_000)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 300 and not join.done():  # a finished job needs no more clicks
            page.goto(f"{url}/projects/{project}/data?labeling=1")
            try:
                page.get_by_text(ANSWER).first.wait_for(timeout=15_000)
            except playwright.TimeoutError:
                if join.done():
                    break
                continue  # the job imports the next tasks once it has taken these labels
            print(f"{time.monotonic() - t0:.1f} s: a task on the page", flush=True)
            while not join.done():  # the stream: read the answer, click its verdict, submit, the next one loads
                text = page.get_by_text(ANSWER).first.inner_text()
                item, loss = ANSWER.search(text).groups()
                verdict = "Wrong" if loss == "1" else "Correct"
                # a click on the choice's label (it reads "Correct" with its hotkey: "Correct[1]")
                page.locator(f'label:has(input[type=radio][name="{verdict}"])').first.click()
                if not clicked:
                    shot(page, "annotator_view.png")
                page.get_by_role("button", name="Submit").first.click()
                clicked[int(item)] = verdict
                try:
                    page.wait_for_function(
                        "prev => !document.body.innerText.includes(prev)", arg=text, timeout=10_000)
                    page.get_by_text(ANSWER).first.wait_for(timeout=5_000)
                except playwright.TimeoutError:
                    break  # no task left for now
            if join.done():
                break
        browser.close()
    print(f"{time.monotonic() - t0:.1f} s: the browser is done", flush=True)
    result, _ = join()
    print(f"{time.monotonic() - t0:.1f} s: the job is done", flush=True)
    r = result.records[0]
    assert str(r.status) == "certified" and 0 < r.t <= len(clicked)
    records, rows = journal(result, tmp_path, "good")
    answers = {b["item"]: b for k, b in records.items() if k.startswith("annotation/") and b["status"] == "valid"}
    human = rows.item[rows.role == "human"]
    for i, loss in zip(human.tolist(), rows.loss[rows.role == "human"].tolist(), strict=True):
        assert answers[i]["answer"] == clicked[i]  # the click, as the person made it
        assert loss == {"Correct": 0.0, "Wrong": 1.0}[clicked[i]] == truth["good"][i]
    if os.environ.get("CERTSEL_SCREENSHOTS"):
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1900, "height": 1000})
            page.goto((tmp_path / "report" / "report.html").resolve().as_uri())
            shot(page, "annotators_report.png")
            browser.close()

