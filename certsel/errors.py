"""One error taxonomy, and one-line messages.

Every error certsel raises on purpose is a :class:`CertselError`:

* :class:`InputError` (exit status 2): the job cannot start as given (bad config or data, no Ray cluster, unusable
  tracking store, a model server that does not start, an unknown job id); raised before any MLflow run exists.
* :class:`JobError` (exit status 1): anything raised once the job runs, errors Ray re-raises from an actor included
  (its MLflow runs are marked FAILED).

The CLI prints ``certsel: error: <one line>`` and exits with the error's ``exit_code``.
"""

from __future__ import annotations

import contextlib


class CertselError(Exception):
    """Base of every error certsel raises on purpose; ``exit_code`` is the CLI's status."""

    exit_code = 1


class InputError(CertselError, ValueError):
    """Bad input: the job cannot start as given (exit status 2)."""

    exit_code = 2


class JobError(CertselError, RuntimeError):
    """The job failed while running (exit status 1)."""

    exit_code = 1


def first_line(exc: BaseException, default: str | None = None, limit: int | None = None) -> str:
    """The first non-blank line of ``str(exc)`` (cut to ``limit``), else ``default`` (None: the class name)."""
    text = str(exc).strip()
    if not text:
        return exc.__class__.__name__ if default is None else default
    line = text.splitlines()[0]
    return line if limit is None else line[:limit]


@contextlib.contextmanager
def as_input_errors(prefix: str = ""):
    """Inside, a ``ValueError`` (validators' and loaders' "bad input") becomes an :class:`InputError`, one line."""
    try:
        yield
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(prefix + first_line(exc)) from exc


def job_error(exc: BaseException) -> JobError:
    """``exc`` (raised while a job ran) as a :class:`JobError`; Ray's wrapped actor errors unwrapped to their cause."""
    if isinstance(exc, JobError):
        return exc
    cause = getattr(exc, "cause", None)  # ray.exceptions.RayTaskError carries the actor's exception
    inner = cause if isinstance(cause, BaseException) else exc
    # certsel's own errors say what failed in words; anything else is named by its type
    what = "" if isinstance(inner, CertselError) else f"{inner.__class__.__name__}: "
    err = JobError(f"job failed: {what}{first_line(inner, '')}".rstrip(": "))
    err.__cause__ = exc
    return err
