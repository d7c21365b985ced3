"""Human labels from people in Label Studio: :class:`LabelStudioSpec` and :class:`LabelStudioSource`.

One source per candidate; a job's candidates share one project, each task carrying an opaque key (``data.certsel``),
never the candidate's name. Behaviour: docs/annotators.md, 'How it asks only for what is needed'. Contracts: tasks are
imported only for items asked for (and, for a policy in the job's order, the next ones), at most ``queue`` unanswered,
never beyond the budget; an item is pending (:class:`~certsel.workers.contracts.LabelsPending`) until it has
``annotators_per_item`` valid answers, and items reach the test in the order asked, never the order answered (the order
is what makes the test valid); :meth:`LabelStudioSource.withdraw` deletes a settled candidate's untouched tasks, later
answers are recorded as unused; every task and annotation is journaled before its loss reaches the policy, so a
restarted job imports and counts nothing twice; an answer that maps to no loss
(:class:`~certsel.workers.annotations.Refusal`) or a skip is recorded and does not count.
"""

from __future__ import annotations

import logging
from datetime import datetime
from dataclasses import dataclass, field

import numpy as np

from certsel.errors import first_line

from .annotations import COMBINE, AnswerScale, Refusal, agreement
from .contracts import Journal, LabelsPending, MemoryJournal, QueueReport, SourceError
from .label_studio_client import LabelStudioClient, LabelStudioError, token_from

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelStudioSpec:
    """One candidate's Label Studio source as the workers receive it (the token is read from ``token_env`` in the
    worker, never shipped). ``tasks``: item -> task id already in the project (a resumed job); ``payload[i]`` and
    ``keys[i]``: item i's task data and opaque key; ``judge``: recorded judge losses (or None); ``ordered``: the policy
    labels in the job's seeded order (the queue may run ahead of it)."""

    candidate: str
    url: str
    token_env: str
    project: int
    scale: AnswerScale
    per_item: int
    combine: str
    queue: int
    ordered: bool
    payload: tuple
    keys: tuple
    judge: tuple | None = None
    tasks: dict = field(default_factory=dict)
    kind = "label-studio"

    def build(self, arrays, rows) -> LabelStudioSource:
        order = arrays.human_items if self.ordered and arrays.human_items is not None else None
        try:
            client = LabelStudioClient(self.url, token_from(self.token_env))
        except LabelStudioError as err:
            raise SourceError(str(err)) from None
        return LabelStudioSource(self, client, order=order)


def started_before(annotation: dict, task_created: str | None, slack: float = 1.0) -> bool:
    """Whether an annotation was begun (its submit time less the seconds the annotator spent, ``lead_time``, which Label
    Studio's page records) before its task was created."""
    if not task_created or not annotation.get("created_at") or not annotation.get("lead_time"):
        return False
    try:
        done = datetime.fromisoformat(str(annotation["created_at"]).replace("Z", "+00:00"))
        made = datetime.fromisoformat(str(task_created).replace("Z", "+00:00"))
        return (done - made).total_seconds() + slack < float(annotation["lead_time"])
    except (TypeError, ValueError):
        return False


class LabelStudioSource:
    """Labels of one candidate from annotators in Label Studio (see the module docstring).

    Label Studio (on SQLite) reuses a deleted task's id, and its annotations' ids, for the next import; so a task is
    known by its import record (``seq``, item, key), every read checks the task's key, and an annotation is known by
    (import record, annotation id).
    """

    def __init__(self, spec: LabelStudioSpec, client: LabelStudioClient, order=None):
        self.spec, self.client = spec, client
        self.k, self.combine = int(spec.per_item), COMBINE[spec.combine]
        self.order = None if order is None else np.asarray(order, dtype=np.int64)
        self._pos = None if self.order is None else {int(i): p for p, i in enumerate(self.order.tolist())}
        self.journal: Journal = MemoryJournal()
        self.settled = False
        self.requests = 0  # annotations behind the labels given (people's work)
        self._judge_given: set[int] = set()
        self._load({})

    # -- state ----------------------------------------------------------------------------------
    def attach(self, journal: Journal) -> None:
        """Take up the durable records of an earlier run of this job (and write to them)."""
        self.journal = journal
        self._load(journal.records())

    def _load(self, records: dict) -> None:
        self.imports: dict[int, dict] = {}  # seq -> {item, task, withdrawn, gone}: every task imported
        self.live: dict[int, int] = {}  # item -> seq of its task in the project now
        self.seen: dict[tuple, dict] = {}  # (seq, annotation id) -> its record
        self._answers: dict[int, list[dict]] = {}  # item -> its valid answers, in the order they were seen
        self._used: set[int] = set()  # items whose loss the policy has been given
        # annotations in the order they were first seen (the first k valid ones make the loss)
        for key, body in sorted(records.items(), key=lambda kv: (kv[0].startswith("annotation/"), kv[1].get("n", 0))):
            kind = key.partition("/")[0]
            if kind == "task":
                self.imports[int(body["seq"])] = body
            elif kind == "annotation":
                self._remember(body)
            elif kind == "settled":
                self.settled = True
            elif kind == "used":
                self._used.update(int(i) for i in body["items"])
        now = {int(i): int(t) for i, t in self.spec.tasks.items()}  # in the project now (its keys checked)
        for seq, rec in sorted(self.imports.items()):
            if rec["withdrawn"] or rec.get("gone"):
                continue
            if now.get(rec["item"]) == rec["task"]:
                self.live[rec["item"]] = seq
            else:  # deleted while the job was away (by hand in Label Studio)
                self._journal_task(dict(rec, gone=True))
        for i, t in now.items():
            if i not in self.live:  # imported by a run whose record did not reach the journal
                self._new_task(i, t)
        self.requests = sum(len(self._valid(i)) for i in self._used)

    def _journal_task(self, rec: dict) -> None:
        self.journal.record(f"task/{rec['seq']}", rec)
        self.imports[rec["seq"]] = rec

    def _new_task(self, item: int, task: int) -> None:
        seq = len(self.imports)
        self._journal_task({"seq": seq, "item": item, "task": task, "key": self.spec.keys[item], "withdrawn": False})
        self.live[item] = seq

    def _remember(self, rec: dict) -> None:
        self.seen[(int(rec["seq"]), int(rec["id"]))] = rec
        if rec["status"] == "valid":
            self._answers.setdefault(int(rec["item"]), []).append(rec)

    def _valid(self, item: int) -> list[dict]:
        """The valid answers that make the item's loss: the first ``k`` seen."""
        return self._answers.get(item, [])[: self.k]

    def _complete(self, item: int) -> bool:
        return len(self._valid(item)) >= self.k

    def _loss(self, item: int) -> float:
        return float(self.combine(np.array([a["loss"] for a in self._valid(item)], dtype=np.float64)))

    # -- the LabelSource contract --------------------------------------------------------------
    @property
    def n_items(self) -> int:
        return len(self.spec.payload)

    @property
    def human_labels(self) -> int:
        return len(self._used)

    @property
    def judge_labels(self) -> int:
        return len(self._judge_given)

    def human(self, items) -> np.ndarray:
        items = [int(i) for i in np.asarray(items, dtype=np.int64).tolist()]
        try:
            if not self.settled:
                self._top_up(items)
            self._poll([i for i in items if i in self.live and not self._complete(i)])
        except LabelStudioError as err:
            raise SourceError(f"{self.spec.candidate}: {err}") from None
        ready = next((k for k, i in enumerate(items) if not self._complete(i)), len(items))
        if ready < len(items) and not self.spec.ordered:
            ready = 0  # a policy that chose these items takes them all at once: nothing is given before
        losses = np.array([self._loss(i) for i in items[:ready]], dtype=np.float64)
        new = [i for i in dict.fromkeys(items[:ready]) if i not in self._used]
        if new:  # durable before the policy can see them (the label log commits the losses next)
            self.journal.record(f"used/{len(self._used)}", {"items": new})
            self._used.update(new)
            self.requests += sum(len(self._valid(i)) for i in new)
        if ready == len(items):
            return losses
        # answers awaited on the project's tasks, and on items asked for that have no task yet
        unasked = sum(self.k for i in dict.fromkeys(items) if i not in self.live and not self._complete(i))
        raise LabelsPending(ready, self.awaited() + unasked, losses)

    def judge(self, items) -> np.ndarray:
        if self.spec.judge is None:
            raise ValueError("this Label Studio source has no judge (labels.judge column)")
        items = np.asarray(items, dtype=np.int64)
        self._judge_given.update(items.tolist())
        return np.asarray(self.spec.judge, dtype=np.float64)[items]

    def awaited(self) -> int:
        """Valid answers still awaited on the candidate's tasks in the project."""
        return sum(self.k - len(self._valid(i)) for i in self.live if not self._complete(i))

    # -- the queue -----------------------------------------------------------------------------
    def _top_up(self, items: list[int]) -> None:
        """Import tasks for the items asked for and, for a test in order, the next ones, up to ``queue`` tasks whose
        labels it has not taken: imports never run more than ``queue`` ahead of the labels used. A policy that chose its
        items gets its whole batch imported (and nothing ahead: nobody knows its next draw)."""
        want = [i for i in dict.fromkeys(items) if i not in self.live and not self._complete(i)]
        if not self.spec.ordered:
            if want:
                self._import(want)
            return
        if self.order is not None and items and all(i in self._pos for i in items):
            start = max(self._pos[i] for i in items) + 1
            want += [i for i in self.order[start:].tolist() if i not in self.live and not self._complete(i)]
        room = self.spec.queue - sum(1 for i in self.live if i not in self._used)
        new = list(dict.fromkeys(want))[: max(room, 0)]
        if new:
            self._import(new)

    def _import(self, items: list[int]) -> None:
        data = [self._data(i) for i in items]
        try:
            ids = self.client.import_tasks(self.spec.project, data)
        except LabelStudioError as err:
            if err.status is not None:
                raise
            # no answer: the tasks may have been created; look before importing again
            found = self._find(items)
            for i in items:
                if i in found:
                    self._new_task(i, found[i])
            items = [i for i in items if i not in found]
            ids = self.client.import_tasks(self.spec.project, [self._data(i) for i in items])
        for i, t in zip(items, ids, strict=True):
            self._new_task(i, t)

    def _data(self, item: int) -> dict:
        return dict(self.spec.payload[item], certsel=self.spec.keys[item])

    def _find(self, items: list[int]) -> dict[int, int]:
        key_item = {self.spec.keys[i]: i for i in items}
        return {key_item[t["data"]["certsel"]]: int(t["id"]) for t in self.client.tasks(self.spec.project)
                if isinstance(t.get("data"), dict) and t["data"].get("certsel") in key_item}

    def _fetch(self, item: int) -> dict | None:
        """The item's task as the project holds it now, or None when gone (a reused id with another key counts as gone).
        """
        rec = self.imports[self.live[item]]
        task = self.client.task(rec["task"])
        if task is None or (task.get("data") or {}).get("certsel") != self.spec.keys[item]:
            return None
        return task

    def _poll(self, items: list[int]) -> None:
        """Record every new annotation of these items' tasks (a task deleted by hand is imported again while needed)."""
        for i in items:
            task = self._fetch(i)
            seq = self.live[i]
            if task is None:  # gone (deleted in Label Studio): the item needs a task again
                log.warning("%s: the task of item %d was deleted in Label Studio", self.spec.candidate, i)
                self._journal_task(dict(self.imports[seq], gone=True))
                del self.live[i]
                if not self.settled:
                    self._import([i])
                continue
            for a in task.get("annotations") or []:
                if (seq, int(a["id"])) not in self.seen:
                    self._see(i, seq, a, task.get("created_at"))

    def _see(self, item: int, seq: int, a: dict, task_created: str | None = None) -> None:
        who = a.get("completed_by")
        rec = {"n": len(self.seen), "seq": seq, "id": int(a["id"]), "item": item,
               "annotator": who.get("id") if isinstance(who, dict) else who, "late": self.settled}
        if a.get("was_cancelled"):
            rec.update(status="skipped")
        elif started_before(a, task_created):
            # Label Studio on SQLite reuses a deleted task's id: an answer begun before this task is not about it
            rec.update(status="refused", reason="begun before this task existed (on a withdrawn task with its id)")
        else:
            try:
                ans = self.spec.scale.answer(a.get("result"))
                rec.update(status="valid", answer=ans, loss=self.spec.scale.losses[ans])
            except Refusal as why:
                rec.update(status="refused", reason=first_line(why, limit=200))
                log.warning("%s: annotation %d of item %d refused: %s", self.spec.candidate, rec["id"], item,
                            rec["reason"])
        self.journal.record(f"annotation/{seq}/{rec['id']}", rec)
        self._remember(rec)
        if rec["status"] == "refused" and not self.settled:
            # recorded above; taken out of the project, or Label Studio would count it and ask nobody again
            try:
                self.client.delete_annotation(rec["id"])
            except LabelStudioError as err:
                log.warning("%s: could not return refused annotation %d's task to the queue: %s",
                            self.spec.candidate, rec["id"], first_line(err))

    # -- settling --------------------------------------------------------------------------------
    def withdraw(self) -> QueueReport:
        """The candidate is settled: record what has come in, delete the tasks nobody has touched, and say what the
        queue did (safe to call again)."""
        try:
            if not self.settled:
                self.journal.record("settled/", {})
            self.settled = True
            self._poll([i for i in self.live if not self._complete(i)])
            untouched, touched = [], {seq for seq, _ in self.seen}  # tasks with any answer, skip or refusal
            for i, seq in list(self.live.items()):
                if self._complete(i) or seq in touched:
                    continue
                task = self._fetch(i)
                if task is None or task.get("annotations") or task.get("total_annotations") \
                        or task.get("cancelled_annotations") or task.get("drafts"):
                    continue  # someone has started it: it stays, its answers are recorded
                untouched.append(i)
            if untouched:
                self.client.delete_tasks(self.spec.project, [self.imports[self.live[i]]["task"] for i in untouched])
                for i in untouched:
                    self._journal_task(dict(self.imports[self.live.pop(i)], withdrawn=True))
        except LabelStudioError as err:
            log.warning("%s: withdrawing from Label Studio failed: %s", self.spec.candidate, first_line(err))
        return self.report()

    def report(self) -> QueueReport:
        valid = [a for a in self.seen.values() if a["status"] == "valid"]
        used_ids = {(a["seq"], a["id"]) for i in self._used for a in self._valid(i)}
        withdrawn = sum(1 for r in self.imports.values() if r["withdrawn"])
        return QueueReport(
            tasks_imported=len(self.imports), tasks_withdrawn=withdrawn, annotations_saved=self.k * withdrawn,
            annotations_used=len(used_ids),
            annotations_unused=sum(1 for a in valid if (a["seq"], a["id"]) not in used_ids),
            annotations_refused=sum(1 for a in self.seen.values() if a["status"] == "refused"),
            answers_awaited=0 if self.settled else self.awaited(),
            annotators=len({a["annotator"] for a in self.seen.values()}),
            agreement=agreement([(a["item"], a["annotator"], a["answer"]) for a in valid], self.spec.scale))
