"""Exceptions with messages that say what was wrong and how to fix it."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class TutorialLibError(Exception):
    """Base class of every error the library raises on purpose."""


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean 'sasrec'?)`` when ``name`` is a likely misspelling of a valid name, else ``""``."""
    lower = {v.lower(): v for v in valid}
    close = difflib.get_close_matches(str(name).strip().lower(), list(lower), n=2, cutoff=0.7)
    return f" (did you mean {' or '.join(repr(lower[c]) for c in close)}?)" if close else ""


class UnknownNameError(TutorialLibError, KeyError):
    """A model, dataset or option name that is not registered."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]):
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        super().__init__(f"unknown {kind} {name!r}{did_you_mean(name, self.valid)}; valid {kind}s are: "
                         f"{', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would otherwise add quotes around the message
        return self.args[0]


class DataFormatError(TutorialLibError, ValueError):
    """A data file that cannot be parsed (names the file and line)."""


class DatasetUnavailableError(TutorialLibError, FileNotFoundError):
    """A dataset file is missing and could not (or may not) be downloaded."""


class ChecksumError(TutorialLibError):
    """A downloaded file does not have the published sha256."""


class ConfigError(TutorialLibError, ValueError):
    """An impossible combination of settings (``max_len < 2``, ``k`` too large, ...)."""


class NotEnoughMemoryError(TutorialLibError, MemoryError):
    """The device ran out of memory; the message says which settings set the size (batch, window, catalogue)."""
