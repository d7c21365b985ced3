"""A job's identity (certsel/config/identity.py): what makes two runs the same job."""

import pytest

from certsel.config import load_config
from certsel.config.identity import config_fingerprint

EXAMPLE = "examples/quantization.yaml"


@pytest.mark.unit
def test_wording_is_not_part_of_the_identity_and_statistics_are():
    base = config_fingerprint(load_config(EXAMPLE), "d")
    # data.measures only says what the loss column is: a job keeps its folder when it is added or reworded
    assert config_fingerprint(load_config(EXAMPLE, ["data.measures=error rate"]), "d") == base
    assert config_fingerprint(load_config(EXAMPLE, ["data.measures=null"]), "d") == base
    assert config_fingerprint(load_config(EXAMPLE, ["name=other"]), "d") == base
    # a setting that decides labels is a different job
    for change in (["alpha=0.2"], ["scheduling.futility=null"], ["scheduling.start=top"], ["seed=1"]):
        assert config_fingerprint(load_config(EXAMPLE, change), "d") != base, change
    assert config_fingerprint(load_config(EXAMPLE), "other data") != base


@pytest.mark.unit
def test_the_budget_stops_rule_version_is_part_of_the_identity_while_the_stop_is_on(monkeypatch):
    import certsel.config.identity as identity

    on, off = load_config(EXAMPLE), load_config(EXAMPLE, ["scheduling.budget_stop=null"])
    before_on, before_off = config_fingerprint(on, "d"), config_fingerprint(off, "d")
    assert before_on != before_off
    # a job folder made under another rule is another job; a job without the stop keeps its identity
    monkeypatch.setattr(identity, "BUDGET_STOP_RULE", identity.BUDGET_STOP_RULE + 1)
    assert config_fingerprint(on, "d") != before_on
    assert config_fingerprint(off, "d") == before_off
