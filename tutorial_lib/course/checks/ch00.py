"""Checks of notebook 00 (welcome): turning a user's history into one training window."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import Case, check_function, exercise_check

LIBRARY = "tutorial_lib.data.TrainingWindows + iterate_batches"


def library_window(history: Sequence[int] | np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, targets)`` of one history exactly as :mod:`tutorial_lib.data` batches it for training."""
    import torch

    from ...data.batching import TrainingWindows, iterate_batches

    windows = TrainingWindows.from_train([np.asarray(history, dtype=np.int64)], max_len)
    batch = next(iterate_batches(windows, batch_size=1, generator=torch.Generator().manual_seed(0),
                                 bucketing=False))
    return batch.inputs[0].numpy(), batch.targets[0].numpy()


def window_cases(seed: int = 0, n_random: int = 12) -> list[Case]:
    """Hand-picked cases (short, exact fit, long) followed by seeded random ones."""
    cases = [
        Case(([5, 2, 9],), {"max_len": 5}, "a history shorter than max_len: left padding"),
        Case(([5, 2, 9],), {"max_len": 2}, "a history of exactly max_len + 1 items: no padding"),
        Case(([5, 2, 9],), {"max_len": 3}, "a history of exactly max_len items"),
        Case(([4, 8, 15, 16, 23, 42, 7, 1],), {"max_len": 4}, "a history longer than max_len: keep the most recent"),
        Case(([3, 1],), {"max_len": 2}, "the shortest useful history: 2 items"),
    ]
    rng = np.random.default_rng(seed)
    for _ in range(n_random):
        length = int(rng.integers(2, 30))
        history = rng.choice(np.arange(1, 500), size=length, replace=False).astype(np.int64)
        cases.append(Case((history,), {"max_len": int(rng.integers(2, 16))}, "a random history"))
    return cases


def _diagnose(case: Case, yours: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    """Recognise the usual mistakes of this exercise."""
    try:
        inputs, targets = (np.asarray(v) for v in yours)
    except (TypeError, ValueError):
        return "return a pair `(inputs, targets)` of two 1-D integer arrays of length max_len"
    history = np.asarray(case.args[0])
    max_len = case.kwargs["max_len"]
    exp_in, exp_tg = expected
    if inputs.shape != (max_len,) or targets.shape != (max_len,):
        return f"both arrays have exactly max_len = {max_len} entries, whatever the history's length"
    x, y = history[:-1][-max_len:], history[1:][-max_len:]
    right_padded = np.zeros(max_len, dtype=np.int64)
    right_padded[: len(x)] = x
    if len(x) < max_len and np.array_equal(inputs, right_padded):
        return ("you padded on the right. The course pads on the LEFT, so that the most recent item always "
                "sits at the last index (position L-1) whatever the history's length")
    oldest = np.zeros(max_len, dtype=np.int64)
    head = history[:-1][:max_len]
    oldest[max_len - len(head):] = head
    if len(history) - 1 > max_len and np.array_equal(inputs, oldest):
        return "for a long history keep the most RECENT max_len items (the end of the history), not the oldest"
    cut = history[-max_len:]                       # the history cut to max_len BEFORE the shift: one pair lost
    early = np.zeros(max_len, dtype=np.int64), np.zeros(max_len, dtype=np.int64)
    early[0][max_len - len(cut) + 1:], early[1][max_len - len(cut) + 1:] = cut[:-1], cut[1:]
    if len(history) > max_len and np.array_equal(inputs, early[0]) and np.array_equal(targets, early[1]):
        return ("you cut the history to max_len items before shifting, which loses the oldest pair: keep the last "
                "max_len + 1 items (history[-(max_len + 1):]) and shift those, or cut inputs and targets separately")
    if np.array_equal(inputs, targets):
        return "targets are the inputs shifted by one step: the target at position t is the item after input t"
    if np.array_equal(inputs, exp_tg) and np.array_equal(targets, exp_in):
        return "inputs and targets are swapped: inputs are the items seen so far, targets the item that comes next"
    if np.array_equal(inputs, exp_in) and len(y) == len(x):
        if np.array_equal(targets, exp_tg):     # the values are right: what differs is the type, said above
            return None
        return "the inputs are right; each target is the item that FOLLOWS the input at the same position"
    return None


@exercise_check
def check_make_window(make_window: Callable[..., Any]) -> None:
    """Check ``make_window(history, max_len) -> (inputs, targets)`` against the library's batching."""
    check_function(make_window, library_window, window_cases(), library=LIBRARY,
                   output_names=("inputs", "targets"), diagnose=_diagnose,
                   hint="inputs = history[:-1] and targets = history[1:], each cut to the last max_len items and "
                        "left-padded with 0 to length max_len")
