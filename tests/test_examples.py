"""Every example and every documented offline command runs, as written.

Each job file in examples/ that needs no server runs through the CLI (in this process, on the module's Ray, with the
default tracking store), each Python example script as a process, and each command line of the README's and docs'
shell blocks that runs offline. A file or command that cannot run here is named with the reason (and where it does run);
one neither run nor named fails the suite, so a new example or documented command cannot be forgotten."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from certsel import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration

# job files that need a server, and where they run
NEEDS_A_SERVER = {
    "annotators.yaml": "people in Label Studio (the label_studio tier runs its queue)",
    "live_additions.yaml": "an OpenAI-compatible model server (the vllm tier serves SmolLM2)",
    "live_precision_drop.yaml": "two model servers, full and reduced precision",
    "live_ranking.yaml": "model servers and a judge",
    "live_templates.yaml": "vLLM's CPU build (deploy/cpu/setup.sh; the vllm tier)",
    "lm_eval_live.yaml": "an OpenAI-compatible completions server",
    "make_template_answers.py": "a served chat model (it writes examples/data/template_answers.parquet)",
    "__init__.py": "not an example: it makes the examples a package, so that the wheel carries them",
}
# what each offline job file is run with, and the exit status it ends with (a gate: 1 when a candidate fails)
COMMANDS = {"gate_recovery.yaml": (["gate"], {0, 1, 3}), "gate_regression.yaml": (["gate"], {0, 1, 3})}
# documented command lines that do not run here, by their start, and why
NOT_HERE = {
    "pip install": "installs (the README's first command is run without it: the suite runs installed)",
    "pytest": "the suite itself",
    "bash deploy/": "builds or serves vLLM or Label Studio (the vllm and label_studio tiers)",
    "CERTSEL_VLLM_PYTHON=": "the vllm tier (.ci/run runs it)",
    "export LABEL_STUDIO_API_KEY": "a Label Studio session",
    "git stash": "the behaviour guard's recipe (tests/test_behaviour.py compares the baseline)",
    "python benchmarks/behaviour.py": "the behaviour guard's recipe (tests/test_behaviour.py)",
    "RAY_ADDRESS=head-node": "a Ray cluster",
    "ray job submit": "a Ray cluster",
    "certsel gate tests/lmeval/": "an llm-compressor checkout and checkpoint (tests/test_gate.py reads such a config)",
    "python examples/inspect_additions.py --model vllm": "a vLLM server (the offline run is tested below)",
    "certsel inspect-table logs/": "inspect logs of a served model (tests/test_inspect_logs.py makes its own)",
    "# ": "a comment",
}


def _offline_jobs() -> list[pathlib.Path]:
    return [p for p in sorted((ROOT / "examples").glob("*.yaml")) if p.name not in NEEDS_A_SERVER]


def test_every_example_is_run_or_named_with_the_reason():
    """Job files run below; Python scripts run as documented commands (docs/inspect.md runs inspect_additions.py)."""
    files = {p.name for p in (ROOT / "examples").iterdir() if p.suffix in (".yaml", ".py")}
    assert set(NEEDS_A_SERVER) <= files, "a named example is gone"
    scripts = {pathlib.Path(w).name for _, line in _documented_lines() if (words := _runnable(line))
               and words[0] == "python" for w in words[1:2]}
    assert files - set(NEEDS_A_SERVER) == {p.name for p in _offline_jobs()} | scripts


@pytest.mark.parametrize("path", _offline_jobs(), ids=lambda p: p.name)
def test_every_offline_job_file_runs_through_the_cli(path, ray_session, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    command, codes = COMMANDS.get(path.name, (["run"], {0}))
    code = cli.main([*command, str(path.relative_to(ROOT)), "--quiet"])
    out, err = capsys.readouterr()
    assert code in codes, err
    assert "job failed" not in err and "Traceback" not in err
    head = out.strip().splitlines()
    assert head and (head[-1].startswith(("gate:", "report:", "MLflow run:")) or "selected:" in out), out[-2000:]
    if path.name == "prompts_tasks.yaml":  # the example crashed after its table once: it certifies
        assert "selected: prompt_" in out


def _documented_lines() -> list[tuple[str, str]]:
    out = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", page.read_text(), re.S):
            out += [(page.relative_to(ROOT).as_posix(), line.strip()) for line in block.splitlines() if line.strip()]
    return out


def _runnable(line: str) -> list[str] | None:
    """The certsel command a documented line runs here (its comment cut; the README's install-and-run line without
    the install), or None when it is named in NOT_HERE."""
    line = line.split("  #")[0].strip()
    if line.startswith("pip install -e . && "):
        line = line.removeprefix("pip install -e . && ")
    if any(line.startswith(start) for start in NOT_HERE):
        return None
    return shlex.split(line)


def test_every_documented_command_is_run_or_named():
    for where, line in _documented_lines():
        words = _runnable(line)
        assert words is None or words[0] in ("certsel", "python"), f"{where}: {line!r} is neither run nor named"


@pytest.mark.parametrize("where, line", [(w, x) for w, x in _documented_lines() if _runnable(x) is not None],
                         ids=lambda v: v[:60])
def test_every_documented_offline_command_runs(where, line, ray_session, tmp_path, monkeypatch, capsys):
    """As written, from the repository's root (a file the command writes goes to a scratch folder; a variable it names,
    such as $GITHUB_STEP_SUMMARY, is a scratch file)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    words = [os.path.expandvars(w) for w in _runnable(line)]
    for i, w in enumerate(words):  # outputs into the scratch folder, not the checkout
        if i and words[i - 1] in ("--junit", "--json", "--summary", "--output") and not w.startswith("/"):
            words[i] = str(tmp_path / w)
    if words[0] == "python":  # an example script, as a process of its own
        got = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "CERTSEL_HOME": str(tmp_path / "home")})
        assert got.returncode == 0, got.stderr[-2000:]
        if words[1] == "examples/inspect_additions.py":  # its three parts, the last two kept as certsel jobs
            assert "decided after" in got.stdout and got.stdout.count("kept as a certsel job") >= 2
        return
    code = cli.main(words[1:])
    err = capsys.readouterr().err
    assert code in ({0, 1, 3} if words[1] == "gate" else {0}), f"{where}: {line}: {err}"
    assert "job failed" not in err
