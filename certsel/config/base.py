"""What every section of the job schema shares: the one-line error and strict models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from certsel.errors import InputError


class ConfigError(InputError):
    """A configuration problem; ``str()`` is one line naming the file and the key."""


def no_duplicates(values, what: str) -> None:
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"duplicate {what}: {', '.join(dup)}")


class Strict(BaseModel):
    """A section of the job file: unknown keys are errors, values frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
