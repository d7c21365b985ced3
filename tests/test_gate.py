"""``certsel gate``: a job's candidates each decided on their own as pass, fail or undecided.

The procedure and its outcomes against their definitions, the exit statuses 0/1/2/3 of the
command (in-process, a real Ray), the files CI reads (JSON, JUnit XML read back by a JUnit
parser, Markdown), and the type-I error of ``pass`` at the boundary over 2,000 simulated runs."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from junitparser import Failure, JUnitXml, Skipped

from certsel import cli
from certsel.config import ConfigError, parse_config
from certsel.gates import as_gate, gate_config
from certsel.orchestrator.results.outcomes import Outcome, gate_exit_code
from certsel.policies.autoeval import log_evalue_paths
from certsel.policies.procedures import get_procedure
from certsel.policies.recovery import Recovery
from certsel.workers.replay import DATA_DIR

DATA = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
ROOT = DATA_DIR.parents[1]


def _table(tmp_path, n_items=400):
    """Three candidates with losses of known mean: good 0.02, borderline 0.2, bad 0.6."""
    rng = np.random.default_rng(7)
    rows = {"candidate": [], "item": [], "loss_human": []}
    for name, mean in (("good", 0.02), ("borderline", 0.2), ("bad", 0.6)):
        loss = np.zeros(n_items)
        loss[rng.permutation(n_items)[: round(mean * n_items)]] = 1.0
        rows["candidate"] += [name] * n_items
        rows["item"] += list(range(n_items))
        rows["loss_human"] += loss.tolist()
    path = tmp_path / "losses.parquet"
    pq.write_table(pa.table(rows), path)
    return path


def _job(tmp_path, n=60):
    path = tmp_path / "gate.yaml"
    path.write_text(f"data: {{path: {_table(tmp_path)}}}\npolicy: {{kind: r-eval}}\nalpha: 0.2\ndelta: 0.1\n"
                    f"budget: {{n: {n}, batch: 20}}\nseed: 3\nstate: {{dir: {tmp_path / 'jobs'}}}\n"
                    f"tracking: {{uri: 'sqlite:///{tmp_path}/mlruns.db'}}\n")
    return path


def test_outcomes_and_exit_codes_follow_their_definitions():
    assert Outcome.of("certified", True) is Outcome.PASS
    assert Outcome.of("futile", False) is Outcome.FAIL and Outcome.of("above alpha", False) is Outcome.FAIL
    for status in ("not certified", "source failed", "worker lost", "stopped"):
        assert Outcome.of(status, False) is Outcome.UNDECIDED
    assert gate_exit_code(["pass", "pass"]) == 0
    assert gate_exit_code(["pass", "undecided"]) == 3
    assert gate_exit_code(["undecided", "fail", "pass"]) == 1


def test_the_gate_procedure_tests_each_candidate_at_delta_and_selects_none():
    proc = get_procedure("gate")
    np.testing.assert_array_equal(proc.candidate_deltas(0.1, 4), np.full(4, 0.1))
    log_e = np.log([9.0, 10.0, 11.0, 1.0])
    np.testing.assert_array_equal(proc.certified(log_e, 0.1), [False, True, True, False])
    assert proc.selection(np.array([True, True]), None) == -1
    # no simultaneous statement: a gate's bounds are each candidate's own
    assert np.isnan(proc.joint_levels(0.1, np.array([True, False]))).all()
    assert np.isnan(proc.simultaneous_bounds(0.1, 0.1, np.array([True, False]), np.array([0.05, 0.3]))).all()


def test_a_gate_fails_at_delta_and_says_so_when_the_job_file_set_another_futility(tmp_path):
    raw = {"data": {"path": str(_table(tmp_path))}, "policy": {"kind": "r-eval"}, "alpha": 0.2, "delta": 0.05,
           "procedure": "gate"}
    assert parse_config(raw).scheduling.futility == 0.05  # the gate's level, not DEFAULT_FUTILITY
    with pytest.raises(ConfigError, match="scheduling.futility must be delta"):
        parse_config({**raw, "scheduling": {"futility": 0.2}})
    said = []
    gated = as_gate({**raw, "procedure": "fst", "order": ["good", "bad", "borderline"],
                     "scheduling": {"futility": 0.2, "start": "pilot"}}, only=["good"], warn=said.append)
    assert gated["procedure"] == "gate" and "order" not in gated and gated["scheduling"] == {}
    assert gated["candidates"] == ["good"] and said[0].startswith("order, scheduling.start: a selection's keys")
    assert "futility 0.2" in said[1]
    said.clear()
    as_gate({**raw, "scheduling": {"futility": None}}, warn=said.append)  # "no early stop" is a selection's too
    assert said == ["scheduling.futility None is the selection's early stop; a gate fails a candidate when the "
                    "opposite of its claim is certified at delta = 0.05"]
    assert gate_config(raw, only=["bad"]).candidates == ["bad"]
    with pytest.raises(ConfigError, match="procedure 'gate' gates each candidate on one table"):
        from certsel.config import load_config

        load_config(ROOT / "examples" / "prompts_aggregate.yaml", ["procedure=gate", "objective=null"])


@pytest.mark.integration
def test_the_command_exits_0_1_3_and_2_and_writes_what_ci_reads(tmp_path, capsys):
    job = _job(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    base = ["gate", str(job), "--no-tracking", "--home", str(tmp_path / "home")]
    assert cli.main([*base, "--only", "good", "--json", str(out / "good.json")]) == 0
    got = json.loads((out / "good.json").read_text())
    assert got["exit_code"] == 0 and got["passed"] == ["good"]
    (row,) = got["candidates"]
    assert row["outcome"] == "pass" and row["labels"] <= 60 and row["reused"] == 0
    assert row["bound_side"] == "upper" and row["bound"] <= 0.2 and row["e_value"] >= 10
    assert cli.main([*base, "--only", "good", "--only", "borderline"]) == 3
    assert cli.main([*base, "--json", str(out / "all.json"), "--junit", str(out / "all.xml"),
                     "--summary", str(out / "summary.md")]) == 1
    text = capsys.readouterr().out
    assert "FAIL      bad:" in text and "gate: 1 pass, 1 fail, 1 undecided (exit 1)" in text
    got = json.loads((out / "all.json").read_text())
    assert (got["passed"], got["failed"], got["undecided"]) == (["good"], ["bad"], ["borderline"])
    bad = next(c for c in got["candidates"] if c["candidate"] == "bad")
    assert bad["fail_e_value"] >= 10 and bad["labels"] < 60  # the fail test reached 1/delta and stopped it early
    # JUnit XML, read back by a JUnit parser: a test case per candidate, fail as failure, undecided as skipped
    xml = JUnitXml.fromfile(str(out / "all.xml"))
    (suite,) = list(xml)
    assert suite.name == f"certsel gate: {job.stem}" and xml.failures == 1
    cases = {case.name: case for case in suite}
    assert set(cases) == {"good", "borderline", "bad"}
    assert cases["good"].is_passed
    assert isinstance(cases["bad"].result[0], Failure)
    assert cases["bad"].result[0].message.startswith("fail: R >= 0.2 certified at level 0.1 after ")
    assert isinstance(cases["borderline"].result[0], Skipped)
    assert suite.tests == 3 and suite.failures == 1 and suite.skipped == 1
    md = (out / "summary.md").read_text()
    assert md.startswith("### gate: 1 pass, 1 fail, 1 undecided (exit 1)") and "| bad | ❌ fail |" in md
    # a FAIL row shows what its terminal line shows: the fail test's certified opposite and its e-value
    (bad_row,) = [line for line in md.splitlines() if line.startswith("| bad |")]
    assert bad_row.endswith(f"| R >= 0.2 certified | {bad['fail_e_value']:.3g} / 10 |"), bad_row
    assert f"R >= 0.2 certified (fail e-value {bad['fail_e_value']:.3g} / 10)" in text
    # bad input: nothing runs, exit 2 with one line naming the problem
    assert cli.main([*base, "--only", "nobody"]) == 2
    assert "--only: unknown candidate(s)" in capsys.readouterr().err
    assert cli.main([*base, "--junit", str(tmp_path / "missing" / "x.xml")]) == 2


def _boundary_scores(rng, reps, n, r, p_ref=0.7, disagree=0.1):
    """Paired scores with E[s] / E[s_ref] = r exactly: s_ref ~ Bernoulli(p_ref), and s copies
    s_ref except on a share of items where it is redrawn so that E[s] = r p_ref."""
    ref = (rng.random((reps, n)) < p_ref).astype(float)
    redraw = rng.random((reps, n)) < disagree
    # E[s] = (1 - disagree) p_ref + disagree q = r p_ref  ->  q
    q = (r * p_ref - (1 - disagree) * p_ref) / disagree
    assert 0 <= q <= 1
    s = np.where(redraw, (rng.random((reps, n)) < q).astype(float), ref)
    return s, ref


@pytest.mark.slow
@pytest.mark.parametrize("r", [0.95, 0.9])
def test_pass_at_the_boundary_is_wrong_at_most_delta_of_the_time(r):
    """2,000 runs of the gate's test with a true recovery of exactly r and a budget of 1,000
    items: a pass needs the e-process to reach 1/delta at some point of the budget (the fail
    test stopping it earlier only lowers the rate), so the rate of that event bounds the
    type-I error of pass. A rate above delta fails the test when its 99% Clopper-Pearson lower
    bound is above delta (the audit's verdict "failed"); the rate itself is checked against
    delta too, so that a test near its level cannot hide in the interval's width."""
    from scipy.stats import beta

    delta, reps, n = 0.1, 2000, 1000
    claim = Recovery(r)
    s, ref = _boundary_scores(np.random.default_rng(11), reps, n, r)
    losses = claim.losses(s, ref)
    log_e = log_evalue_paths(losses, alpha=claim.alpha, delta=delta, rhos=(0.0,), betting="up", horizon=n,
                             observation="split")
    passes = int(np.sum(log_e.max(axis=1) >= np.log(1 / delta)))
    lower = beta.ppf(0.01, passes, reps - passes + 1) if passes else 0.0
    assert lower <= delta and passes / reps <= delta, f"{passes} passes in {reps} runs at the boundary"


@pytest.mark.integration
def test_assert_certified_passes_fails_and_skips(tmp_path):
    from certsel.testing import assert_certified

    job = _job(tmp_path)
    res = assert_certified(job, only=["good"])
    assert res.passed and res.outcomes == {"good": "pass"}
    with pytest.raises(AssertionError, match=r"1 candidate\(s\) failed\nFAIL      bad: "):
        assert_certified(job, only=["bad", "good"])
    with pytest.raises(pytest.skip.Exception, match="undecided within the budget\nUNDECIDED borderline: "):
        assert_certified(job, only=["borderline"])


LLMC = """\
cadence: "weekly"
model: meta-llama/Meta-Llama-3-8B-Instruct
scheme: FP8_DYNAMIC
lmeval:
  model: vllm
  task: gsm8k
  num_fewshot: 5
  limit: 1000
  apply_chat_template: false
  dtype: bfloat16
  add_bos_token: true
  max_model_len: 2048
  recovery_threshold: 0.95
  metrics:
    exact_match,flexible-extract: 0.75
    exact_match,strict-match: 0.75
"""


def test_an_llm_compressor_config_is_read_as_it_is(tmp_path):
    path = tmp_path / "fp8_dynamic_per_token.yaml"
    path.write_text(LLMC)
    cfg = gate_config(path, compressed="out/Meta-Llama-3-8B-Instruct-FP8_DYNAMIC")
    opts = cfg.labels.options
    assert (cfg.procedure, cfg.recovery.at_least, cfg.budget.n) == ("gate", 0.95, 1000)
    assert (opts["task"], opts["metric"], opts["filter"]) == ("gsm8k", "exact_match", "flexible-extract")
    (cand,) = opts["candidates"]
    assert cand["id"] == "Meta-Llama-3-8B-Instruct-FP8_DYNAMIC" and cand["model"] == "vllm"
    assert cand["num_fewshot"] == 5
    assert cand["model_args"] == ("pretrained=out/Meta-Llama-3-8B-Instruct-FP8_DYNAMIC,dtype=bfloat16,"
                                  "add_bos_token=True,max_model_len=2048")
    assert opts["reference"]["model_args"].startswith("pretrained=meta-llama/Meta-Llama-3-8B-Instruct,")
    assert cfg.recovery_reference == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert gate_config(path, ["budget.n=300"], compressed="ckpt", base="other/base").budget.n == 300
    # a per-metric threshold, and the older flat form
    path.write_text(LLMC.replace("recovery_threshold: 0.95", "recovery_threshold:\n    exact_match,flexible-extract: 0.9"))
    assert gate_config(path, compressed="ckpt").recovery.at_least == 0.9
    path.write_text("model: org/base\nmodel_args: {dtype: float16}\ntask: arc_easy\nnum_fewshot: 0\nlimit: 500\n"
                    "recovery_threshold: 0.97\n")
    cfg = gate_config(path, compressed="ckpt")
    assert (cfg.labels.options["task"], cfg.budget.n, cfg.recovery.at_least) == ("arc_easy", 500, 0.97)
    assert cfg.labels.options["candidates"][0]["model_args"] == "pretrained=ckpt,dtype=float16"
    with pytest.raises(Exception, match="give it"):
        gate_config(path)


@pytest.mark.integration
def test_an_llm_compressor_gate_decides_on_a_recorded_table(tmp_path):
    """The config's job with a recorded table standing in for the model runs: the quantization
    table's scores of a config at recovery 1.00 and one at 0.40 against full precision."""
    from certsel.config.llmcompressor import gate_job
    from certsel.gates import gate
    import yaml

    trivia = pq.read_table(DATA).to_pandas()
    keep = {"mx_m8_r4_k64": "w8-good", "mx_m3_r2_k16": "w3-bad"}
    rows = trivia[trivia.candidate.isin(keep)].assign(candidate=lambda d: d.candidate.map(keep))
    table = tmp_path / "recorded.parquet"
    rows[["candidate", "item", "score_human", "score_fp_human"]].to_parquet(table)
    job = gate_job(yaml.safe_load(LLMC), compressed="ckpt", name="llmc")
    job.pop("labels")
    job.update(data={"path": str(table), "score": "score_human", "reference": "score_fp_human"},
               state={"dir": str(tmp_path / "jobs")})
    res = gate(job, track=False)
    assert res.outcomes == {"w8-good": "pass", "w3-bad": "fail"} and res.exit_code == 1
    assert all(r.labels < 1000 for r in res.rows)  # decided well before llm-compressor's 1,000 documents


@pytest.mark.integration
def test_a_second_gate_on_the_same_model_reuses_every_label_and_buys_none(tmp_path):
    """Through a real Ray and the durable label log: the rerun (a new job: --fresh) takes every
    label from the store, bought none, and decides the same; the label log marks them."""
    from certsel.gates import gate

    store = tmp_path / "labels.db"
    first = gate(_job(tmp_path), labels=store, track=False)
    second = gate(_job(tmp_path), labels=store, track=False, fresh=True)
    assert second.job_id != first.job_id and second.outcomes == first.outcomes
    for a, b in zip(first.rows, second.rows, strict=True):
        assert a.reused == 0 and a.labels > 0
        assert (b.labels, b.reused) == (0, a.labels)  # every label reused, none bought
        assert (b.e_value, b.bound) == (a.e_value, a.bound)
    assert all(c.requests == 0 for c in second.selection.candidates)
    assert all(c.simultaneous_bound is None for c in second.selection.candidates)  # per candidate, not joint
    labels = pq.read_table(second.output_dir / "labels.parquet").to_pandas()
    assert len(labels) == sum(r.reused for r in second.rows)


def test_a_changed_table_candidate_column_or_claim_never_reuses_a_label(tmp_path):
    """The identity the store keys labels by (its table's content, the candidate, the columns
    read, the recovery claim, the units), checked on the job plans of changed jobs."""
    from certsel.orchestrator.engine.plan import JobPlan
    from certsel.orchestrator.inputs.sources import load_job_data

    trivia = pq.read_table(DATA).to_pandas()
    rows = trivia[trivia.candidate.isin(["mx_m8_r4_k64", "mx_m6_r2_k16"])]
    table = tmp_path / "t.parquet"
    rows.to_parquet(table)
    raw = {"data": {"path": str(table), "score": "score_human", "reference": "score_fp_human"}, "recovery": 0.95,
           "policy": {"kind": "r-eval"}, "procedure": "gate", "state": {"store": str(tmp_path / "s.db")}}

    def identities(raw):
        cfg = parse_config(raw)
        return [s.identity for s in JobPlan(cfg, load_job_data(cfg), None).specs]

    base = identities(raw)
    assert len(set(base)) == 2 and None not in base  # one identity per candidate
    assert identities({**raw, "seed": 5, "delta": 0.05, "budget": {"n": 100}}) == base  # what the test asks is not it
    assert not set(identities({**raw, "recovery": 0.9})) & set(base)  # another claim: other losses
    changed = rows.assign(score_human=np.where(rows.item == rows.item.min(), 1 - rows.score_human, rows.score_human))
    changed.to_parquet(table)  # one score changed: the table's content is another
    assert not set(identities(raw)) & set(base)
    rows.to_parquet(table)
    assert identities(raw) == base
    risk = {**raw, "recovery": None, "data": {"path": str(table), "human": "loss_human"}}
    assert not set(identities(risk)) & set(base)
    assert parse_config({**raw, "state": {}}).state.store is None  # off unless asked (certsel gate asks)


def test_an_lm_eval_candidate_reuses_labels_only_with_the_same_model_and_settings(tmp_path, monkeypatch):
    """lm-eval identities: another model argument, few-shot setting, metric or reference is
    another identity; the candidate's name and the cache folder are not part of it."""
    from certsel.orchestrator.inputs.lm_eval_kind import LmEvalKind
    from certsel.orchestrator.inputs.sources import load_job_data

    args = "base_url=http://127.0.0.1:9/v1/completions,model=m,tokenizer_backend=remote"
    raw = {"labels": {"kind": "lm-eval", "task": "additions_mc",
                      "include_path": str(ROOT / "examples" / "lm_eval_tasks"),
                      "candidates": [{"id": "a", "model": "local-completions", "model_args": args}]},
           "policy": {"kind": "r-eval"}, "procedure": "gate", "alpha": 0.4, "budget": {"n": 100}}

    def identity(**change):
        labels = {**raw["labels"], **change.pop("labels", {})}
        cfg = parse_config({**raw, **change, "labels": labels})
        return LmEvalKind().label_identity(cfg, load_job_data(cfg), 0)

    monkeypatch.chdir(ROOT)  # the task files name their data relative to the repository root
    base = identity()
    cand = raw["labels"]["candidates"][0]
    assert identity(labels={"candidates": [{**cand, "id": "renamed"}], "cache_dir": str(tmp_path)}) == base
    for change in ({"candidates": [{**cand, "model_args": args.replace("model=m", "model=m2")}]},
                   {"candidates": [{**cand, "num_fewshot": 3}]}, {"num_fewshot": 1}, {"apply_chat_template": True},
                   {"reference": {"id": "ref", "model": "local-completions", "model_args": args}}):
        assert identity(labels=change) != base, change
    # a checkpoint on this machine: the same path written again is another model
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"v1")
    local = {"candidates": [{**cand, "model": "hf", "model_args": f"pretrained={ckpt},dtype=float32"}]}
    before = identity(labels=local)
    assert identity(labels=local) == before
    (ckpt / "model.safetensors").write_bytes(b"v2 longer")
    assert identity(labels=local) != before


@pytest.mark.unit
@pytest.mark.parametrize("argv, says", [
    (["gate", "job.yaml", "--summary", ""], "argument --summary: an empty path (is $GITHUB_STEP_SUMMARY unset?"),
    (["gate", "job.yaml", "--json", " "], "argument --json: an empty path (an unset variable?)"),
    (["run", "job.yaml", "--output", ""], "argument --output/--report-dir: an empty path"),
])
def test_an_empty_path_is_one_line_not_the_current_folder(argv, says, capsys):
    """``--summary "$GITHUB_STEP_SUMMARY"`` with the variable unset (outside GitHub Actions) is an empty
    argument: refused in one line naming the option, before anything is read (it was "--summary: . is
    a folder, not a file")."""
    from certsel import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and len(err.strip().splitlines()) == 1
