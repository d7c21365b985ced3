"""Table cells and the headline of a certificate (orchestrator/outputs/cells.py), on
hand-made stand-ins with the certificate's attributes."""

from types import SimpleNamespace

from certsel.orchestrator.outputs.cells import headline
from certsel.orchestrator.results.records import TopK


def _cert(selected, topk=None, ranking=True):
    return SimpleNamespace(selected=selected, ranking=SimpleNamespace(topk=topk) if ranking else None)


def _topk(inside, out, open_):
    return _cert(None, TopK(k=3, certified_in=inside, certified_out=out, undetermined=open_))


def test_headline_leads_with_what_was_certified():
    assert headline(_cert("mx_m5", ranking=False)) == "selected: mx_m5"
    assert headline(_cert(None, ranking=False)) == "selected: none"
    assert headline(_cert("a")) == "selected: a"  # a full ranking
    assert headline(_topk(["a", "b", "c"], ["d"], [])) == "top-3: a, b, c"
    assert headline(_topk(["a"], ["e"], ["b", "c", "d"])) == "top-3: a; 2 place(s) open among b, c, d"
    assert headline(_topk([], [], ["a", "b", "c", "d"])) == "top-3: none certified; 3 place(s) open among a, b, c, d"
