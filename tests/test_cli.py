"""The ``certsel`` console script, run as a user would (a real subprocess)."""

import json
import math
import pathlib
import shutil
import subprocess
import sys

import pytest

from certsel.orchestrator.outputs.numbers import round_down, round_up
from certsel.orchestrator.outputs.selection_schema import Selection

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

# the console script installed next to this interpreter (works without an activated venv)
CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"


def run(*args):
    return subprocess.run([CERTSEL, *args], capture_output=True, text=True, timeout=600)


def test_select_on_bundled_triviaqa(tmp_path):
    out = tmp_path / "cert.json"
    p = run("select", "--n", "150", "--r", "3", "--betting", "wsr", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "selected:" in p.stdout
    cert = json.loads(out.read_text())  # the job's certificate: selection.json's schema
    Selection.model_validate(cert)
    assert len(cert["candidates"]) == 48
    sel = next(c for c in cert["candidates"] if c["selected"])
    assert sel["certified"] and cert["selected"] == sel["candidate"]
    # FST: the certified set is a prefix of the bitwidth order, and the selection is its end
    flags = [c["certified"] for c in cert["candidates"]]
    k = flags.index(False)
    assert all(flags[:k]) and not any(flags[k:])
    assert cert["candidates"][k - 1] is sel
    assert sel["log_e_value"] >= math.log(1 / cert["procedure"]["delta"]) and sel["e_value"] >= sel["threshold"]
    assert all(c["ci"][0] <= c["ci"][1] for c in cert["candidates"])
    assert cert["data"]["sha256_16"] and cert["labels"]["budget"]["r"] * cert["labels"]["budget"]["n"] == 450
    said = " ".join(p.stdout.split())  # the console wraps long lines
    assert f"selected: {sel['candidate']} (avg_bitwidth" in said and cert["certificate"] in said


def test_select_takes_betting_parameters(tmp_path):
    """--betting NAME:KEY=VALUE: the paper's prior for UP (up:prior=exact) gives other e-values
    than the default prior, and the JSON says which was used."""
    got = {}
    for betting in ("up", "up:prior=exact"):
        out = tmp_path / f"{betting.replace(':', '_')}.json"
        p = run("select", "--n", "150", "--betting", betting, "--json", str(out), "--quiet")
        assert p.returncode == 0, p.stderr
        got[betting] = json.loads(out.read_text())
    assert got["up"]["policy"]["betting"] == "up" and got["up:prior=exact"]["policy"]["betting"] == "up(prior=exact)"
    assert [c["log_e_value"] for c in got["up"]["candidates"]] != [c["log_e_value"] for c in
                                                                     got["up:prior=exact"]["candidates"]]


def test_select_reads_the_prompt_table_with_column_options_at_bonferroni_levels(tmp_path):
    data = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / "prompts_sentiment.parquet"
    out = tmp_path / "cert.json"
    p = run("select", "--data", str(data), "--judge", "loss_judge_icl5", "--objective-col", "prompt_len",
            "--alpha", "0.3", "--n", "150", "--procedure", "bonferroni", "--json", str(out))
    assert p.returncode == 0, p.stderr
    cert = json.loads(out.read_text())
    K, delta = len(cert["candidates"]), cert["procedure"]["delta"]
    assert K == 100 and cert["objective"]["column"] == "prompt_len" and cert["procedure"]["name"] == "bonferroni"
    # the thresholds `certsel run` uses: each candidate at delta / K, its interval at that level
    assert all(c["level"] == pytest.approx(delta / K) for c in cert["candidates"])
    assert cert["evidence"]["ci_level"] == pytest.approx(1 - delta / K)
    for c in cert["candidates"]:
        assert c["certified"] == (c["log_e_value"] >= math.log(K / delta))
        assert (c["certified_at_labels"] is not None) == c["certified"]
    sel = next(c for c in cert["candidates"] if c["selected"])
    assert sel["objective"] == min(c["objective"] for c in cert["candidates"] if c["certified"])
    bad = run("select", "--data", str(data), "--objective-col", "bits")
    assert bad.returncode == 2 and "missing column 'bits' (named by --objective-col" in bad.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--alpha", "1.5"], "--alpha must be in (0, 1)"),
        (["--delta", "0"], "--delta must be in (0, 1)"),
        (["--n", "0"], "--n and --r must be positive"),
        (["--n", "5000", "--r", "3"], "need n*(1+r) = 20000 items per candidate but the table has 9960"),
        (["--judge", "nope"], "missing column 'nope' (named by --judge"),
        (["--data", "/nonexistent.parquet"], "loss table not found"),
        (["--procedure", "sidak"], "--procedure must be one of fst, bonferroni, holm"),
        (["--procedure", "pairwise"], "--procedure must be one of fst, bonferroni, holm"),
        (["--betting", "kelly"], "--betting must be one of up, wsr, ons"),
        (["--betting", "up:prior"], "--betting parameters must be KEY=VALUE"),
        (["--betting", "up:prior=beta"], "up prior must be one of"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, message):
    p = run("select", *args)
    assert p.returncode == 2
    assert message in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert p.stdout == ""


@pytest.mark.parametrize("flags, ref", [
    ([], dict(procedure="fst", betting="up")),
    (["--procedure", "bonferroni", "--betting", "wsr", "--seed", "3", "--n", "150"],
     dict(procedure="bonferroni", betting="wsr", seed=3, n=150)),
    (["--procedure", "holm", "--scheme", "r-eval", "--observation", "paper", "--order-col", "none", "--alpha", "0.12"],
     dict(procedure="holm", scheme="r-eval", observation="paper", alpha=0.12, order=None)),
])
def test_select_runs_the_engine_and_equals_the_vectorised_reference(tmp_path, flags, ref):
    """``certsel select`` is the engine on one table (in-process runtime, replay source, one
    batch per candidate); the vectorised replications (``replicated_selection``, what the
    command ran before it became a preset, and what the paper reproductions use) draw the
    same items, so every number it prints is theirs to the last bit."""
    from certsel.orchestrator.engine.replicated import candidate_intervals, replicated_selection
    from certsel.policies.procedures import get_procedure
    from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

    out = tmp_path / "cert.json"
    p = run("select", *flags, "--json", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    cert = json.loads(out.read_text())
    rows = sorted(cert["candidates"], key=lambda c: c["position"])  # the table's order
    kw = dict(n=300, seed=0, alpha=0.1, scheme="r-autoeval+", betting="up", observation="split") | ref
    table = load_loss_table(DEFAULT_TABLE, order=kw.pop("order", "rank"))
    direct = replicated_selection(table, r=3, reps=1, delta=0.1, **kw)
    ci_delta = float(get_procedure(kw["procedure"]).candidate_deltas(0.1, table.candidates.size).min())
    low, high = candidate_intervals(direct, delta=ci_delta, scheme=kw["scheme"], betting=kw["betting"])
    assert [c["candidate"] for c in rows] == table.candidates.tolist()
    for k, c in enumerate(rows):  # the certificate's numbers are the reference's, rounded as documented
        assert c["log_e_value"] == pytest.approx(max(math.log(float(direct.max_evalue[0, k])), 0.0), abs=1e-6)
        assert c["certified"] == bool(direct.certified[0, k])
        if not c["certified"]:
            assert c["certified_at_labels"] is None
        elif kw["procedure"] == "holm":  # certified at the step-down threshold in force then: at least as strict
            assert int(direct.labels_to_certify[0, k]) <= c["certified_at_labels"] <= kw["n"]  # as the final level
        else:
            assert c["certified_at_labels"] == int(direct.labels_to_certify[0, k])
        assert c["level"] == round(float(direct.levels[0, k]), 8)
        assert c["ci"] == [round_down(float(low[0, k])), round_up(float(high[0, k]))]
    sel = int(direct.selected[0])
    assert cert["selected"] == (table.candidates[sel] if sel >= 0 else None)
    if cert["evidence"] is not None:
        assert cert["evidence"]["ci_level"] == 1 - ci_delta
