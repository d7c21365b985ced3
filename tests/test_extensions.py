"""The extension points, used as a team would: a procedure and a betting strategy defined in
this file and registered through the public API, a label function in a module next to the
job file, run end to end through a real local Ray and a real MLflow store; and the error
taxonomy's exit codes (bad input 2, a job that fails in an actor 1 with its runs FAILED)."""

import json
import pathlib
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import yaml
from certsel.config import ConfigError, parse_config
from certsel.orchestrator.commands.job import execute
from certsel.policies.procedures import PROCEDURES, Procedure, register_procedure
from certsel.policies import BETS, BettingState, BettingStrategy, log_evalue_paths, register_strategy
from certsel.workers.replay import DATA_DIR, load_loss_table
from mlflow.tracking import MlflowClient

# tiers by test: the input checks need nothing running (the fast tier); the rest is integration (Ray, MLflow, HTTP servers or the CLI)

CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
TABLE = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
SIX = ["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m6_r8_k16", "mx_m5_r4_k16", "mx_m4_r2_k16", "mx_m3_r2_k64"]


@dataclass(frozen=True)
class ConstantBet(BettingStrategy):
    """Bet the same fraction u of the largest allowed bet every round: predictable, so the
    wealth is a test supermartingale under H0 whatever u is."""

    name: ClassVar[str] = "constant-test"
    u: float = 0.4

    def fractions(self, q, alpha, scale, state, *, delta, horizon):
        return np.full(q.shape, self.u), BettingState(state.count + q.shape[-1])


class WeightedBonferroni(Procedure):
    """Weighted Bonferroni: half of delta to the first candidate, the rest shared equally.
    Family-wise valid because the weights sum to one."""

    name = "weighted-test"

    def candidate_deltas(self, delta, K):
        w = np.full(K, 0.5 / (K - 1))
        w[0] = 0.5
        return delta * w

    def certified(self, max_log_e, delta):
        return max_log_e >= -np.log(self.candidate_deltas(delta, max_log_e.shape[-1]))

    def level(self, delta, K):
        return f"weighted Bonferroni, delta/2 to the first candidate, delta/(2(K-1)) = {delta / (2 * (K - 1)):.4g} to each other"


@pytest.fixture()
def registered():
    register_strategy(ConstantBet)
    register_procedure(WeightedBonferroni)
    yield
    BETS.pop("constant-test", None)
    PROCEDURES.pop("weighted-test", None)


@pytest.mark.integration
def test_a_procedure_and_a_strategy_from_user_code_run_through_ray_and_mlflow(ray_session, tmp_path, registered):
    uri = f"sqlite:///{tmp_path}/store.db"
    cfg = parse_config({
        "data": {"path": str(TABLE), "judge": "loss_judge_best", "order": "rank"}, "candidates": SIX,
        "policy": {"kind": "r-eval", "betting": {"kind": "constant-test", "u": 0.5}}, "alpha": 0.1, "delta": 0.1,
        "procedure": "weighted-test", "objective": {"column": "avg_bitwidth"},
        "budget": {"n": 150, "r": 0, "batch": 50}, "seed": 2,
        "tracking": {"uri": uri, "intervals": "final"}, "state": {"dir": str(tmp_path / "jobs")},
        "runtime": "ray",  # the user's code travels to Ray's actors by value: what this test is about
    })
    result, run_id = execute(cfg, output=tmp_path / "report")

    # the same e-processes and the same procedure, computed directly
    table = load_loss_table(TABLE, judge="loss_judge_best")
    rows = [list(table.candidates).index(c) for c in SIX]
    from certsel.workers.replay import item_order

    items = item_order(table.items.size, 2)[:150]  # the job's seeded order
    log_e = log_evalue_paths(table.human[rows][:, items], alpha=0.1, delta=0.1, rhos=[0.0], betting=ConstantBet(0.5))
    proc = WeightedBonferroni()
    for r in result.records:  # every candidate's path up to where the job stopped it
        np.testing.assert_allclose(r.path, log_e[r.index, : r.t], rtol=0, atol=1e-12)
    full = proc.certified(log_e.max(axis=-1), 0.1)
    assert result.certified == [SIX[k] for k in np.flatnonzero(full)]  # stopping early changed nothing
    assert result.certified and len(result.certified) < 6  # not vacuous: some certified, some not

    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["betting"] == "constant-test(u=0.5)" and run.data.params["procedure"] == "weighted-test"
    cert = json.loads((tmp_path / "report" / "selection.json").read_text())
    assert cert["procedure"]["name"] == "weighted-test" and cert["procedure"]["level"].startswith("weighted Bonferroni")
    assert cert["certified_set"] == result.certified


def test_unregistered_names_are_one_line_input_errors():
    base = {"data": {"path": str(TABLE), "judge": "loss_judge_best", "order": "rank"},
            "objective": {"column": "avg_bitwidth"}}
    with pytest.raises(ConfigError, match="procedure must be one of fst, bonferroni, holm, gate, pairwise, got 'x'"):
        parse_config({**base, "procedure": "x"})
    with pytest.raises(ConfigError, match="betting must be one of up, wsr, ons, got 'x'"):
        parse_config({**base, "policy": {"betting": "x"}})


def _live(**over):
    cand = {"id": "a", "base_url": "http://127.0.0.1:9", "model": "m", "objective": 1.0}
    return {"live": {"items": str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / "additions.jsonl"),
                     "candidates": [cand, {**cand, "id": "b"}],
                     "features": {"base_url": "http://127.0.0.1:9", "model": "e"}},
            "objective": {"column": "size"}, **over}


@pytest.mark.integration
def test_live_cer_eval_with_holm_is_refused_like_replay(tmp_path):
    """Holm needs e-values; the live validator used to accept it and run Bonferroni levels."""
    for raw in (_live(procedure="holm", policy={"kind": "cer-eval"}),
                {"data": {"path": str(TABLE), "features": str(DATA_DIR / "alpacaeval_embeddings.parquet")},
                 "procedure": "holm", "policy": {"kind": "cer-eval"}, "objective": {"column": "avg_bitwidth"}}):
        with pytest.raises(ConfigError, match="procedure 'holm' needs e-values"):
            parse_config(raw)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_live(procedure="holm", policy={"kind": "cer-eval"})))
    out = subprocess.run([CERTSEL, "run", str(path), "--no-tracking"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"certsel: error: {path}: config: procedure 'holm' needs e-values (r-eval, r-autoeval, r-autoeval+, judge-stratified); "
        "policy 'cer-eval' supports fst, bonferroni, gate, pairwise"]


LABELS = """
    import numpy as np

    TABLE = {table!r}
    CALLS = []


    def _rows():
        import pyarrow.parquet as pq

        t = pq.read_table(TABLE, columns=["candidate", "item", "loss_human", "loss_judge_best"]).to_pydict()
        out = {{}}
        for c, i, h, j in zip(t["candidate"], t["item"], t["loss_human"], t["loss_judge_best"]):
            out.setdefault(c, {{}})[i] = (h, j)
        return out


    def losses(candidate, items, role):
        if not hasattr(losses, "table"):
            losses.table = _rows()
        col = 0 if role == "human" else 1
        return np.array([losses.table[candidate][int(i)][col] for i in items])


    def broken(candidate, items, role):
        if candidate == "mx_m8_r8_k16":
            raise ConnectionError("annotation service down")
        return losses(candidate, items, role)
"""

FAILING = """
    from dataclasses import dataclass
    from typing import ClassVar

    from certsel.policies import BettingStrategy, register_strategy


    @register_strategy
    @dataclass(frozen=True)
    class Exploding(BettingStrategy):
        name: ClassVar[str] = "exploding-test"

        def fractions(self, q, alpha, scale, state, *, delta, horizon):
            raise RuntimeError("the strategy has a bug")
"""


def _python_job(tmp_path, **over):
    (tmp_path / "my_labels.py").write_text(textwrap.dedent(LABELS.format(table=str(TABLE))))
    cfg = {"source": {"python": "my_labels:losses", "items": 1000, "judge": True,
                      "candidates": [{"id": c, "objective": float(k)} for k, c in enumerate(SIX[:3])]},
           "policy": {"kind": "r-autoeval+"}, "procedure": "bonferroni", "objective": {"column": "bits"},
           "alpha": 0.2, "delta": 0.1, "budget": {"n": 60, "r": 3, "batch": 20},
           "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, **over}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.integration
def test_python_source_job_through_the_cli(tmp_path):
    """A label function in a module next to the job file; the same certificate as the replay
    job on the same losses; a function that fails ends only its candidate."""
    path = _python_job(tmp_path)
    out = subprocess.run([CERTSEL, "run", str(path), "--json", str(tmp_path / "sel.json"), "--no-progress"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cert = json.loads((tmp_path / "sel.json").read_text())
    assert cert["data"]["path"] == "my_labels:losses"
    # the e-values are those of the same losses in the job's seeded item order
    from certsel.workers.replay import item_order

    table = load_loss_table(TABLE, judge="loss_judge_best")
    order = item_order(1000, 0)  # the function's items are the table's first 1000
    rows = {str(c): k for k, c in enumerate(table.candidates)}
    for c in cert["candidates"]:
        k = rows[c["candidate"]]
        log_e = log_evalue_paths(table.human[k][order[:60]], table.judge[k][order[:60]],
                                 table.judge[k][order[60:240]], alpha=0.2, delta=0.1,
                                     observation="split")
        assert c["log_e_value"] == pytest.approx(float(log_e[: c["labels_human"]].max(initial=0.0)), abs=1e-6)
    assert cert["selected"] == SIX[0]

    broken = _python_job(tmp_path, source={"python": "my_labels:broken", "items": 1000, "judge": True, "retries": 1,
                                           "candidates": [{"id": c, "objective": float(k)}
                                                          for k, c in enumerate(SIX[:3])]})
    out = subprocess.run([CERTSEL, "run", str(broken), "--json", str(tmp_path / "b.json"), "--no-progress", "--fresh"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {c["candidate"]: c for c in json.loads((tmp_path / "b.json").read_text())["candidates"]}
    assert rows["mx_m8_r8_k16"]["status"] == "source failed" and not rows["mx_m8_r8_k16"]["certified"]
    assert "annotation service down" in rows["mx_m8_r8_k16"]["reason"]
    assert rows["mx_m10_r8_k16"]["status"] == "certified"


@pytest.mark.integration
def test_a_job_that_fails_in_an_actor_exits_1_and_leaves_no_run(tmp_path):
    """A table job's runs are logged at its end (outputs/output_process.py): one that fails leaves none, never a
    FINISHED one (a job whose labels take long leaves FAILED runs: tests/test_tracking.py)."""
    (tmp_path / "failing_ext.py").write_text(textwrap.dedent(FAILING))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "plugins": ["failing_ext"], "data": {"path": str(TABLE), "judge": "loss_judge_best", "order": "rank"},
        "candidates": SIX[:2], "policy": {"kind": "r-eval", "betting": "exploding-test"},
        "objective": {"column": "avg_bitwidth"}, "budget": {"n": 40, "r": 0, "batch": 20},
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}}))
    out = subprocess.run([CERTSEL, "run", str(path), "--no-progress"], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == "certsel: error: job failed: RuntimeError: the strategy has a bug"
    client = MlflowClient(f"sqlite:///{tmp_path}/store.db")
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
