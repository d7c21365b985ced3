"""One registry mechanism for every variation point: procedures, betting strategies, policy kinds and label-source
kinds.

A :class:`Registry` is a ``dict`` from a name to what is registered under it (an instance, or for betting strategies
the class, built per use with its parameters), with one way in (:meth:`Registry.register`: type and name checked) and
one way out (:meth:`Registry.lookup`: an unknown name is the one-line ``ValueError``
``KEY must be one of A, B, got 'X'``, KEY being the job-file key that names it).
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """Names to registered items of one base type (see the module docstring).

    ``key``: the job-file key naming an item (for messages); ``base``: what must be registered; ``classes``: store the
    class itself (built per use) instead of an instance (a class given to an instance registry is built with no
    arguments); ``listed``: which names an unknown-name error lists (default: all).
    """

    def __init__(self, key: str, base: type, *, classes: bool = False,
                 listed: Callable[[str], bool] | None = None):
        super().__init__()
        self.key, self.base, self.classes, self.listed = key, base, classes, listed

    def register(self, item):
        """Add ``item`` under its ``name``; returns what was stored."""
        what = self.base.__name__
        if self.classes:
            if not (isinstance(item, type) and issubclass(item, self.base)):
                raise TypeError(f"{self.key}: a registered item must subclass {what}, got {item!r}")
        else:
            if isinstance(item, type) and issubclass(item, self.base):
                item = item()
            if not isinstance(item, self.base):
                raise TypeError(f"{self.key}: a registered item must subclass {what}, got {item!r}")
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.key}: a registered {what} needs a non-empty name")
        self[name] = item
        return item

    def names(self) -> list[str]:
        """The names an error lists."""
        return [n for n in self if self.listed is None or self.listed(n)]

    def lookup(self, name, *, key: str | None = None, where: Callable[[T], bool] | None = None) -> T:
        """What is registered under ``name``; an unknown name is a one-line ValueError. ``where``: only items it
        accepts are found and listed, the error naming ``key`` (a registry serving several job-file keys)."""
        try:
            item = self[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name from a job file (a list)
            item = None
        if item is not None and (where is None or where(item)):
            return item
        names = [n for n in self.names() if where is None or where(self[n])]
        raise ValueError(f"{key or self.key} must be one of {', '.join(names) or '(none registered)'}, "
                         f"got {name!r}{did_you_mean(name, names)}") from None


def did_you_mean(name, choices) -> str:
    """`` (did you mean 'X'?)`` for the choice closest to a mistyped ``name``; '' when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
