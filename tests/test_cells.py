"""Table cells and the headline of a certificate (orchestrator/outputs/cells.py), on
hand-made stand-ins with the certificate's attributes."""

from types import SimpleNamespace

from certsel.orchestrator.outputs.cells import headline, objective_head
from certsel.orchestrator.results.records import TopK


def _cert(selected, topk=None, ranking=True, objective=None):
    cands = [SimpleNamespace(candidate=n, selected=n == selected, objective=6.5) for n in ("a", "mx_m5")]
    return SimpleNamespace(selected=selected, ranking=SimpleNamespace(topk=topk) if ranking else None,
                           candidates=cands, objective=objective)


def _topk(inside, out, open_):
    return _cert(None, TopK(k=3, certified_in=inside, certified_out=out, undetermined=open_))


def test_headline_leads_with_what_was_certified():
    assert headline(_cert("mx_m5", ranking=False)) == "selected: mx_m5"
    assert headline(_cert(None, ranking=False)) == "selected: none"
    assert headline(_cert("a")) == "selected: a"  # a full ranking
    assert headline(_topk(["a", "b", "c"], ["d"], [])) == "top-3: a, b, c"
    assert headline(_topk(["a"], ["e"], ["b", "c", "d"])) == "top-3: a; 2 place(s) open among b, c, d"
    assert headline(_topk([], [], ["a", "b", "c", "d"])) == "top-3: none certified; 3 place(s) open among a, b, c, d"


def test_the_objective_is_named_by_its_column():
    bits = SimpleNamespace(column="avg_bitwidth", goal="minimize")
    assert headline(_cert("mx_m5", ranking=False, objective=bits)) == "selected: mx_m5 (avg_bitwidth 6.5)"
    assert headline(_cert(None, ranking=False, objective=bits)) == "selected: none"
    assert objective_head(_cert("a", objective=bits)) == "avg_bitwidth (min)"
    assert objective_head(_cert("a", objective=SimpleNamespace(column="acc", goal="maximize"))) == "acc (max)"
    assert objective_head(_cert("a")) == "objective"


def test_setting_lines_say_what_the_other_setting_would_have_done():
    from certsel.orchestrator.outputs.cells import setting_lines

    def cert(statuses, labels, certified=(), pilot=None, reasons=None, gate=None):
        cands = [SimpleNamespace(status=s, labels_human=n, reason=r)
                 for s, n, r in zip(statuses, labels, reasons or [None] * len(statuses))]
        return SimpleNamespace(candidates=cands, labels=SimpleNamespace(budget={"n": 300}),
                               scheduling={"futility": 0.05, "budget_stop": 0.2}, pilot=pilot,
                               certified_set=list(certified), gate=gate)

    assert setting_lines(cert(["certified", "not certified"], [40, 300], ["a"])) == []
    (line,) = setting_lines(cert(["certified", "futile", "futile"], [40, 100, 250], ["a"]))
    assert line.startswith("futility: 2 candidate(s) stopped") and "250 human labels short" in line
    assert "--set scheduling.futility=null" in line
    pilot = SimpleNamespace(start="c", skipped=["a", "b"])
    (line,) = setting_lines(cert(["not certified"], [300], pilot=pilot))
    assert "started at c and certified nothing" in line and "--set scheduling.start=top" in line
    assert "no evidence against the 2 config(s) before it" in line
    assert setting_lines(cert(["certified"], [50], ["c"], pilot=pilot)) == []
    (line,) = setting_lines(cert(["certified", "not certified", "not certified"], [40, 125, 300], ["a"],
                                 reasons=[None, "budget stop after 125 human labels: ...", "budget spent"]))
    assert line.startswith("budget stop: 1 candidate(s) stopped") and "175 human labels short" in line
    assert "--set scheduling.budget_stop=null" in line and "probability <= 0.2" in line
    assert "unlikely to certify them" in line and "the full budget certifies" in line  # a selection: its own test
    stopped = ["not certified"], [125], (), None, ["budget stop after 125 human labels: ..."]
    (line,) = setting_lines(cert(*stopped, gate=SimpleNamespace()))
    assert "unlikely to decide them" in line and "the full budget decides" in line  # a gate waits for a fail too
