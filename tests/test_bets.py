"""One bet registry (policies/bets.py): a test's strategies and a ranking's pair bets are bets of one
registry, each declaring what it bets for; a name is found only where its use is asked for."""

import dataclasses

import pytest

from certsel.policies import BETS, Bet, BetUse, get_bet, register_bet
from certsel.policies.betting import UP, BettingStrategy, get_strategy
from certsel.policies.pair_bets import Margin, PairBet, pair_bet

pytestmark = pytest.mark.unit


def test_every_bet_is_in_the_one_registry_with_its_use():
    assert {"up", "wsr", "ons", "margin", "plug-in"} <= set(BETS)
    for name, cls in BETS.items():
        assert issubclass(cls, Bet) and cls.uses, name
        assert (BetUse.TEST in cls.uses) == issubclass(cls, BettingStrategy), name
        assert (BetUse.PAIRS in cls.uses) == issubclass(cls, PairBet), name


def test_a_name_is_found_only_for_its_use_with_the_job_file_key_named():
    assert isinstance(get_strategy("up"), UP) and isinstance(pair_bet("margin"), Margin)
    with pytest.raises(ValueError, match=r"^betting must be one of up, wsr, ons.*, got 'margin'$"):
        get_strategy("margin")
    with pytest.raises(ValueError, match=r"^pairwise.bet must be one of margin, plug-in, got 'up'$"):
        pair_bet("up")
    with pytest.raises(ValueError, match=r"did you mean 'plug-in'"):
        pair_bet("plugin")
    with pytest.raises(ValueError, match=r"^betting: 'margin' is not a bet for this"):
        get_bet(Margin(), BetUse.TEST)


def test_parameters_and_specs_round_trip_through_the_registry():
    up = get_strategy({"kind": "up", "prior": "grid"})
    assert get_bet(up.spec(), BetUse.TEST) == up and up.describe() == "up(prior=grid)"
    assert pair_bet("margin").spec() == {"kind": "margin"}
    with pytest.raises(ValueError, match="^betting 'up': "):
        get_strategy({"kind": "up", "no_such_parameter": 1})


def test_a_new_bet_is_one_registered_class_and_needs_a_use():
    @dataclasses.dataclass(frozen=True)
    class Careful(PairBet):
        name = "careful-test"

    try:
        register_bet(Careful)
        assert isinstance(pair_bet("careful-test"), Careful)
        with pytest.raises(ValueError, match="betting must be one of"):
            get_strategy("careful-test")
    finally:
        BETS.pop("careful-test", None)

    class Nowhere(Bet):
        name = "nowhere-test"

    with pytest.raises(ValueError, match="declare what it bets for"):
        register_bet(Nowhere)
    assert "nowhere-test" not in BETS
