"""What a running job shows: a live bar on a terminal, a plain line every few seconds elsewhere."""

from __future__ import annotations

import sys
import time


def make_console(stderr: bool = False):
    from rich.console import Console

    return Console(highlight=False, stderr=stderr)


PROGRESS_EVERY = 5.0  # seconds between progress lines when the output is a pipe or a file


class PlainLines:
    """Progress where a live bar cannot be drawn (a pipe, a file, CI's log): a plain line on
    stderr every :data:`PROGRESS_EVERY` seconds, no carriage returns; silent on a terminal."""

    def __init__(self, what: str, console):
        self.what, self.on = what, not console.is_terminal
        self.t0 = self.last = time.monotonic()

    def __call__(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.on and (force or now - self.last >= PROGRESS_EVERY):
            self.last = now
            print(f"{self.what}: {text} ({duration(now - self.t0)})", file=sys.stderr, flush=True)


def progress_bar(console, total: int):
    """A live line: candidates certified / running / stopped and labels spent."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} human labels"),
                   TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("starting", total=total)
    piped = PlainLines("certsel run", console)
    line = {"rounds": "starting", "servers": "", "t0": None}

    def show():
        bar.update(task, description=line["rounds"] + line["servers"])
        piped(line["rounds"] + line["servers"] + f", {int(bar.tasks[0].completed)} human labels")

    def stage(name):  # between rounds' lines: what the job is doing (Ray starting, the report, ...)
        if name == "rounds":
            line["t0"] = time.monotonic()
            name = "first round"
        line["rounds"] = f"{name} ..."
        show()

    def update(records, rounds):
        certified = sum(str(r.status) == "certified" for r in records)
        running = sum(not r.finished and r.n_human > 0 for r in records)
        settled = sum(r.finished for r in records)
        line["rounds"] = f"round {rounds}: {certified} certified, {running} running, {settled - certified} ended"
        if line["t0"] is not None and 0 < settled < len(records):
            left = (time.monotonic() - line["t0"]) / settled * (len(records) - settled)
            line["rounds"] += f", ~{duration(left)} left"  # at the pace candidates have settled so far
        waiting = sum(r.waiting for r in records if not r.finished)
        if waiting:  # labels from people (an annotation queue): the job holds nothing while it waits
            line["rounds"] += f", waiting for {waiting} annotation{'s' if waiting > 1 else ''}"
        bar.update(task, completed=sum(r.n_human for r in records))
        show()

    def servers(status):  # the job's own model servers (live.serve): a wait for placement is shown
        line["servers"] = servers_text(status)
        show()

    update.servers = servers
    update.stage = stage
    return bar, update


def duration(sec: float) -> str:
    return f"{sec:.0f} s" if sec < 90 else (f"{sec / 60:.0f} min" if sec < 5400 else f"{sec / 3600:.1f} h")


def servers_text(status: dict) -> str:
    """The progress line's part on the job's own servers: how many are up, and those awaiting placement (seconds)."""
    waiting = status.get("waiting") or {}
    text = f"; servers up: {len(status.get('up') or [])}"
    if waiting:
        text += "; waiting for placement: " + ", ".join(f"{n} ({s:.0f} s)" for n, s in sorted(waiting.items()))
    return text
