"""certsel run's job schema: the bundled examples load, bad configs fail naming the key."""

import pathlib

import pytest

from certsel.config import ConfigError, load_config, parse_config

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
TABLE = str(EXAMPLES / "data" / "triviaqa_llama31_8b_mx.parquet")


@pytest.mark.parametrize("name", ["quantization.yaml", "prompts.yaml", "alpacaeval_ranking.yaml", "live_additions.yaml",
                                  "live_precision_drop.yaml"])
def test_bundled_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    path = cfg.data.path if cfg.data is not None else cfg.live.items
    assert path.is_file() and path.is_absolute()
    if cfg.live is not None and cfg.live.serve:  # the served model's paths are relative to the file
        assert cfg.live.serve[0].python == str(EXAMPLES.parent / ".venv-vllm" / "bin" / "python")


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
    (_base(policy={"betting": "kelly"}), "policy.betting: betting must be one of up, wsr, ons, got 'kelly'"),
    (_base(procedure="sidak"), "job.yaml: procedure must be one of fst, bonferroni, holm, gate, pairwise"),  # named once
    (_base(budget={"n": 0}), "budget.n: Input should be greater than 0"),
    (_base(budget={"r": -1}), "budget.r: Input should be greater than or equal to 0"),
    (_base(candidates=[]), "candidates: must list at least one candidate"),
    (_base(candidates=["a", "b", "a"]), "duplicate candidate ids: a"),
    (_base(procedure="fst", data={"path": TABLE, "judge": "loss_judge_best"}), "procedure 'fst' needs data.order"),
    (_base(policy={"kind": "r-autoeval+"}, data={"path": TABLE, "order": "rank"}), "needs data.judge"),
    (_base(data={"path": "/no/such/file.parquet", "judge": "j", "order": "rank"}), "data.path: file not found"),
    (_base(policy={"kind": "cer-eval"}), "needs data.features"),
    (_base(procedure="pairwise"), "procedure 'pairwise' ranks models"),
    ({"alpha": 0.1}, "give exactly one label source: data (recorded losses), live (model servers), source (a Python function), "
                      "labels (a registered label source) or tasks"),
    (_base(scheduling={"prune": True}), "scheduling.prune applies to procedure 'bonferroni' only"),
    (_base(scheduling={"lookahead": -1}), "scheduling.lookahead: Input should be greater than or equal to 0"),
    (_base(procedure="holm", policy={"kind": "seq"}), "procedure 'holm' needs e-values"),
    (_base(procedure="bonferroni", objective=None, scheduling={"prune": True}), "scheduling.prune stops candidates"),
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


def _live(**over):
    cand = {"id": "a", "base_url": "http://127.0.0.1:8000", "model": "m", "objective": 1.0}
    raw = {"live": {"items": str(EXAMPLES / "data" / "additions.jsonl"), "candidates": [cand, {**cand, "id": "b"}],
                    "judge": {"base_url": "http://127.0.0.1:8000", "model": "j"}},
           "procedure": "bonferroni", "objective": {"column": "size"}}
    for k, v in over.items():
        if k.startswith("live_"):
            raw["live"] = {**raw["live"], k[5:]: v}
        else:
            raw[k] = v
    return raw


@pytest.mark.parametrize("raw,needle", [
    (_live(data={"path": TABLE}), "give exactly one label source"),
    (_live(live_candidates=[{"id": "a", "base_url": "http://x", "model": "m", "template": "hi", "objective": 1}]),
     "live.candidates.0.template: must contain {question}"),
    (_live(live_candidates=[{"id": "a", "base_url": "ftp://x", "model": "m", "objective": 1}]),
     "live.candidates.0.base_url: String should match pattern"),
    (_live(live_candidates=[{"id": "a", "base_url": "http://x", "model": "m", "objective": 1}] * 2),
     "duplicate candidate ids: a"),
    (_live(live_judge=None), "needs live.judge"),
    (_live(order=["a", "zz"], procedure="fst"), "order: unknown candidate(s) not in live.candidates: zz"),
    (_live(live_candidates=[{"id": "a", "base_url": "http://x", "model": "m"}]), "without an objective value: a"),
    (_live(live_loss="bleu"), "live.loss: Input should be"),
    (_live(live_extra=1), "unknown key 'live.extra'"),
    (_live(live_items="/no/such.jsonl"), "live.items: file not found"),
])
def test_bad_live_configs(raw, needle):
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, source="job.yaml")
    assert needle in str(exc.value)


def test_a_table_without_judge_or_order_runs_with_the_defaults_it_can_and_says_so():
    """A table of candidate, item and loss: R-Eval (no judge column) and Holm (no order column), each in one line
    naming the key that sets it; a key the job sets is kept, and a table that has the column keeps the default."""
    cfg = parse_config({"data": {"path": TABLE, "human": "loss_human"}})
    assert (cfg.policy.kind, cfg.procedure, cfg.objective) == ("r-eval", "holm", None)
    assert len(cfg.adapted) == 2
    assert cfg.adapted[0].startswith("policy: r-eval (human labels alone): the table has no judge column")
    assert "data.judge names one" in cfg.adapted[0] and "policy.kind sets the policy" in cfg.adapted[0]
    assert cfg.adapted[1].startswith("procedure: holm (every candidate tested")
    assert "the certified one with the smallest bound" in cfg.adapted[1] and "data.order names one" in cfg.adapted[1]
    assert cfg.model_copy(update={"seed": 1}).adapted == cfg.adapted  # a job's copies say the same
    full = parse_config({"data": {"path": TABLE, "judge": "loss_judge_best", "order": "rank"}})
    assert (full.policy.kind, full.procedure, full.adapted) == ("r-autoeval+", "fst", ())
    asked = parse_config({"data": {"path": TABLE}, "policy": {"kind": "seq"}, "procedure": "bonferroni"})
    assert (asked.policy.kind, asked.procedure, asked.adapted) == ("seq", "bonferroni", ())
    with pytest.raises(ConfigError, match="needs data.judge"):  # asked for a judge the table lacks: an error
        parse_config({"data": {"path": TABLE}, "policy": {"kind": "r-autoeval+"}, "procedure": "holm"})
    objective = parse_config({"data": {"path": TABLE}, "objective": {"column": "avg_bitwidth"}})
    assert "the certified one with the best objective" in objective.adapted[1]
