"""The ``label-studio`` label source kind: people label in Label Studio, asked only for what each candidate's test still
needs (:mod:`certsel.workers.label_studio_source`); selected by ``labels: {kind: label-studio, url: ..., api_key_env:
..., outputs: ..., choices: ... or rating: ..., ...}`` (docs/annotators.md, 'The job').

Everything is checked when the job's data is loaded, before any task is imported: the table, the server (reachable, the
token accepted), and an existing project's labelling config (a Choices or Rating control the declared losses map, and no
data field certsel does not send). A project certsel creates is found again by a marker in its description when the job
runs again, and its tasks are mapped back to candidates and items by their keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import pathlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from certsel.config import LiveCandidateRef, RunConfig
from certsel.config.identity import config_fingerprint
from certsel.errors import first_line
from certsel.policies.kinds import Labels
from certsel.workers.annotations import COMBINE, AnswerScale, control_of, data_keys, labelling_config
from certsel.workers.tables import read_table

from .jobdata import JobData, fingerprint, listed
from .label_studio_hook import HEADER, HOOK_PATH, AnswerHook
from .source_kind import Poll, Provides, SourceKind, register_source_kind

log = logging.getLogger(__name__)


class RatingScale(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    scale: int = Field(5, ge=2, le=10, description="stars, 1..scale")
    losses: list[float] | None = None  # each star's loss (default: linear, 1 at one star, 0 at scale)


class NewProject(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str = Field("certsel", min_length=1, max_length=50)


class LabelStudioOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str = Field(pattern=r"^https?://")
    api_key_env: str = Field("LABEL_STUDIO_API_KEY", min_length=1)
    outputs: pathlib.Path
    judge: str | None = None  # the outputs' column of recorded judge losses
    choices: dict[str, float] | None = None
    rating: RatingScale | None = None
    control: str = Field("verdict", min_length=1, description="the control's name in the labelling config")
    instructions: str = "Is the answer correct?"
    annotators_per_item: int = Field(1, ge=1, le=20)
    combine: Literal[tuple(COMBINE)] = "mean"
    queue: int = Field(10, ge=1, le=10_000)
    poll: float = Field(5.0, gt=0, le=3600)
    show_judge: bool = False  # show annotators the judge's loss (the certificate then says so)
    project: int | NewProject = NewProject()
    # Label Studio calls certsel when an answer comes (the job then looks at once, not at the next
    # poll): the address it can reach certsel at (port 0: any free one)
    webhook: bool = False
    webhook_host: str = "127.0.0.1"
    webhook_port: int = Field(0, ge=0, le=65535)
    candidates: list[LiveCandidateRef] | None = None  # objectives (default: the outputs' candidates)

    @model_validator(mode="after")
    def _one_scale(self):
        if (self.choices is None) == (self.rating is None):
            raise ValueError("give exactly one of choices (answer -> loss) or rating (a star scale)")
        if self.show_judge and self.judge is None:
            raise ValueError("show_judge needs judge (the outputs' column of judge losses)")
        if self.webhook and self.webhook_host in ("0.0.0.0", "::", ""):
            raise ValueError("webhook_host: the address Label Studio calls certsel at, not a wildcard like "
                             f"{self.webhook_host!r}")
        self.scale  # a rating's star losses, checked now  # noqa: B018
        return self

    @field_validator("choices")
    @classmethod
    def _losses(cls, v):
        if v is not None:
            if len(v) < 2:
                raise ValueError("declare at least two choices")
            for k, x in v.items():
                if not (math.isfinite(x) and 0.0 <= x <= 1.0):
                    raise ValueError(f"the loss of choice {k!r} must lie in [0, 1], got {x}")
        return v

    @property
    def scale(self) -> AnswerScale:
        if self.choices is not None:
            return AnswerScale(self.control, "choices", dict(self.choices))
        return AnswerScale.rating(self.control, self.rating.scale, self.rating.losses)


@dataclass(frozen=True)
class Annotation:
    """What the specs of a Label Studio job share (``JobData.function``): the project and, per candidate, the task data,
    the task keys and the tasks already in the project."""

    marker: str  # the job's mark in its project's description and every task key
    project: int | None  # None until prepared
    payload: tuple  # item -> task data (the candidate's answer: per candidate below)
    answers: dict  # candidate -> tuple of answers by item
    judge: dict | None  # candidate -> tuple of judge losses
    tasks: dict  # candidate -> {item: task id}
    poll: Poll | None = None  # the driver's wait between looks (prepared)
    hook: AnswerHook | None = None  # the webhook's endpoint (labels.webhook)
    webhook: int | None = None  # the webhook's id in Label Studio

    def keys(self, candidate: str) -> tuple:
        return tuple(task_key(self.marker, candidate, i) for i in range(len(self.payload)))


def task_key(marker: str, candidate: str, item: int) -> str:
    """An opaque key for (job, candidate, item): annotators never see the candidate's name."""
    return hashlib.sha256(f"{marker}\0{candidate}\0{item}".encode()).hexdigest()[:20]


COLUMNS = ("candidate", "item", "question", "answer")


def read_outputs(opts: LabelStudioOptions):
    """The candidates' answers: (candidate ids in table order, item ids, payload per item, answers per candidate, judge
    losses per candidate or None)."""
    path = opts.outputs
    table = read_table(path, "outputs table")
    cols = set(table.column_names)
    missing = [c for c in (*COLUMNS, *([opts.judge] if opts.judge else [])) if c not in cols]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (an outputs table has candidate, item, "
                         "question, answer, and optionally reference and a judge-loss column)")
    rows = table.to_pydict()
    if not rows["item"]:
        raise ValueError(f"{path}: the outputs table has no rows")
    cands = list(dict.fromkeys(str(c) for c in rows["candidate"]))
    items = list(dict.fromkeys(str(i) for i in rows["item"]))
    index = {i: k for k, i in enumerate(items)}
    K, N = len(cands), len(items)
    answers = {c: [None] * N for c in cands}
    judge = {c: np.full(N, np.nan) for c in cands} if opts.judge else None
    question, reference = [None] * N, [None] * N
    has_ref = "reference" in cols
    for r in range(len(rows["item"])):
        c, i = str(rows["candidate"][r]), index[str(rows["item"][r])]
        if answers[c][i] is not None:
            raise ValueError(f"{path}: candidate {c!r} has two rows for item {items[i]!r}")
        q, a = rows["question"][r], rows["answer"][r]
        if not isinstance(q, str) or not isinstance(a, str):
            raise ValueError(f"{path}: row {r}: question and answer must be text (item {items[i]!r})")
        for what, have, got in (("question", question, q), ("reference", reference, rows["reference"][r] if has_ref else None)):
            if have[i] is None:
                have[i] = got
            elif have[i] != got:
                raise ValueError(f"{path}: item {items[i]!r} has two different {what}s (rows for {c!r})")
        answers[c][i] = a
        if judge is not None:
            x = rows[opts.judge][r]
            if x is None or not (isinstance(x, (int, float)) and math.isfinite(x) and 0.0 <= x <= 1.0):
                raise ValueError(f"{path}: column {opts.judge!r} must hold judge losses in [0, 1], got {x!r} "
                                 f"(candidate {c!r}, item {items[i]!r})")
            judge[c][i] = float(x)
    for c in cands:
        lacking = [items[i] for i, a in enumerate(answers[c]) if a is None]
        if lacking:
            raise ValueError(f"{path}: candidate {c!r} has no answer for {len(lacking)} item(s), e.g. {lacking[0]!r} "
                             f"(every candidate needs every item: {N} items, {K} candidates)")
    payload = []
    for i in range(N):
        d = {"question": question[i], "item_id": items[i]}
        if has_ref:
            d["reference"] = "" if reference[i] is None else str(reference[i])
        payload.append(d)
    return cands, items, tuple(payload), {c: tuple(a) for c, a in answers.items()}, \
        None if judge is None else {c: tuple(v.tolist()) for c, v in judge.items()}


def check_server(opts: LabelStudioOptions, sends: set[str]) -> None:
    """The server answers, accepts the token and, for an existing project, its labelling config can be answered on the
    declared scale with the data certsel sends."""
    from certsel.workers.label_studio_client import LabelStudioClient, LabelStudioError, token_from

    with LabelStudioClient(opts.url, token_from(opts.api_key_env), retries=0) as client:
        client.whoami()
        if isinstance(opts.project, int):
            proj = client.project(opts.project)
            config = proj.get("label_config") or ""
            why = control_of(config, opts.scale)
            if why is not None:
                raise LabelStudioError(f"Label Studio project {opts.project}: {why}")
            # Label Studio hands a task to maximum_annotations people: fewer than the job needs and
            # items never complete; more, and which answers count would depend on who is fastest
            overlap = int(proj.get("maximum_annotations") or 1)
            if overlap != opts.annotators_per_item:
                raise LabelStudioError(f"Label Studio project {opts.project} asks {overlap} annotator(s) per task "
                                       f"(maximum_annotations), the job annotators_per_item: "
                                       f"{opts.annotators_per_item}; make them equal")
            unknown = sorted(data_keys(config) - sends)
            if unknown:
                raise LabelStudioError(f"Label Studio project {opts.project}: its labelling config shows "
                                       f"${', $'.join(unknown)}, which certsel does not send (it sends "
                                       f"{', '.join(sorted(sends))})")


class LabelStudioKind(SourceKind):
    name = "label-studio"
    options = LabelStudioOptions
    prepare_stage = "preparing the Label Studio project"

    def provides(self, cfg):
        opts = self.settings(cfg)
        return Provides(opts.judge is not None, False, "labels.judge (a column of judge losses)",
                        "features (the label-studio source has none)")

    def queue_waiter(self, cfg, data):
        return data.function.poll

    def release(self, cfg, data):
        """Delete the job's webhook and stop its endpoint (a failure is logged: the job's outcome does not depend on
        it)."""
        from certsel.workers.label_studio_client import LabelStudioClient, LabelStudioError, token_from

        ann = data.function
        if not isinstance(ann, Annotation) or ann.hook is None:
            return
        try:
            opts = self.settings(cfg)
            with LabelStudioClient(opts.url, token_from(opts.api_key_env)) as client:
                client.delete_webhook(ann.webhook)
        except Exception as err:  # noqa: BLE001  (cleanup: the job's outcome does not depend on it)
            log.warning("could not delete the job's Label Studio webhook %s: %s", ann.webhook, first_line(err))
        finally:
            ann.hook.close()

    def load(self, cfg: RunConfig) -> JobData:
        from certsel.workers.label_studio_client import LabelStudioClient, LabelStudioError, token_from

        opts = self.settings(cfg)
        if cfg.proc.ranking:
            raise ValueError("labels.kind label-studio: pairwise rankings are not supported (a selection "
                             "procedure is: fixed-sequence, bonferroni, holm)")
        cands, _, payload, answers, judge = read_outputs(opts)
        refs = opts.candidates or [LiveCandidateRef(id=c) for c in cands]
        unknown = [c.id for c in refs if c.id not in answers]
        if unknown:
            raise ValueError(f"labels.candidates: {', '.join(unknown)} not in {opts.outputs}")
        chosen = listed(cfg, refs, "labels.candidates")
        sends = {"question", "answer", "item_id", "certsel"} | ({"reference"} if "reference" in payload[0] else set()) \
            | ({"judge_loss"} if opts.show_judge else set())
        try:
            check_server(opts, sends)
        except LabelStudioError as err:
            raise ValueError(str(err)) from None
        # the outputs' content (the options are part of the job's configuration, in its identity already)
        return JobData(table=None, features=None, fingerprint=fingerprint(opts.outputs), live=chosen, n_source_items=len(payload),
                       function=Annotation(marker="", project=None, payload=payload, answers=answers, judge=judge,
                                           tasks={}))

    def prepare(self, cfg: RunConfig, data: JobData, fleet):
        """The project (found again by the job's marker, else created; or the one named by id) and the tasks already in
        it, mapped back to candidates and items by their keys."""
        from certsel.workers.label_studio_client import LabelStudioClient, LabelStudioError, token_from

        opts = self.settings(cfg)
        ann: Annotation = data.function
        marker = config_fingerprint(cfg, data.fingerprint)[:16]  # the job's identity, as its folder's
        with LabelStudioClient(opts.url, token_from(opts.api_key_env)) as client:
            if isinstance(opts.project, int):
                project = opts.project
            else:
                mark = f"certsel job {marker}"
                found = [p for p in client.projects() if mark in (p.get("description") or "")]
                if found:
                    project = int(found[0]["id"])
                else:
                    config = labelling_config(opts.scale, instructions=opts.instructions,
                                              reference="reference" in ann.payload[0], judge=opts.show_judge)
                    project = int(client.create_project(
                        title=opts.project.title, label_config=config, maximum_annotations=opts.annotators_per_item,
                        show_skip_button=True, description=f"{opts.instructions}\n\n({mark}: do not edit this line)")["id"])
            names = [c.id for c in data.live]
            where = {task_key(marker, c, i): (c, i) for c in names for i in range(len(ann.payload))}
            tasks: dict = {c: {} for c in names}
            for t in client.tasks(project):
                key = (t.get("data") or {}).get("certsel")
                if key in where:
                    c, i = where[key]
                    tasks[c].setdefault(i, int(t["id"]))
            poll, hook, webhook = Poll(opts.poll), None, None
            for old in client.webhooks(project):  # an earlier run of a job killed before it could delete its own
                if HEADER in (old.get("headers") or {}) and str(old.get("url", "")).endswith(HOOK_PATH):
                    client.delete_webhook(old["id"])
            if opts.webhook:
                hook = AnswerHook(poll, opts.webhook_host, opts.webhook_port)
                try:
                    webhook = client.create_webhook(project, hook.url, hook.headers,
                                                    ["ANNOTATION_CREATED", "ANNOTATION_UPDATED"])
                except BaseException:
                    hook.close()
                    raise
        ann = dataclasses.replace(ann, marker=marker, project=project, tasks=tasks, poll=poll, hook=hook,
                                  webhook=webhook)
        return cfg, dataclasses.replace(data, function=ann)

    def spec(self, cfg, data, k, with_judge):
        from certsel.workers.label_studio_source import LabelStudioSpec

        opts = self.settings(cfg)
        ann: Annotation = data.function
        c = data.names[k]
        shown = [dict(p, answer=ann.answers[c][i]) for i, p in enumerate(ann.payload)]
        if opts.show_judge:
            shown = [dict(p, judge_loss=f"{ann.judge[c][i]:.2f}") for i, p in enumerate(shown)]
        kind = cfg.policy.policy_kind
        return LabelStudioSpec(candidate=c, url=opts.url, token_env=opts.api_key_env, project=ann.project,
                               scale=opts.scale, per_item=opts.annotators_per_item, combine=opts.combine,
                               queue=opts.queue, ordered=cfg.policy.is_testing and kind.labels is Labels.ORDER,
                               payload=tuple(shown), keys=ann.keys(c),
                               judge=ann.judge[c] if with_judge and ann.judge is not None else None,
                               tasks=dict(ann.tasks.get(c, {})))

    def loss_words(self, cfg):
        opts = self.settings(cfg)
        scale = opts.scale
        answers = ", ".join(f"{a} {x:g}" for a, x in scale.losses.items()) if scale.kind == "choices" else \
            f"1 to {scale.scale} stars, " + ", ".join(f"{a}: {x:g}" for a, x in scale.losses.items())
        who = "one annotator's loss" if opts.annotators_per_item == 1 else \
            f"the {opts.combine} of {opts.annotators_per_item} annotators' losses"
        saw = "; the annotators were shown the judge's loss" if opts.show_judge else \
            "; the annotators were not shown the judge"
        return f"loss as people judged it (per item: {who}, from their answers: {answers}{saw})"

    def items_words(self, n_items):
        return f"the {n_items} items of the outputs table, each labelled by people in Label Studio"


register_source_kind(LabelStudioKind)
