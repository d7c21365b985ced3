"""One-line error messages (the CLI's rule: an error is one line naming the problem)."""

from __future__ import annotations


def first_line(exc: BaseException, default: str | None = None, limit: int | None = None) -> str:
    """The first non-blank line of ``str(exc)`` (cut to ``limit`` characters), or
    ``default`` (the exception's class name if None) when it has no text."""
    text = str(exc).strip()
    if not text:
        return exc.__class__.__name__ if default is None else default
    line = text.splitlines()[0]
    return line if limit is None else line[:limit]
