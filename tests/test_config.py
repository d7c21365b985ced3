"""certsel run's job schema: the bundled examples load, bad configs fail naming the key."""

import pathlib

import pytest

from certsel.config import ConfigError, load_config, parse_config

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
TABLE = str(EXAMPLES / "data" / "triviaqa_llama31_8b_mx.parquet")


@pytest.mark.parametrize("name", ["quantization.yaml", "prompts.yaml", "alpacaeval_ranking.yaml"])
def test_bundled_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    assert cfg.data.path.is_file() and cfg.data.path.is_absolute()


def test_defaults_and_relative_paths():
    cfg = load_config(EXAMPLES / "quantization.yaml")
    assert cfg.policy.kind == "r-autoeval+" and cfg.budget.n == 300 and cfg.budget.r == 3
    assert cfg.tracking.uri is None and cfg.ray.address is None


def _base(**over):
    raw = {"data": {"path": TABLE, "judge": "loss_judge_best", "order": "rank"},
           "objective": {"column": "avg_bitwidth"}}
    raw.update(over)
    return raw


@pytest.mark.parametrize("raw,needle", [
    (_base(alpah=0.1), "unknown key 'alpah'"),
    (_base(policy={"kind": "r-autoeval+", "bet": "up"}), "unknown key 'policy.bet'"),
    (_base(alpha=1.5), "alpha: Input should be less than 1"),
    (_base(delta=0), "delta: Input should be greater than 0"),
    (_base(alpha="high"), "alpha: Input should be a valid number"),
    (_base(policy={"betting": "kelly"}), "policy.betting: Input should be 'up' or 'wsr'"),
    (_base(procedure="sidak"), "procedure: Input should be"),
    (_base(budget={"n": 0}), "budget.n: Input should be greater than 0"),
    (_base(budget={"r": -1}), "budget.r: Input should be greater than or equal to 0"),
    (_base(candidates=[]), "candidates: must list at least one candidate"),
    (_base(candidates=["a", "b", "a"]), "duplicate candidate ids: a"),
    (_base(data={"path": TABLE, "judge": "loss_judge_best"}), "procedure 'fst' needs data.order"),
    (_base(data={"path": TABLE, "order": "rank"}), "needs data.judge"),
    (_base(data={"path": "/no/such/file.parquet", "judge": "j", "order": "rank"}), "data.path: file not found"),
    (_base(policy={"kind": "cer-eval"}), "needs data.features"),
    (_base(procedure="pairwise"), "procedure 'pairwise' ranks models"),
    ({"alpha": 0.1}, "give exactly one label source: data (recorded losses) or live (model servers)"),
    (_base(scheduling={"prune": True}), "scheduling.prune applies to procedure 'bonferroni' only"),
    (_base(scheduling={"lookahead": -1}), "scheduling.lookahead: Input should be greater than or equal to 0"),
    (_base(procedure="holm", policy={"kind": "seq"}), "procedure 'holm' needs e-values"),
    (_base(procedure="bonferroni", objective=None), "procedure 'bonferroni' selects by an objective"),
    (_base(order=["a", "b"], candidates=["a", "c"]), "order and candidates must name the same candidates"),
    (_base(order=["a", "a"]), "order: duplicate candidate ids: a"),
    (_base(procedure="holm", order=["a"]), "order is the fixed sequence of procedure 'fst'"),
    (_base(budget={"r": 0}), "needs budget.r >= 1"),
    (_base(tracking={"intervals": "sometimes"}), "tracking.intervals: Input should be"),
    (_base(ray={"max_actors": 0}), "ray.max_actors: Input should be greater than 0"),
])
def test_bad_configs_name_the_key(raw, needle):
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, source="job.yaml")
    msg = str(exc.value)
    assert needle in msg and msg.startswith("job.yaml: ") and "\n" not in msg


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(top)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError):
        load_config(binary)


def test_overrides(tmp_path):
    cfg = load_config(EXAMPLES / "quantization.yaml", ["budget.n=120", "policy.kind=r-eval", "scheduling.lookahead=0"])
    assert (cfg.budget.n, cfg.budget.r, cfg.policy.kind, cfg.scheduling.lookahead) == (120, 3, "r-eval", 0)
    with pytest.raises(ConfigError, match="unknown key 'budget.m'"):
        load_config(EXAMPLES / "quantization.yaml", ["budget.m=1"])
    with pytest.raises(ConfigError, match="is not KEY=VALUE"):
        load_config(EXAMPLES / "quantization.yaml", ["budget.n"])
    with pytest.raises(ConfigError, match="'alpha' is not a mapping"):
        load_config(EXAMPLES / "quantization.yaml", ["alpha.x=1"])
