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
