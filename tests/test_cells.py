"""Table cells and the headline of a certificate (orchestrator/outputs/cells.py), on
hand-written certificate dicts."""

from certsel.orchestrator.outputs.cells import headline


def _topk(inside, out, open_):
    return {"selected": None, "ranking": {"topk": {"k": 3, "certified_in": inside, "certified_out": out,
                                                   "undetermined": open_}}}


def test_headline_leads_with_what_was_certified():
    assert headline({"selected": "mx_m5", "candidates": []}) == "selected: mx_m5"
    assert headline({"selected": None, "candidates": []}) == "selected: none"
    assert headline({"selected": "a", "ranking": {"topk": None}}) == "selected: a"  # a full ranking
    assert headline(_topk(["a", "b", "c"], ["d"], [])) == "top-3: a, b, c"
    assert headline(_topk(["a"], ["e"], ["b", "c", "d"])) == "top-3: a; 2 place(s) open among b, c, d"
    assert headline(_topk([], [], ["a", "b", "c", "d"])) == "top-3: none certified; 3 place(s) open among a, b, c, d"
