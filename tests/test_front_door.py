"""A newcomer's first hour: what the README's examples leave behind, and the small frictions of
issue 51 (the hints and errors a first run meets)."""

import importlib.util
import pathlib
import subprocess

import pytest

from certsel import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON_OWN = ("__pycache__", ".pytest_cache", ".egg-info")  # what the interpreter and pytest write anywhere


def untracked() -> set[str]:
    """What git sees under the clone that it does not track, ignored files included."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines()
            if line[:2] in ("??", "!!") and not any(p in line for p in PYTHON_OWN)}


@pytest.mark.integration
def test_the_readme_examples_write_nothing_under_the_clone(monkeypatch, capsys):
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
    t0 = time.monotonic()
    code = cli.main(["run", str(job)])
    took = time.monotonic() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and took < 5.0, (code, took)
    assert len(err) == 1 and err[0].startswith(f"certsel: error: live.candidates[a]: no server answers at "
                                               f"http://127.0.0.1:{port}"), err
    assert not (home / "jobs").exists() and not (home / "mlruns.db").exists()
