"""The GitHub Action (``action.yml``): its steps run end to end as a runner runs them (tests/helpers/
composite_action.py), the real ``certsel gate`` inside, the label store carried between runs by the cache actions
only (each run has a new temporary folder): the second run of a regression gate buys no baseline label. Its outputs,
step summary, ``undecided:`` input and bad input are checked too."""

import json
import sys
import subprocess
import os
import pathlib
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from helpers.composite_action import CompositeAction, Expressions, read_outputs

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def test_the_emulated_expressions_follow_githubs_rules():
    ex = Expressions({"inputs": {"cache": "true", "store": ""}, "steps": {"a": {"outputs": {"code": "3"}}}},
                     failed=False)
    assert ex.condition("inputs.cache == 'true'") and not ex.condition("inputs.store != ''")
    assert ex.value("steps.a.outputs.code == 3") is True and ex.value("inputs.cache == 'TRUE'") is True
    assert ex.value("steps.b.outputs.store == ''") is True and ex.value("steps.a.outputs.code == 'x'") is False
    assert ex.value("inputs.store || 'default'") == "default" and ex.render("k-${{ inputs.cache }}-x") == "k-true-x"
    failed = Expressions({"inputs": {"cache": "true"}}, failed=True)
    assert not failed.condition("inputs.cache == 'true'") and failed.condition("always() && inputs.cache == 'true'")
    with pytest.raises(ValueError, match="not emulated"):
        ex.value("hashFiles('x')")
    with pytest.raises(ValueError, match="not emulated"):
        ex.value("matrix.os")


def test_the_metadata_declares_what_its_steps_read(tmp_path):
    meta = yaml.safe_load((ROOT / "action.yml").read_text())
    text = (ROOT / "action.yml").read_text()
    used = {w.split(".")[1] for w in re.findall(r"inputs\.[a-z-]+", text)}
    assert used <= set(meta["inputs"]), used - set(meta["inputs"])
    assert {"exit-code", "passed", "failed", "undecided"} <= set(meta["outputs"])
    CompositeAction(ROOT, tmp_path)  # every step is one a runner takes
    (tmp_path / "o").write_text("a=1\nlist=[\"x\", \"y\"]\nblock<<EOF\none\ntwo\nEOF\na=2\n")
    assert read_outputs(tmp_path / "o") == {"a": "2", "list": '["x", "y"]', "block": "one\ntwo"}


def _table(folder: pathlib.Path) -> pathlib.Path:
    """A baseline 'v1' (accuracy 0.6) and three releases on its items: 'close' (0.05 worse, the margin itself, with
    answers of its own), 'better' (+0.2) and 'worse' (-0.15)."""
    rng = np.random.default_rng(11)
    n = 600
    base, flip = (rng.random(n) < 0.6).astype(float), rng.random(n)
    scores = {"v1": base, "close": np.where(base == 1, flip >= 0.25, flip < 0.25).astype(float),
              "better": np.where(base == 1, 1.0, flip < 0.5).astype(float),
              "worse": np.where(base == 1, flip >= 0.25, 0.0).astype(float)}
    path = folder / "scores.parquet"
    pq.write_table(pa.table({"candidate": np.repeat(list(scores), n), "item": np.tile(np.arange(n), len(scores)),
                             "score": np.concatenate(list(scores.values()))}), path)
    return path


def _workspace(tmp_path) -> pathlib.Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "gate.yaml").write_text(yaml.safe_dump({
        "data": {"path": str(_table(ws)), "score": "score"}, "policy": {"kind": "r-eval"}, "delta": 0.1,
        # the budget stop off: 'close' spends its whole budget, the labels the cache then carries
        "budget": {"n": 160, "batch": 40}, "seed": 1, "scheduling": {"budget_stop": None}}))
    return ws


@pytest.fixture
def setup(tmp_path):
    """(the workspace with its job, the action on an empty cache); the steps run the certsel on PATH."""
    if shutil.which("certsel") is None:
        pytest.skip("certsel is not on PATH")
    (tmp_path / "cache").mkdir()
    return _workspace(tmp_path), CompositeAction(ROOT, tmp_path / "cache")


def test_the_actions_steps_gate_and_carry_the_label_store_in_the_cache(setup):
    ws, action = setup
    inputs = {"job": "gate.yaml", "baseline": "v1", "margin": "0.05", "install": ""}
    # release 'close' (at the margin): undecided within 160 items, which 'undecided: pass' lets through
    one = action.run({**inputs, "only": "close", "undecided": "pass"}, ws, run_id="101")
    assert one.success, one.log()
    assert one.outputs["exit-code"] == "3" and json.loads(one.outputs["undecided"]) == ["close"], one.log()
    assert "Cache not found" in one.steps[1].log and "Cache saved" in one.steps[4].log
    first = json.loads(pathlib.Path(one.outputs["json"]).read_text())["candidates"][0]
    assert first["baseline_bought"] == first["labels"] == 160 and first["baseline_reused"] == 0
    assert "| close | ⚠️ undecided | 160 | 0 | 160 / 0 |" in one.summary, one.summary
    assert pathlib.Path(one.outputs["report"]).name == "report.html"
    # the next release, on a new runner: the store comes back from the cache, the baseline's labels with it
    two = action.run({**inputs, "only": "better"}, ws, run_id="102")
    assert two.success, two.log()
    assert "Cache restored from key: certsel-labels.default.101-1" in two.steps[1].log
    assert "label store restored from the cache entry certsel-labels.default.101-1" in two.steps[3].log
    assert two.outputs["exit-code"] == "0" and json.loads(two.outputs["passed"]) == ["better"], two.log()
    second = json.loads(pathlib.Path(two.outputs["json"]).read_text())["candidates"][0]
    paired = second["labels"] + second["reused"]
    assert 0 < paired <= 160 and second["baseline_bought"] == 0 and second["baseline_reused"] == paired, second
    assert "score - 'v1' >= " in two.summary
    # a failing release fails the step (exit 1) after the store is saved
    three = action.run({**inputs, "only": "worse"}, ws, run_id="103")
    assert not three.success and three.outputs["exit-code"] == "1", three.log()
    assert [s.outcome for s in three.steps][-2:] == ["success", "failure"] and "Cache saved" in three.steps[4].log
    assert json.loads(three.outputs["failed"]) == ["worse"]
    third = json.loads(pathlib.Path(three.outputs["json"]).read_text())["candidates"][0]
    assert third["baseline_bought"] == 0 and third["baseline_reused"] == third["labels"] + third["reused"] > 0


def test_another_workflows_cache_entries_never_restore_into_this_store(setup):
    """Another workflow's entry whose key starts with this one's prefix (``certsel-labels-nightly-...``) is not
    restored: the gate starts a new store and says so; this store's own entry is restored by the next run."""
    ws, action = setup
    other = action.cache / "certsel-labels-nightly-7-1"
    other.mkdir()
    (other / "content").write_bytes(b"another workflow's store")
    inputs = {"job": "gate.yaml", "baseline": "v1", "margin": "0.05", "install": "", "only": "better"}
    one = action.run(inputs, ws, run_id="201")
    assert one.success, one.log()
    assert "Cache not found" in one.steps[1].log
    assert "no cache entry starts with certsel-labels.default.: a new label store" in one.steps[3].log
    named = action.run({**inputs, "store-name": "nightly"}, ws, run_id="202")  # another store name: its own entries
    assert "Cache not found" in named.steps[1].log, named.log()
    two = action.run(inputs, ws, run_id="203")
    assert "Cache restored from key: certsel-labels.default.201-1" in two.steps[1].log, two.log()
    # an entry this action saved under its old key format (PREFIX-RUN-ATTEMPT) still restores when no new one exists
    shutil.copytree(action.cache / "certsel-labels.default.203-1", action.cache / "certsel-labels-150-1")
    for entry in action.cache.glob("certsel-labels.*"):
        shutil.rmtree(entry)
    old = action.run(inputs, ws, run_id="205")
    assert "Cache restored from key: certsel-labels-150-1" in old.steps[1].log, old.log()
    bad = action.run({**inputs, "cache-key": "certsel.labels"}, ws, run_id="204")
    assert not bad.success and "cache-key must be letters, digits, '_' and '-'" in bad.steps[0].log


def test_bad_input_fails_the_action_with_its_one_line(setup):
    ws, action = setup
    missing = action.run({"job": "nope.yaml", "install": ""}, ws)
    assert not missing.success and missing.outputs["exit-code"] == "2"
    assert "certsel: error:" in missing.steps[3].log and "nope.yaml" in missing.steps[3].log, missing.log()
    wrong = action.run({"job": "gate.yaml", "install": "", "undecided": "maybe"}, ws)
    assert not wrong.success and "undecided must be 'fail' or 'pass'" in wrong.steps[0].log
    assert [s.outcome for s in wrong.steps][1:] == ["skipped"] * 5, wrong.log()
    with pytest.raises(ValueError, match="Input required"):
        action.run({"install": ""}, ws)


def test_the_documented_workflow_runs_as_written(tmp_path):
    """docs/gate.md's workflow: valid YAML, its certsel step's inputs the action's, run from the checkout."""
    if shutil.which("certsel") is None:
        pytest.skip("certsel is not on PATH")
    page = (ROOT / "docs" / "gate.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "/certsel@" in b)
    workflow = yaml.safe_load(block)
    steps = workflow["jobs"]["gate"]["steps"]
    ours = next(s for s in steps if "/certsel@" in s.get("uses", ""))
    assert workflow["concurrency"]["cancel-in-progress"] is False
    (tmp_path / "cache").mkdir()
    assert "install" not in ours["with"]  # the default: the action's own checkout, at the ref `uses:` names
    # a runner's fresh Python: the step installs certsel from the action's path into it (no index serves certsel);
    # its dependencies are this environment's, seen through a .pth file, so only certsel itself is installed there
    venv = tmp_path / "runner"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "deps.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    done = CompositeAction(ROOT, tmp_path / "cache").run(ours["with"], ROOT, temp_root=tmp_path,
                                                         env={"CERTSEL_HOME": str(tmp_path / "home"), "PATH": path,
                                                              "VIRTUAL_ENV": str(venv)})
    install = next(s for s in done.steps if s.name == "install certsel")
    assert install.outcome == "success", done.log()
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import certsel; print(certsel.__file__)"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr  # the runner's certsel is the action's
    assert done.outputs["exit-code"] in ("0", "1", "3"), done.log()
    assert done.success == (done.outputs["exit-code"] == "0") and "Cache saved" in done.steps[4].log
    assert "prompt_020" in done.summary and "Series 'prompts'" in done.summary, done.summary + done.log()
