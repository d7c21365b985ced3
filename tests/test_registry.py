"""One registry mechanism (policies/registry.py): procedures, betting strategies, policy kinds
and label-source kinds are all a Registry, with one way to register (type and name checked)
and one wording for an unknown name."""

import pytest

from certsel.orchestrator.inputs.source_kind import SOURCE_KINDS, SourceKind, get_source_kind
from certsel.policies.bets import BETS, BetUse
from certsel.policies.betting import BettingStrategy, get_strategy
from certsel.policies.kinds import POLICY_KINDS, get_policy_kind
from certsel.policies.procedures import PROCEDURES, Procedure, get_procedure
from certsel.policies.registry import Registry

LOOKUPS = [(PROCEDURES, get_procedure, "procedure"), (BETS, get_strategy, "betting"),
           (POLICY_KINDS, get_policy_kind, "policy.kind"), (SOURCE_KINDS, get_source_kind, "labels.kind")]


def listed(registry):
    """The names an unknown name's error lists: a test's bets only, for ``betting``."""
    if registry is BETS:
        return [n for n in BETS.names() if BetUse.TEST in BETS[n].uses]
    return registry.names()


@pytest.mark.parametrize("registry,lookup,key", LOOKUPS, ids=[k for *_, k in LOOKUPS])
def test_every_registry_answers_an_unknown_name_in_one_wording(registry, lookup, key):
    assert isinstance(registry, Registry) and registry.key == key
    with pytest.raises(ValueError) as err:
        lookup("no-such-name")
    names = ", ".join(listed(registry)) or "(none registered)"
    assert str(err.value) == f"{key} must be one of {names}, got 'no-such-name'"
    with pytest.raises(ValueError, match=f"^{key} must be one of"):
        lookup(["a", "list"])  # an unhashable name from a job file is the same error


def test_the_built_in_sources_are_not_listed_as_label_kinds():
    """replay, live, python and tasks have job-file sections of their own: labels.kind names
    the registered ones only."""
    assert {"replay", "live", "python", "tasks"} <= set(SOURCE_KINDS)
    assert not {"replay", "live", "python", "tasks"} & set(SOURCE_KINDS.names())


def test_registering_checks_the_type_and_the_name():
    reg = Registry("thing", Procedure)
    with pytest.raises(TypeError, match="thing: a registered item must subclass Procedure, got 3"):
        reg.register(3)
    with pytest.raises(ValueError, match="thing: a registered Procedure needs a non-empty name"):
        reg.register(Procedure)  # built with no arguments: its name is ""
    named = type("Named", (Procedure,), {"name": "named"})
    assert isinstance(reg.register(named), named) and reg.lookup("named") is reg["named"]
    classes = Registry("betting", BettingStrategy, classes=True)
    with pytest.raises(TypeError, match="must subclass BettingStrategy"):
        classes.register(BETS["up"]())  # an instance where classes are registered
    assert classes.register(BETS["up"]) is BETS["up"]


def test_a_source_kind_without_options_is_refused_before_it_is_registered():
    from certsel.orchestrator.inputs.source_kind import register_source_kind

    bare = type("Bare", (SourceKind,), {"name": "bare-test"})
    with pytest.raises(ValueError, match="set options"):
        register_source_kind(bare)
    assert "bare-test" not in SOURCE_KINDS
