"""A newcomer's first hour: what the README's examples leave behind, and the small frictions of
issue 51 (the hints and errors a first run meets)."""

import importlib.util
import json
import pathlib
import subprocess

import pytest

from certsel import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON_OWN = ("__pycache__", ".pytest_cache", ".hypothesis", ".egg-info")  # the interpreter's and test tools' own


def untracked() -> set[str]:
    """What git sees under the clone that it does not track, ignored files included."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines()
            if line[:2] in ("??", "!!") and not any(p in line for p in PYTHON_OWN)}


@pytest.mark.integration
def test_the_readme_examples_write_nothing_under_the_clone(ray_session, monkeypatch, capsys):
    """The quickstart job and the inspect example, run from the clone's root as the README says:
    caches, logs, job folders and the MLflow store go to certsel's home, none into the clone."""
    if subprocess.run(["git", "rev-parse"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git clone")
    before = untracked()
    monkeypatch.chdir(ROOT)
    assert cli.main(["run", "examples/quantization.yaml", "--quiet"]) == 0
    spec = importlib.util.spec_from_file_location("inspect_additions", ROOT / "examples" / "inspect_additions.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.one_task(example.parser().parse_args([]))  # the example's single task, with its default log folder
    out = capsys.readouterr().out
    assert "decided after" in out  # the one-liner says when the test decided
    assert untracked() - before == set()


@pytest.mark.integration
def test_an_unreachable_server_is_refused_in_seconds_before_anything_exists(tmp_path, monkeypatch, capsys):
    """A live job whose running server does not answer: one line naming the key, exit 2, within
    5 s (a request would retry for half a minute), and no job folder, Ray or tracking run."""
    import socket
    import time

    import yaml

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path / "home"
    monkeypatch.setenv("CERTSEL_HOME", str(home))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "name": "unreachable", "policy": {"kind": "r-eval"}, "alpha": 0.5, "budget": {"n": 20},
        "live": {"items": str(ROOT / "examples" / "data" / "additions.jsonl"), "loss": "numeric",
                 "candidates": [{"id": "a", "base_url": f"http://127.0.0.1:{port}", "model": "m",
                                 "template": "{question} ="}]}}))
    import certsel.orchestrator.commands.job  # noqa: F401  (imports warm: the clock measures the check, not a loaded CI's imports)

    t0 = time.monotonic()
    code = cli.main(["run", str(job)])
    took = time.monotonic() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and took < 5.0, (code, took)
    assert len(err) == 1 and err[0].startswith(f"certsel: error: live.candidates[a]: no server answers at "
                                               f"http://127.0.0.1:{port}"), err
    assert not (home / "jobs").exists() and not (home / "mlruns.db").exists()


@pytest.mark.integration
def test_a_finished_job_run_again_is_shown_and_fresh_runs_it_again(ray_session, tmp_path, monkeypatch, capsys):
    """The same configuration and data a second time: the finished job's certificate, at once,
    without a second job folder; ``--fresh`` computes it again under a new id."""
    import json
    import time

    from helpers.cli import job_file, small_table

    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    small_table(tmp_path / "t.parquet")
    job = job_file(tmp_path)
    assert cli.main(["run", str(job), "--quiet"]) == 0
    first = capsys.readouterr().out
    jobs = tmp_path / "home" / "jobs"
    [folder] = list(jobs.iterdir())
    t0 = time.monotonic()
    assert cli.main(["run", str(job), "--format", "json"]) == 0
    took = time.monotonic() - t0
    again = capsys.readouterr()
    assert f"job {folder.name} already finished" in again.err and "--fresh" in again.err
    # the finished job's certificate, marked as answered by it (no label bought now)
    assert json.loads(again.out) == {**json.loads((folder / "selection.json").read_text()), "answered_by": folder.name}
    assert list(jobs.iterdir()) == [folder] and took < 10
    assert cli.main(["run", str(job), "--fresh", "--quiet"]) == 0
    assert len(list(jobs.iterdir())) == 2 and "already finished" not in capsys.readouterr().out
    assert "selected:" in first


@pytest.mark.integration
def test_a_job_whose_every_source_failed_is_failed_and_its_rerun_resumes_it(ray_session, tmp_path, monkeypatch,
                                                                           capsys):
    """Every candidate's server hangs up once the job has started: no candidate is evaluated, the
    job is recorded as failed (not finished), no line claims labels were saved, and running it
    again resumes the same folder."""
    import yaml

    from helpers.jobs import write_job
    from helpers.servers import adder_server

    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    with adder_server() as (url, _):
        path = write_job(tmp_path, url)
        job = yaml.safe_load(path.read_text())
        for c in job["live"]["candidates"]:
            c.update(model="hangup", max_retries=0, timeout=2.0)
        job["policy"], job["budget"] = {"kind": "r-eval"}, {"n": 20, "batch": 10}
        del job["live"]["judge"]
        path.write_text(yaml.safe_dump(job))
        assert cli.main(["run", str(path)]) == 1
        out = capsys.readouterr()
        assert "no candidate could be evaluated" in out.err and "saved" not in out.out
        assert "every candidate's source failed" in out.out
        [folder] = list((tmp_path / "home" / "jobs").iterdir())
        meta = json.loads((folder / "job.json").read_text())
        assert meta["status"] == "failed" and not meta.get("finished")
        assert cli.main(["run", str(path)]) == 1
        out = capsys.readouterr()
        assert f"resuming job {folder.name}" in out.out
        assert list((tmp_path / "home" / "jobs").iterdir()) == [folder]


@pytest.mark.integration
def test_long_commands_show_progress_when_piped(ray_session, tmp_path, monkeypatch, capsys):
    """Where no live bar can be drawn (output to a pipe or a file, as here under capsys), a plain
    progress line comes every few seconds (here every update), with no carriage return."""
    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cli.progress, "PROGRESS_EVERY", 0.0)
    from helpers.cli import job_file, small_table

    small_table(tmp_path / "t.parquet")
    job = job_file(tmp_path)
    cli.main(["audit", str(job), "--reps", "300", "--no-tracking", "--workers", "1"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("certsel audit: ")]
    assert len(lines) >= 2 and lines[-1].startswith("certsel audit: 300/300 repetitions") and "\r" not in err
    assert cli.main(["run", str(job), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert any(x.startswith("certsel run: round ") and "human labels" in x for x in err.splitlines()), err
