"""The worked example of docs/annotators.md: examples/annotators.yaml against a running Label
Studio, with one person's grades (examples/data/template_grades.json, written before any job
ran) typed in through the REST API as the job asks for them, so that the run is repeatable.

    bash deploy/label-studio/serve.sh .venv-label-studio .label-studio 8080 &
    LABEL_STUDIO_API_KEY=certsel-development-token-0123456789 python benchmarks/annotators_example.py

Prints the selection, each template's labels used, tasks imported and withdrawn, and the
grades a fixed 60 per template would have needed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import threading
import time

import httpx
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def typist(url: str, token: str, title: str, grades: dict, stop: threading.Event, done: list) -> None:
    """Answers each task of the project with the recorded grade of its answer."""
    http = httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=30)
    project = None
    while not stop.is_set():
        if project is None:
            got = http.get("/api/projects", params={"page_size": 100}).json()["results"]
            project = next((p["id"] for p in got if p["title"] == title), None)
            stop.wait(0.2)
            continue
        tasks = http.get("/api/tasks", params={"project": project, "page_size": 500, "fields": "all"}).json()["tasks"]
        for t in tasks:
            if t["annotations"]:
                continue
            d = t["data"]
            who = next(c for c, g in grades.items() if d["answer"] in g["answers"].get(d["item_id"], ()))
            verdict = grades[who]["grades"][d["item_id"]]
            r = http.post(f"/api/tasks/{t['id']}/annotations", json={"result": [
                {"from_name": "verdict", "to_name": "answer", "type": "choices", "value": {"choices": [verdict]}}]})
            if r.status_code == 201:
                done.append(verdict)
            time.sleep(0.3)  # a quick person
        stop.wait(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--title", default=f"Templates {time.strftime('%Y-%m-%d %H:%M:%S')}")
    ap.add_argument("--report", type=pathlib.Path, default=None, help="keep the job's report here")
    args = ap.parse_args()
    from certsel.config import load_config
    from certsel.orchestrator.commands.job import execute
    import pyarrow.parquet as pq

    token = os.environ["LABEL_STUDIO_API_KEY"]
    recorded = json.loads((ROOT / "examples/data/template_grades.json").read_text())["grades"]
    rows = pq.read_table(ROOT / "examples/data/template_answers.parquet").to_pylist()
    grades = {c: {"grades": g, "answers": {}} for c, g in recorded.items()}
    for r in rows:
        grades[r["candidate"]]["answers"].setdefault(r["item"], set()).add(r["answer"])
    job = yaml.safe_load((ROOT / "examples/annotators.yaml").read_text())
    job["labels"].update(url=args.url, outputs=str(ROOT / "examples/data/template_answers.parquet"),
                         project={"title": args.title})
    with tempfile.TemporaryDirectory() as tmp:
        job["state"] = {"dir": f"{tmp}/jobs"}
        job["tracking"] = {"uri": f"sqlite:///{tmp}/mlflow.db"}
        path = pathlib.Path(tmp) / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        stop, done = threading.Event(), []
        th = threading.Thread(target=typist, args=(args.url, token, args.title, grades, stop, done), daemon=True)
        th.start()
        t0 = time.monotonic()
        try:
            result, _ = execute(load_config(path), output=args.report or pathlib.Path(tmp) / "report")
        finally:
            stop.set()
            th.join(30)
        print(f"selected: {result.selected}   ({time.monotonic() - t0:.0f} s, {len(done)} grades typed in)")
        for r in result.records:
            q = r.queue
            print(f"  {r.name}: {r.status}, {r.t} labels used ({r.reason}); tasks imported {q.tasks_imported}, "
                  f"withdrawn {q.tasks_withdrawn}; answers unused {q.annotations_unused}")
        print(f"grades asked for: {sum(r.queue.tasks_imported - r.queue.tasks_withdrawn for r in result.records)} "
              f"of {len(rows)} (a fixed 60 per template)")


if __name__ == "__main__":
    main()
