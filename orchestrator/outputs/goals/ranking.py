"""A pairwise ranking: the partial order its pairs certified, with ties and rank intervals."""

from __future__ import annotations

from ..cells import headline, rank_text, tie_counts
from .base import Field, Goal, Section, _fmt
from .registry import register


@register
class RankingGoal(Goal):
    """A pairwise ranking: the partial order its pairs certified, with ties and rank intervals."""

    name = "ranking"
    asks = {"ranking": True, "recovery": False}
    table_heading = "Models"

    def title(self, cert) -> str:
        rk, p = cert.ranking, cert.procedure
        return (f"{cert.job}: {cert.policy.kind} / {p.level} "
                f"({rk.pairs_certified} of {rk.pairs} pair orders certified)")

    def table_rows(self, cert) -> list:
        return list(cert.ranking.order)

    def bold(self, cert) -> list[bool]:
        return [False] * len(cert.ranking.order)

    def fields(self, cert) -> list[Field]:
        """A ranking as the partial order it certifies: per model its certified wins and losses."""
        rk = cert.ranking
        by = {c.candidate: c for c in cert.candidates}
        worse = {m: sum(m in b for b in rk.better.values()) for m in rk.order}
        eps, ties = rk.epsilon, tie_counts(rk)
        return [Field("model", str), Field("rank (certified)", lambda m: rank_text(rk, m)),
                Field("better than", lambda m: str(len(rk.better[m]))), Field("worse than", lambda m: str(worse[m])),
                *([Field(f"tied (< {eps:g})", lambda m: str(ties[m]))] if eps is not None else []),
                Field("possible winner", lambda m: "yes" if m in rk.possible_winners else "", 1),
                Field("mean loss", lambda m: _fmt(by[m].estimate), 2),
                Field("items", lambda m: str(by[m].labels_human), 1),
                Field("Copeland (uncertified)", lambda m: f"{rk.score[m]:+d}", 3)]

    def after_table(self, cert) -> list[str]:
        return ["possible winners (no other model is certified better): " + ", ".join(cert.ranking.possible_winners)]

    def summary(self, cert) -> tuple[str, list[str]]:
        rk, sel = cert.ranking, cert.selected
        head = f"Best model: {sel}" if sel else "No model is certified better than all others"
        if rk.topk is not None:  # a top-k ranking leads with its top set
            head = headline(cert).replace("top-", "Top ", 1)
        return head, [f"{rk.pairs_certified} of {rk.pairs} pair orders certified; all of them hold together with "
                      f"probability >= {1 - cert.procedure.delta:g}.",
                      "Possible winners (no model certified better): " + ", ".join(rk.possible_winners)]

    def classes(self, cert) -> list[str]:
        return ["selected" if m == cert.selected else "" for m in cert.ranking.order]

    def sections(self, cert) -> list[Section]:
        """Per pair: the certified order, the anytime interval on R(A) - R(B) and the items it used."""
        rk = cert.ranking
        out = [["pair (A - B)", "certified", "interval on R(A) - R(B)", "items"]]
        for pair, (lo, hi) in rk.difference_intervals.items():
            a, b = pair.split(" - ", 1)
            direct = rk.better_direct
            verdict = (f"{a} better" if b in direct.get(a, ()) else f"{b} better" if a in direct.get(b, ())
                       else f"{a} better (implied)" if b in rk.better.get(a, ())
                       else f"{b} better (implied)" if a in rk.better.get(b, ())
                       else f"tied within {rk.epsilon:g}" if f"{a} ~ {b}" in rk.tied else "undecided")
            out.append([pair, verdict, f"[{lo:+.3f}, {hi:+.3f}]", str(rk.items_per_pair.get(f"{a} vs {b}", ""))])
        return [Section("Pairs", "Each interval holds at every step with the pair's level; the orders shown as "
                                 "certified hold together with probability at least 1 - delta.", [out])]

    # -- the certificate ---------------------------------------------------------------------------
    def statement(self, result) -> str:
        cfg, rk, sel, K = result.cfg, result.ranking, result.selected_record, len(result.records)
        ties = _ties_words(rk) + f"; risk: a model's mean {self.loss_words(cfg)}"
        if rk.topk is not None:
            t = rk.topk
            return (f"the {t.k} best models include {', '.join(t.certified_in) or 'none certified'} and exclude "
                    f"{', '.join(t.certified_out) or 'none certified'}"
                    + (f"; undetermined: {', '.join(t.undetermined)}" if t.undetermined else "")
                    + f", simultaneously with probability >= {1 - cfg.delta:g}" + ties)
        if sel is None:
            return (f"no model is certified better than all {K - 1} others; the {rk.pairs_certified} certified "
                    f"of {rk.pairs} pair orders hold simultaneously with probability >= {1 - cfg.delta:g} "
                    f"(possible winners: {', '.join(rk.possible_winners)})" + ties)
        return (f"{sel.name} has a lower risk than each of the other {K - 1} models; every certified order "
                f"holds simultaneously with probability >= {1 - cfg.delta:g}" + ties)

    def top_fields(self, result) -> dict:
        return {"ranking": result.ranking.as_dict()}

    def candidate_metrics(self, result, row) -> dict:
        lo, hi = result.ranking.rank_intervals.get(row.candidate, (None, None))
        return {} if lo is None else {"rank_best": lo, "rank_worst": hi}

    def job_metrics(self, result) -> dict:
        return {"pairs_certified": result.ranking.pairs_certified, "pairs_tied": result.ranking.pairs_tied}

    def candidate_note(self, result, row) -> list[str]:
        """The model's certified rank interval and ties."""
        rk, bits = result.ranking, []
        lo, hi = rk.rank_intervals.get(row.candidate, (None, None))
        if lo is not None:
            bits.append(f"certified rank {lo}" + ("" if lo == hi else f" to {hi}") + f" of {len(result.records)}, "
                        f"together with every other model's, with probability >= {1 - result.cfg.delta:g}")
        ties = [p for p in rk.tied if row.candidate in p.split(" ~ ")]
        if ties:
            bits.append(f"tied within {rk.epsilon:g} with "
                        + ", ".join(x for p in ties for x in p.split(" ~ ") if x != row.candidate))
        return bits


def _ties_words(rk) -> str:
    """A ranking's certified ties and groups, for its statement ('' without epsilon)."""
    if rk.epsilon is None:
        return ""
    groups = " > ".join("{" + ", ".join(g) + "}" if len(g) > 1 else g[0] for g in rk.rank_groups)
    ties = (f"no pair is certified tied (|R(A) - R(B)| < {rk.epsilon:g})" if rk.pairs_tied == 0 else
            f"as is the tie |R(A) - R(B)| < {rk.epsilon:g}" if rk.pairs_tied == 1 else
            f"as are the {rk.pairs_tied} ties |R(A) - R(B)| < {rk.epsilon:g}")
    return f", {ties}; certified groups, best first: {groups}"


