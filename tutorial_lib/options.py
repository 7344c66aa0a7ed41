"""Model options written as text (``key=value``), as the CLI's ``--option``, the benchmark specs
(``"sasrec:attn_dropout=0.2"``) and the ``options`` column of ``results/runs.csv`` spell them.

Imports nothing heavy, so that parsing the command line does not import torch."""
from __future__ import annotations


def parse_value(text: str) -> object:
    """``"2"`` -> 2, ``"1e-3"`` -> 0.001, ``"true"``/``"False"`` -> bool, ``"none"`` -> None; anything else stays
    the string it is (``"tf"``)."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_key_value(text: str) -> tuple[str, object]:
    """``"k=40"`` -> ``("k", 40)``; :class:`ValueError` that quotes ``text`` when it has no ``=`` or no key."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"an option is written key=value (e.g. dropout=0.1), got {text!r}")
    return key.strip(), parse_value(value)


__all__ = ["parse_value", "parse_key_value"]
