"""Where a job's outputs go, checked before the first label is bought: a path that cannot be written is an
:class:`~certsel.errors.InputError` raised before Ray starts, a job folder or an MLflow run exists."""

from __future__ import annotations

import os
import pathlib

from certsel.errors import InputError


def _nearest_existing(path: pathlib.Path) -> pathlib.Path:
    for p in (path, *path.parents):
        if p.exists():
            return p
    return pathlib.Path(".")


def output_dir(path, what: str) -> pathlib.Path:
    """``path`` as a folder that exists or can be created and written (``what`` names the option)."""
    path = pathlib.Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{what}: {path} is a file, not a folder")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise InputError(f"{what}: {base} is a file, so {path} cannot be a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{what}: {base} is not writable")
    return path.resolve()


def output_file(path, what: str) -> pathlib.Path:
    """``path`` as a file whose folder exists and is writable (``what`` names the option)."""
    path = pathlib.Path(path).expanduser()
    if path.is_dir():
        raise InputError(f"{what}: {path} is a folder, not a file")
    if not path.parent.is_dir():
        raise InputError(f"{what}: folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{what}: {path} is not writable")
    return path.resolve()
