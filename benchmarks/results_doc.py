"""The sections of docs/results.md, each written by the benchmark that measures it.

A benchmark prints its Markdown as it goes; run with ``--docs``, what it printed also becomes
its section of docs/results.md, between markers that name the section, under a line that
says which command wrote it, when and on what machine. Rerunning the command rewrites the
section and leaves the others as they are; a new section goes at the end.

    with results_section("defaults", "Defaults against the old settings", write=args.docs):
        print("| example | ... |")
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import pathlib
import platform
import re
import shlex
import sys

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "results.md"
START, END = "<!-- section: {key} -->", "<!-- end: {key} -->"
# the line under each section's title; tests/test_results_doc.py reads it back
WRITTEN = re.compile(r"^\*Written by `(?P<command>[^`]+)` on (?P<date>\d{4}-\d{2}-\d{2}), (?P<machine>[^*]+)\.\*$",
                     re.MULTILINE)


def machine() -> str:
    """The machine in words: CPU model, cores, Python."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def command(argv: list[str] | None = None) -> str:
    """The command that ran, as a user would type it from the repository's root."""
    argv = list(sys.argv if argv is None else argv)
    script = pathlib.Path(argv[0]).resolve()
    with contextlib.suppress(ValueError):
        argv[0] = str(script.relative_to(RESULTS.parents[1]))
    return shlex.join(["python", *argv])


def render(key: str, title: str, body: str, cmd: str, day: datetime.date | None = None) -> str:
    """One section, markers included."""
    day = day or datetime.date.today()
    return (f"{START.format(key=key)}\n## {title}\n\n*Written by `{cmd}` on {day.isoformat()}, {machine()}.*\n\n"
            f"{body.strip()}\n{END.format(key=key)}\n")


def write_section(key: str, title: str, body: str, cmd: str, path: pathlib.Path = RESULTS) -> None:
    """Put the section into the page: in place of its earlier text, else at the end."""
    text = path.read_text() if path.exists() else "# Measured results\n"
    new = render(key, title, body, cmd)
    start, end = START.format(key=key), END.format(key=key)
    if start in text:
        i, j = text.index(start), text.index(end, text.index(start)) + len(end) + 1
        text = text[:i] + new + text[j:]
    else:
        text = text.rstrip("\n") + "\n\n" + new
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # never a half-written page


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


@contextlib.contextmanager
def results_section(key: str, title: str, *, write: bool):
    """Print as usual; with ``write``, what was printed becomes section ``key`` (once the block
    ends without an error: a failed run leaves the page as it was)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, buf)):
        yield
    if write:
        write_section(key, title, buf.getvalue(), command())
        print(f"wrote the section {key!r} of {RESULTS.relative_to(RESULTS.parents[1])}", file=sys.stderr)
