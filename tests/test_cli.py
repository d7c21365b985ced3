"""The ``certsel`` console script, run as a user would (a real subprocess)."""

import json
import math
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from certsel.orchestrator.outputs.numbers import round_down, round_up
from certsel.orchestrator.outputs.selection_schema import Certificate
from helpers.jobs import table_certificate

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

# the console script installed next to this interpreter (works without an activated venv)
CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"


def run(*args):
    return subprocess.run([CERTSEL, *args], capture_output=True, text=True, timeout=600)


def test_a_table_job_on_bundled_triviaqa():
    cert = table_certificate(n=150, r=3, betting="wsr").as_json()  # the job's certificate: selection.json's schema
    Certificate.model_validate(cert)
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


def test_betting_parameters_reach_the_certificate():
    """The paper's prior for UP (prior exact) gives other e-values than the default prior, and
    the certificate says which was used."""
    got = {b if isinstance(b, str) else "exact": table_certificate(n=150, betting=b).as_json()
           for b in ("up", {"kind": "up", "prior": "exact"})}
    assert got["up"]["policy"]["betting"] == "up" and got["exact"]["policy"]["betting"] == "up(prior=exact)"
    assert [c["log_e_value"] for c in got["up"]["candidates"]] != [c["log_e_value"] for c in
                                                                     got["exact"]["candidates"]]


def test_a_prompt_table_at_bonferroni_levels():
    data = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / "prompts_sentiment.parquet"
    cert = table_certificate(data, judge="loss_judge_icl5", objective="prompt_len", order=None, alpha=0.3,
                             n=150, procedure="bonferroni").as_json()
    K, delta = len(cert["candidates"]), cert["procedure"]["delta"]
    assert K == 100 and cert["objective"]["column"] == "prompt_len" and cert["procedure"]["name"] == "bonferroni"
    # each candidate at delta / K, its interval at that level
    assert all(c["level"] == pytest.approx(delta / K) for c in cert["candidates"])
    assert cert["evidence"]["ci_level"] == pytest.approx(1 - delta / K)
    for c in cert["candidates"]:
        assert c["certified"] == (c["log_e_value"] >= math.log(K / delta))
        assert (c["certified_at_labels"] is not None) == c["certified"]
    sel = next(c for c in cert["candidates"] if c["selected"])
    assert sel["objective"] == min(c["objective"] for c in cert["candidates"] if c["certified"])


@pytest.mark.parametrize("ref", [
    dict(procedure="fst", betting="up"),
    # in the names' order the sequence fails early: the later candidates pass their own tests, out of the set
    dict(procedure="fst", n=150, order=None),
    dict(procedure="bonferroni", betting="wsr", seed=3, n=150),
    dict(procedure="holm", scheme="r-eval", observation="paper", alpha=0.12, order=None),
])
def test_the_engine_on_a_table_equals_the_vectorised_reference(ref):
    """The engine on one table (in-process runtime, replay source, one batch per candidate) and
    the vectorised replications (``replicated_selection``, what the paper reproductions use)
    draw the same items, so every number of its certificate is theirs, rounded as the
    certificate documents (bounds outward to 6 decimals, levels to 8)."""
    from helpers.replicated import candidate_intervals, replicated_selection
    from certsel.policies import log_evalue_paths, scheme_rhos
    from certsel.policies.procedures import get_procedure
    from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

    kw = dict(n=300, seed=0, alpha=0.1, scheme="r-autoeval+", betting="up", observation="split") | ref
    cert = table_certificate(**kw).as_json()
    Certificate.model_validate(cert)
    rows = sorted(cert["candidates"], key=lambda c: c["position"])  # the table's order
    table = load_loss_table(DEFAULT_TABLE, order=kw.pop("order", "rank"))
    direct = replicated_selection(table, r=3, reps=1, delta=0.1, **kw)
    proc = get_procedure(kw["procedure"])
    K = table.candidates.size
    ci_delta = float(proc.candidate_deltas(0.1, K).min())
    low, high = candidate_intervals(direct, delta=ci_delta, scheme=kw["scheme"], betting=kw["betting"])
    # the labels at which the engine certified: the first crossing of the threshold in force when it
    # certified (the reference counts against the final level; Holm's step-down is stricter before)
    paths = log_evalue_paths(*direct.samples, alpha=kw["alpha"], delta=0.1, rhos=scheme_rhos(kw["scheme"]),
                             betting=kw["betting"], observation=kw["observation"])[0]
    np.testing.assert_allclose(paths.max(axis=-1), np.log(direct.max_evalue[0]), rtol=0, atol=1e-12)
    in_force, passed = np.full(K, np.nan), np.zeros(K, dtype=bool)
    while True:  # the engine's passes over one round (every candidate's whole budget in one batch)
        th = proc.log_thresholds(0.1, passed)
        new = ~passed & (paths.max(axis=-1) >= th)
        if not new.any():
            break
        in_force[new], passed = th[new], passed | new
    assert [c["candidate"] for c in rows] == table.candidates.tolist()
    assert sum(c["certified"] for c in rows) == int(direct.certified[0].sum()) > 0
    for k, c in enumerate(rows):  # the certificate's numbers are the reference's, rounded as documented
        assert c["log_e_value"] == pytest.approx(max(math.log(float(direct.max_evalue[0, k])), 0.0), abs=1e-6)
        assert c["certified"] == bool(direct.certified[0, k])
        assert c["level"] == round(float(direct.levels[0, k]), 8)
        assert c["threshold"] == round(1 / float(direct.levels[0, k]), 4)
        assert c["ci"] == [round_down(float(low[0, k])), round_up(float(high[0, k]))]
        # a candidate that passed its own test is stated with its labels, in the set or not (fst: out of the
        # set after an earlier failure, its status says so); one that never passed has none
        assert (c["certified_at_labels"] is not None) == bool(passed[k]) >= c["certified"]
        assert c["status"] == ("certified" if c["certified"] else "stopped" if passed[k] else "not certified")
        if passed[k]:
            assert c["certified_at_labels"] == int(np.flatnonzero(paths[k] >= in_force[k])[0]) + 1
        if kw["procedure"] == "holm" and c["certified"]:  # never fewer labels than at the final level
            assert int(direct.labels_to_certify[0, k]) <= c["certified_at_labels"] <= kw["n"]
        elif kw["procedure"] != "holm":  # one fixed level: the reference's first crossings exactly
            assert c["certified_at_labels"] == (int(direct.labels_to_certify[0, k]) or None)
    sel = int(direct.selected[0])
    assert cert["selected"] == (table.candidates[sel] if sel >= 0 else None)
    assert cert["certified_set"] == [n for n, ok in zip(table.candidates, direct.certified[0]) if ok]
    assert (cert["evidence"] is None) == (sel < 0)
    if cert["evidence"] is not None:
        assert cert["evidence"]["ci_level"] == 1 - ci_delta
        assert cert["evidence"]["ci"] == rows[sel]["ci"] and cert["evidence"]["log_e_value"] == rows[sel]["log_e_value"]


def test_show_renders_a_job_folder_certificate_and_refuses_one_off_the_schema(tmp_path):
    """``certsel show`` types the file it reads (a job's selection.json here, from its folder in
    certsel's home) before rendering it: the same certificate back in every format, and a file
    that does not validate is one line naming the file and the field, exit 2."""
    good = json.loads(json.dumps(table_certificate(n=50).as_json()))
    home, job_id = tmp_path / "home", "0f1e2d3c4b5a69788796a5b4"
    folder = home / "jobs" / job_id
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({"job_id": job_id}))
    path = folder / "selection.json"

    def show(text, *fmt):
        path.write_text(text)
        return run("show", job_id[:6], "--home", str(home), *fmt)

    s = show(json.dumps(good), "--format", "json")
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout) == good  # what was set, and only that, as the file has it
    s = run("show", job_id[:6], "--home", str(home), "--format", "csv")
    assert s.returncode == 0 and len(s.stdout.splitlines()) == 1 + len(good["candidates"]), s.stderr
    s = run("show", job_id[:6], "--home", str(home))
    said = " ".join(s.stdout.split())
    obj = next(c["objective"] for c in good["candidates"] if c["candidate"] == good["selected"])
    head = f"selected: {good['selected']} ({good['objective']['column']} {obj:g})"
    assert s.returncode == 0 and f"{head} — {good['certificate']}" in said, s.stderr
    cand = dict(good["candidates"][0], e_value="large")
    for text, match in [
        (json.dumps({k: v for k, v in good.items() if k != "procedure"}), "schema at procedure: Field required"),
        (json.dumps(dict(good, schema_version=1)), "schema at schema_version: "),
        (json.dumps(dict(good, candidates=[cand, *good["candidates"][1:]])), "schema at candidates.0.e_value: "),
        (json.dumps(dict(good, verdict="yes")), "schema at verdict: Extra inputs are not permitted"),
        (json.dumps(good)[:-10], "is not JSON"),
        (json.dumps([good]), "is not a certificate (a JSON list, not an object)"),
    ]:
        s = show(text)
        assert s.returncode == 2, (match, s.returncode, s.stderr)
        lines = s.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"certsel: error: {path}"), s.stderr
        assert match in lines[0] and s.stdout == "", lines[0]


def test_the_console_script_ends_with_every_output_whole_and_its_exit_status(tmp_path):
    """`certsel` ends without the interpreter's teardown (certsel.cli.command): what it wrote is whole when it has
    exited (the JSON, the JUnit file, the MLflow run FINISHED in a new store), and its exit status is the gate's."""
    import xml.etree.ElementTree as ET

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/store.db"
    p = subprocess.run([CERTSEL, "gate", "examples/gate_recovery.yaml", "--only", "mx_m7_r4_k16", "--json",
                        str(tmp_path / "g.json"), "--junit", str(tmp_path / "g.xml"), "--set", f"tracking.uri={uri}"],
                       capture_output=True, text=True, timeout=600, env={**__import__("os").environ,
                                                                         "CERTSEL_HOME": str(tmp_path / "home")})
    out = json.loads((tmp_path / "g.json").read_text())
    assert p.returncode == out["exit_code"] and p.returncode in (0, 1, 3), p.stderr
    assert ET.parse(tmp_path / "g.xml").getroot().iter("testcase")
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs and {r.info.status for r in runs} == {"FINISHED"}  # the job's run and its candidate's
    assert pathlib.Path(out["files"]["report"]).stat().st_size > 0
    bad = subprocess.run([CERTSEL, "gate", "examples/gate_recovery.yaml", "--set", "alpah=0.1"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
