"""Exceptions with messages that say what was wrong and how to fix it."""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping


class TutorialLibError(Exception):
    """Base class of every error the library raises on purpose."""


_FILLER_WORDS = frozenset({"and", "the", "of", "version", "preprocessing"})


def _words(text: str) -> list[str]:
    """The lower-case letter/digit runs of ``text``: ``"MovieLens 1M (SASRec)"`` -> [movielens, 1m, sasrec]."""
    return re.findall(r"[a-z0-9]+", str(text).lower())


def close_names(name: str, valid: Iterable[str], descriptions: Mapping[str, str] | None = None) -> list[str]:
    """The valid names ``name`` most likely meant, best first; ``[]`` when none is close.

    Tried in order: the same letters and digits (``ML_1M`` -> ``ml-1m``); every word of ``name`` among the words of
    a valid name and its description (``movielens`` -> ``ml-1m``, ``ml-100k`` through their titles); a spelling
    close to one or two valid names (``sasrc`` -> ``sasrec``)."""
    valid = list(valid)
    same = [v for v in valid if "".join(_words(v)) == "".join(_words(name))]   # ML_1M -> ml-1m
    if same:
        return same
    words = set(_words(name)) - _FILLER_WORDS
    if descriptions and words:
        hits = [v for v in valid if words <= set(_words(f"{v} {descriptions.get(v, '')}"))]
        if hits:
            return hits
    lower = {v.lower(): v for v in valid}
    return [lower[c] for c in difflib.get_close_matches(str(name).strip().lower(), list(lower), n=2, cutoff=0.7)]


def did_you_mean(name: str, valid: Iterable[str], descriptions: Mapping[str, str] | None = None) -> str:
    """`` (did you mean 'sasrec'?)`` when ``name`` is likely meant as a valid name (:func:`close_names`), else
    ``""``. ``descriptions`` (name -> title) lets a word of a title find its name."""
    close = close_names(name, valid, descriptions)
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f" (did you mean {quoted[0] if len(quoted) == 1 else ', '.join(quoted[:-1]) + ' or ' + quoted[-1]}?)"


class UnknownNameError(TutorialLibError, KeyError):
    """A model, dataset or option name that is not registered."""

    def __init__(self, kind: str, name: str, valid: Iterable[str], descriptions: Mapping[str, str] | None = None,
                 hint: str | None = None):
        valid = list(valid)
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        why = f" ({hint})" if hint else did_you_mean(name, valid, descriptions)
        super().__init__(f"unknown {kind} {name!r}{why}; valid {kind}s are: {', '.join(self.valid)}")

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
