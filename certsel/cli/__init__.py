"""The ``certsel`` command line.

``certsel run CONFIG.yaml`` runs a selection job (Ray actors per candidate, MLflow
tracking; see :mod:`certsel.orchestrator.commands.job`); ``certsel show RUN_ID`` prints a past
job's certificate. Bad input exits with status 2 and a one-line error. One module per family of
commands (:mod:`.running`, :mod:`.studies`, :mod:`.kept`, :mod:`.foreign_logs`); the parser in
:mod:`.parser`, progress in :mod:`.progress`.
"""

from __future__ import annotations

import os
import sys

from certsel.errors import CertselError, first_line

from . import foreign_logs, kept, running, studies
from .parser import build_parser
from .progress import servers_text

__all__ = ["build_parser", "main", "command", "servers_text"]


# libraries whose debug output drowns certsel's (matplotlib: ~2,000 font lines): at warning whatever --log-level says
_NOISY = ("matplotlib", "PIL", "urllib3", "filelock", "asyncio", "httpcore", "httpx", "alembic", "git", "numba",
          "fsspec", "h5py", "graphviz", "opentelemetry")


def _logging(level: str | None) -> None:
    import logging

    level = (level or "warning").upper()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for name in _NOISY:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def command() -> None:
    """The ``certsel`` console script: :func:`main`, then the end of the process without the interpreter's teardown.

    Everything a command writes is written (closed or committed) before :func:`main` returns, and what it leaves
    running ends in its ``atexit`` handlers (Ray, the output process, logging), which run here as at any exit. What is
    skipped is freeing every module one by one: about 0.4 s after a job on a table, as long as its statistics
    (docs/results.md, "Overhead"). A command that left a thread of its own running ends as any Python program does."""
    import atexit
    import threading

    code = main()
    if any(t is not threading.current_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)  # the interpreter's own shutdown stops and joins them first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError):
            pass
    os._exit(int(code or 0))


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `certsel` alone: what it can do
        parser.print_help()
        return 2
    _logging(getattr(args, "log_level", None))
    if getattr(args, "home", None) is not None:  # read by every default (jobs folder, MLflow store) from here on
        from certsel.home import HOME_ENV

        os.environ[HOME_ENV] = str(args.home.expanduser().absolute())
    if args.command in ("run", "gate"):  # MLflow (or matplotlib) imported there from now on, beside the job's loading
        from certsel.orchestrator.outputs.output_process import prestart

        prestart(track=not args.no_tracking)
    commands = {"run": running.run_command, "gate": running.gate_command, "show": kept.show_command,
                "audit": studies.audit_command, "plan": studies.plan_command, "jobs": kept.jobs_command,
                "schema": kept.schema_command, "lm-eval-table": foreign_logs.lm_eval_table_command,
                "inspect-table": foreign_logs.inspect_table_command}
    try:
        return commands[args.command](args)
    except CertselError as exc:  # InputError: 2 (nothing was started); JobError: 1 (runs marked FAILED)
        print(f"certsel: error: {first_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:  # a check of the command line itself
        print(f"certsel: error: {first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resume = getattr(args, "resume_command", None)  # set once the job's folder exists
        print("certsel: interrupted (runs marked KILLED)" + (f"; resume with: {resume}" if resume else ""),
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`certsel schema | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # anything else once work started: the job failed
        print(f"certsel: error: job failed: {exc.__class__.__name__}: {first_line(exc, '')}", file=sys.stderr)
        return 1
