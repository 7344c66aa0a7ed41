"""The machinery behind every exercise check: run the learner's function and the library's tested
version on the same small inputs, explain the first difference in plain words.

Outcomes of :func:`check_function`:

* success: one line ``✅ <name> matches <library> on N cases`` is printed;
* the learner's function still raises ``NotImplementedError`` (the stub): :class:`ExerciseNotDone`
  (a ``NotImplementedError``) saying that the notebook continues with the library's version; the checks a
  notebook calls are wrapped in :func:`exercise_check`, which prints that message instead of raising it;
* any difference: :class:`CheckFailed` (an ``AssertionError``) whose message names the input case, what
  differs (type, tuple length, shape, dtype, NaN, masking, values at an index) and a hint.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import io
import re
import traceback
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

OK_MARK = "✅"
TODO_MARK = "⏳"


_CHECKS_DIR = str(Path(__file__).parent)


class _ShortTraceback:
    """How IPython shows a check's exception (its ``_render_traceback_`` hook): the message without the frames
    of the check machinery; when the learner's own code raised, the frames of that code first."""

    def _render_traceback_(self) -> list[str]:
        lines = []
        cause = self.__cause__
        if cause is not None:
            frames = [f for f in traceback.extract_tb(cause.__traceback__) if not f.filename.startswith(_CHECKS_DIR)]
            lines += ["Traceback of your code (most recent call last):",
                      *"".join(traceback.format_list(frames)).rstrip("\n").splitlines(),
                      f"{type(cause).__name__}: {cause}", ""]
        return lines + [f"{type(self).__name__}: {self}"]


class CheckFailed(_ShortTraceback, AssertionError):
    """The learner's code runs but does not do what the library does (the message says how)."""


class ExerciseNotDone(_ShortTraceback, NotImplementedError):
    """The learner's function is still the stub that raises ``NotImplementedError``."""


def exercise_check(check: Callable[..., None]) -> Callable[..., None]:
    """Decorator of the checks a notebook calls: an exercise not written yet is reported, not raised.

    The wrapped check prints the ⏳ message of :class:`ExerciseNotDone` and returns, so that Jupyter's "Run All"
    (which stops at the first cell that raises) goes on with the library's version after an exercise the learner
    skips. A wrong solution still raises :class:`CheckFailed` and stops there. The undecorated check is
    ``check.__wrapped__``.
    """
    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            check(*args, **kwargs)
        except ExerciseNotDone as exc:
            print(exc)
    return run


def passes(check: Callable[..., None], *args: Any, **kwargs: Any) -> bool:
    """Whether ``check(*args, **kwargs)`` passes, run quietly: ``False`` for an exercise not done yet or a failed
    check. For notebook code that uses the learner's function where it is right and the library's otherwise."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            getattr(check, "__wrapped__", check)(*args, **kwargs)
        except (NotImplementedError, AssertionError):  # ExerciseNotDone, CheckFailed (or a bare assert)
            return False
    return True


@dataclass
class Case:
    """One input of a check: positional and keyword arguments, and a short human label."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def call_text(self, name: str, limit: int = 12) -> str:
        """The call ``name(args..., key=value...)`` as text, arrays of more than ``limit`` values shortened to their
        shape (:func:`short_repr`)."""
        parts = ([short_repr(a, limit) for a in self.args]
                 + [f"{k}={short_repr(v, limit)}" for k, v in self.kwargs.items()])
        return f"{name}({', '.join(parts)})"


# ----------------------------------------------------------------------------- formatting
def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy copy of an array, tensor, list or scalar."""
    if _is_tensor(x):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy().copy()
    return np.array(x)


def short_repr(x: Any, limit: int = 12) -> str:
    """``[3, 7, 2]`` for small arrays/lists/tensors, ``<tensor of shape (2, 5, 8), float32>`` for big ones."""
    if _is_tensor(x) or isinstance(x, np.ndarray):
        arr = to_numpy(x)
        kind = "tensor" if _is_tensor(x) else "array"
        if arr.size <= limit and arr.ndim <= 2:
            return np.array2string(arr, separator=", ").replace("\n", "")
        return f"<{kind} of shape {tuple(arr.shape)}, {arr.dtype}>"
    if isinstance(x, (list, tuple)) and len(x) <= limit and all(np.isscalar(v) for v in x):
        return repr(list(x)) if isinstance(x, list) else repr(tuple(x))
    if isinstance(x, (list, tuple)):
        return f"<{type(x).__name__} of {len(x)} items>"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt_index(idx: tuple) -> str:
    return str(int(idx[0])) if len(idx) == 1 else "(" + ", ".join(str(int(i)) for i in idx) + ")"


def _fmt_value(v: Any) -> str:
    if isinstance(v, (np.floating, float)):
        return f"{float(v):.6g}"
    if isinstance(v, (np.integer, np.bool_)):
        return str(v.item())
    return str(v)


def _kind(arr: np.ndarray) -> str:
    names = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats", "c": "complex numbers"}
    return names.get(arr.dtype.kind, str(arr.dtype))


def _array_like(x: Any) -> bool:
    return _is_tensor(x) or isinstance(x, (np.ndarray, list, tuple, int, float, bool, np.generic))


# ----------------------------------------------------------------------------- comparison
def explain_difference(actual: Any, expected: Any, name: str = "output", atol: float = 1e-5,
                       rtol: float = 1e-4) -> str | None:
    """``None`` when ``actual`` matches ``expected``, else a sentence (or a few lines) saying how it differs.

    Tuples are compared element by element (``name[0]``, ...), dicts key by key, arrays / tensors / lists /
    numbers with tolerances ``atol``/``rtol`` (exactly for integers and booleans).
    """
    if actual is None and expected is not None:
        return f"{name}: your function returned None; did you forget the `return` statement?"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{name}: expected a dict with keys {sorted(expected)}, got {type(actual).__name__}"
        if set(actual) != set(expected):
            missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
            return f"{name}: keys differ (missing {missing}, unexpected {extra})"
        for key in expected:
            msg = explain_difference(actual[key], expected[key], f"{name}[{key!r}]", atol, rtol)
            if msg:
                return msg
        return None
    if isinstance(expected, tuple):
        if not isinstance(actual, (tuple, list)):
            return (f"{name}: expected a tuple of {len(expected)} values, got {type(actual).__name__}"
                    f"{' of shape ' + str(tuple(np.shape(actual))) if _array_like(actual) else ''}")
        if len(actual) != len(expected):
            return f"{name}: expected {len(expected)} values, got {len(actual)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            msg = explain_difference(a, e, f"{name}[{i}]", atol, rtol)
            if msg:
                return msg
        return None
    if not _array_like(actual):
        return f"{name}: expected an array-like value, got {type(actual).__name__} ({short_repr(actual)})"
    try:
        a = to_numpy(actual)
    except Exception as exc:  # ragged lists and the like
        return f"{name}: could not turn your value into an array ({type(exc).__name__}: {exc})"
    e = to_numpy(expected)
    return _explain_arrays(a, e, name, atol, rtol)


def _explain_arrays(a: np.ndarray, e: np.ndarray, name: str, atol: float, rtol: float) -> str | None:
    if a.shape != e.shape:
        msg = f"{name}: shape mismatch: expected {tuple(e.shape)}, yours is {tuple(a.shape)}"
        if a.ndim == e.ndim and sorted(a.shape) == sorted(e.shape):
            msg += " (the same sizes in another order: a missing transpose or permute?)"
        elif a.ndim == e.ndim + 1 and a.shape[1:] == e.shape:
            msg += " (an extra leading dimension?)"
        elif tuple(d for d in a.shape if d != 1) == tuple(d for d in e.shape if d != 1):
            msg += " (a dimension of size 1 too many or too few: keepdim, squeeze or unsqueeze?)"
        elif a.ndim + 1 == e.ndim and (gone := [i for i in range(e.ndim) if e.shape[:i] + e.shape[i + 1:] == a.shape]):
            msg += (" (the batch dimension is missing?)" if gone == [0] else
                    f" (dimension {' or '.join(map(str, gone))} of the expected shape is missing?)")
        elif a.size == e.size:
            msg += " (the same number of elements: a reshape or view in the wrong layout?)"
        return msg
    kind_a, kind_e = a.dtype.kind.replace("u", "i"), e.dtype.kind.replace("u", "i")
    if kind_a != kind_e and a.size and not (kind_e == "f" and kind_a == "i" and e.dtype != object):
        return f"{name}: expected {_kind(e)} ({e.dtype}), yours are {_kind(a)} ({a.dtype})"
    if a.dtype == object or e.dtype == object:
        if a.tolist() == e.tolist():
            return None
        return f"{name}: yours is {short_repr(a)}, expected {short_repr(e)}"
    if e.dtype.kind in "fc" or a.dtype.kind in "fc":
        wide = np.complex128 if "c" in (a.dtype.kind, e.dtype.kind) else np.float64
        a64, e64 = a.astype(wide), e.astype(wide)
        bad_nan = np.isnan(a64) & ~np.isnan(e64)
        if bad_nan.any():
            if a.ndim == 0:
                return (f"{name}: yours is NaN, expected {_fmt_value(e[()])} (a division by zero, or a NaN among the "
                        "inputs that should have been left out?)")
            idx = tuple(np.argwhere(bad_nan)[0])
            guess = "a division by zero, or a softmax over a row that is entirely -inf?" if a.ndim >= 2 else \
                "a division by zero, or a NaN among the inputs?"
            return f"{name}: NaN at {int(bad_nan.sum())} position(s), first at index {_fmt_index(idx)} ({guess})"
        same = np.isclose(a64, e64, atol=atol, rtol=rtol, equal_nan=True)
    else:
        same = a == e
    if same.all():
        return None
    if a.ndim == 0:
        return f"{name}: yours is {_fmt_value(a[()])}, expected {_fmt_value(e[()])}"
    wrong = ~same
    n_wrong, first = int(wrong.sum()), tuple(np.argwhere(wrong)[0])
    lines = [f"{name}: values differ at {n_wrong} of {a.size} positions; first at index {_fmt_index(first)}: "
             f"yours {_fmt_value(a[first])}, expected {_fmt_value(e[first])}"]
    if a.dtype.kind in "iu" and e.dtype.kind == "f" and np.array_equal(a[wrong], np.trunc(e[wrong])):
        lines.append(f"yours are {_kind(a)} ({a.dtype}) where floats are expected: did an integer cast "
                     "(`.long()`, `int(...)`, `//`) drop the fractions?")
    masking = _masking_hint(a, e, wrong)
    if masking:
        lines.append(masking)
    elif e.dtype.kind in "fc" or a.dtype.kind in "fc":
        with np.errstate(invalid="ignore"):
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        finite = diff[np.isfinite(diff)]
        if finite.size:
            lines.append(f"largest absolute difference {finite.max():.3g} (tolerance: atol={atol:g}, rtol={rtol:g})")
    if a.size <= 24 and a.ndim <= 2:
        lines.append(f"yours:    {np.array2string(a, separator=', ')}".replace("\n", "\n          "))
        lines.append(f"expected: {np.array2string(e, separator=', ')}".replace("\n", "\n          "))
    return "\n".join(lines)


#: how :func:`_masking_hint`'s sentences begin
MASKING_GUESS = "masking looks wrong"


def _masking_hint(a: np.ndarray, e: np.ndarray, wrong: np.ndarray) -> str | None:
    """A sentence about masking when every wrong position is a masked one (-inf or exact 0) in one of the two."""
    with np.errstate(invalid="ignore"):
        e_masked = np.isneginf(e) | (e == 0) if e.dtype.kind in "fiu" else np.zeros_like(wrong)
        a_masked = np.isneginf(a) | (a == 0) if a.dtype.kind in "fiu" else np.zeros_like(wrong)
    if not (e_masked.any() or a_masked.any()):
        return None
    if e.ndim < 2 and not np.isneginf(e).any():
        return None  # zeros in a vector are usually just values (a metric outside the top K), not a mask
    if np.all(e_masked[wrong]) and not np.any(a_masked[wrong]):
        value = "-inf" if np.isneginf(e[wrong]).all() else "0"
        return (f"{MASKING_GUESS}: all {int(wrong.sum())} differing positions are masked in the reference "
                f"({value} there) but not in yours. Is the causal / padding mask applied, and on the right side?")
    if a.dtype.kind in "fiu" and not np.any(a) and np.any(e):
        return ("every value of yours is 0 while the reference's are not: is the result still a placeholder "
                "(torch.zeros...), or did a mask hide everything (all False, or combined with the wrong shape)?")
    if np.all(a_masked[wrong]) and not np.any(e_masked[wrong]):
        return (f"{MASKING_GUESS}: all differing positions are masked (0 or -inf) in yours but hold real "
                "values in the reference. Is the mask too wide, or inverted (True = keep vs True = hide)?")
    return None


# ----------------------------------------------------------------------------- running a check
def not_done_message(name: str, library: str | None) -> str:
    """The ⏳ message for ``name`` still being the stub: the notebook goes on with ``library``'s version."""
    where = f" ({library})" if library else ""
    return (f"{TODO_MARK} exercise not done yet: the notebook continues with the library's version{where}, so "
            f"you can read on and come back later. `{name}` still raises NotImplementedError: replace "
            "`# YOUR CODE HERE` and `raise NotImplementedError()` in the exercise cell with your code, run that "
            "cell, then run this check again.")


def _mutated(before: Any, after: Any) -> bool:
    """Whether the learner's function changed an argument in place (tensors, arrays and lists, elementwise)."""
    try:
        if _is_tensor(before) or isinstance(before, np.ndarray):
            b, a = to_numpy(before), to_numpy(after)
            return b.shape != a.shape or not np.array_equal(b, a, equal_nan=b.dtype.kind in "fc")
        if isinstance(before, list):
            return len(before) != len(after) or any(_mutated(b, a) for b, a in zip(before, after))
        if isinstance(before, (int, float)) and isinstance(after, (int, float)):
            return before != after and not (before != before and after != after)   # NaN stays NaN
    except Exception:  # noqa: BLE001 - a value we cannot compare is not reported
        return False
    return False


def is_stub_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from an exercise stub (``raise NotImplementedError()``) rather than from the learner's
    code: torch reports an unsupported dtype as ``NotImplementedError`` too (``"bitwise_and_cpu" not implemented
    for 'Float'``, from mixing a float mask with a bool one), and that is a mistake to explain, not an exercise
    left undone. The raising line decides when its source is known, else an empty message (the stub's)."""
    if not isinstance(exc, NotImplementedError):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    line = (frames[-1].line or "").strip() if frames else ""
    if line:
        return line.startswith("raise NotImplementedError")
    return not str(exc)


def _raised(exc: BaseException, case: Case, name: str, dot_t: list) -> CheckFailed:
    """The failure for an exception raised by the learner's code (not the stub)."""
    dtype_hint = (" (torch raises NotImplementedError for an operation that a dtype does not support: "
                  "check the dtypes of the tensors on that line, e.g. `&` needs two bool tensors)"
                  if isinstance(exc, NotImplementedError) else "")
    return CheckFailed(
        f"`{name}` raised {type(exc).__name__}: {exc}\n"
        f"while computing {case.call_text(name)}{' (' + case.label + ')' if case.label else ''}.\n"
        "The traceback above shows the line of your code where it happened." + dtype_hint
        + (DOT_T_HINT if dot_t else ""))


def call_learner(fn: Callable, case: Case, name: str, library: str | None = None) -> Any:
    """Call ``fn`` on a deep copy of the case's arguments; translate its exceptions into check outcomes."""
    args, kwargs = copy.deepcopy(case.args), copy.deepcopy(case.kwargs)
    dot_t: list = []
    try:
        with _watch_dot_t() as dot_t:
            result = fn(*args, **kwargs)
    except NotImplementedError as exc:
        if not is_stub_error(exc):
            raise _raised(exc, case, name, dot_t) from exc
        raised_in = traceback.extract_tb(exc.__traceback__)[-1].name
        if raised_in not in (name, "<lambda>") and not raised_in.startswith("_"):   # a helper it calls
            raise ExerciseNotDone(
                f"{TODO_MARK} `{name}` calls `{raised_in}`, which still raises NotImplementedError (an earlier "
                f"exercise not done yet?). Write `{raised_in}` first, run its cell, then run this check again; "
                f"until then the notebook continues with the library's version{f' ({library})' if library else ''}."
            ) from None
        raise ExerciseNotDone(not_done_message(name, library)) from None
    except Exception as exc:
        raise _raised(exc, case, name, dot_t) from exc
    for i, (before, after) in enumerate(zip(case.args, args)):
        if _mutated(before, after):
            raise CheckFailed(f"`{name}` modified its argument {i + 1} in place for {case.call_text(name)}; "
                              "work on a copy (e.g. `x = x.clone()` / `np.array(x)`) instead")
    for key in case.kwargs:
        if _mutated(case.kwargs[key], kwargs[key]):
            raise CheckFailed(f"`{name}` modified its argument `{key}` in place for {case.call_text(name)}; "
                              "work on a copy instead")
    return result


#: the start of torch's warning for ``.T`` on a tensor that is not 2-D
DOT_T_WARNING = "The use of `x.T` on tensors of dimension other than 2"
DOT_T_HINT = ("\nHint: your code uses `.T` on a tensor with more than 2 dimensions: `.T` reverses ALL of them. "
              "To transpose the last two, write `.transpose(-2, -1)` (or `.mT`).")


@contextlib.contextmanager
def _watch_dot_t():
    """Record whether torch warned about ``.T`` on a non-2-D tensor inside the block (yields a list that gets
    ``True`` appended); every warning is passed on as it would have been."""
    import torch

    seen: list[bool] = []
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)          # torch gives this warning once per process; a second attempt needs it too
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield seen
            finally:
                seen.extend(True for w in caught if DOT_T_WARNING in str(w.message))
    finally:
        torch.set_warn_always(warn_always)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _explain_result(result: Any, expected: Any, output_names: Sequence[str] | None, atol: float,
                    rtol: float) -> str | None:
    if (output_names is not None and isinstance(expected, tuple) and isinstance(result, (tuple, list))
            and len(result) == len(expected) == len(output_names)):
        for out_name, r, e in zip(output_names, result, expected):
            if r is None and e is not None:
                return (f"`{out_name}` is None: return a value for it too, NaN where it is undefined (the function "
                        f"returns {', '.join(output_names)})")
            msg = explain_difference(r, e, f"`{out_name}`", atol, rtol)
            if msg:
                return msg
        return None
    msg = explain_difference(result, expected, "the result", atol, rtol)
    if msg and output_names is not None and result is not None:
        msg += f" (expected: {', '.join(output_names)})"
    return msg


def check_function(
    learner: Callable,
    reference: Callable,
    cases: Sequence[Case],
    *,
    name: str | None = None,
    library: str | None = None,
    output_names: Sequence[str] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    hint: str | None = None,
    diagnose: Callable[[Case, Any, Any], str | None] | None = None,
    quiet: bool = False,
) -> int:
    """Compare ``learner`` with ``reference`` on every case; print ✅ and return the number of cases.

    Args:
        learner: the learner's function (from the exercise cell).
        reference: the library's tested implementation with the same signature.
        cases: inputs, simplest first (the first failing case is the one explained).
        name: how to call the function in messages (default: ``learner.__name__``).
        library: the library function the notebook falls back on, for the messages.
        output_names: names of the elements when the function returns a tuple (``("inputs", "targets")``).
        atol, rtol: tolerances for floating-point outputs.
        hint: a sentence appended to every failure message.
        diagnose: ``diagnose(case, yours, expected)`` may return a specific hint for this failure
            (e.g. "you padded on the right").
        quiet: do not print the success line.

    Raises:
        ExerciseNotDone: the learner's function raises ``NotImplementedError``.
        CheckFailed: it raises anything else, modifies its inputs, or returns something different.
    """
    name = name or getattr(learner, "__name__", "your function")
    if not callable(learner):
        raise CheckFailed(f"expected a function, got {type(learner).__name__}: pass the function itself, "
                          f"e.g. check({name}) not check({name}(...))")
    for case in cases:
        result = call_learner(learner, case, name, library)
        expected = reference(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
        msg = _explain_result(result, expected, output_names, atol, rtol)
        if msg:
            label = f" ({case.label})" if case.label else ""
            text = [f"`{name}` differs from the library's version for\n    {case.call_text(name)}{label}", msg]
            has_none = result is None or (isinstance(result, (tuple, list)) and any(x is None for x in result))
            extra = diagnose(case, result, expected) if diagnose is not None and not has_none else None
            if extra:   # the specific diagnosis replaces the generic guess about masking, which would mislead
                text[1] = "\n".join(line for line in msg.split("\n") if not line.startswith(MASKING_GUESS))
                text.append(f"Hint: {extra}")
            if hint and result is not None:   # a missing `return` is the whole story
                text.append(f"{'Reminder' if extra else 'Hint'}: {hint}")
            raise CheckFailed("\n".join(text)) from None
    if not quiet:
        against = f" ({library})" if library else ""
        print(f"{OK_MARK} `{name}` matches the library's version{against} on {len(cases)} test cases.")
    if any(refers_to(learner, target) for target in library_objects(library)):
        library_notice(name, library)
    return len(cases)


def expect_gradients(learner: Callable, reference: Callable, case: Case, wrt: Sequence[int], name: str,
                     output: Callable[[Any], Any] = lambda result: result, keep: Any = None,
                     atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Fail unless ``learner`` passes ``reference``'s gradients back to the arguments ``wrt`` of ``case``.

    A function that gives the right numbers through NumPy, ``.detach()`` or ``torch.no_grad()`` passes every value
    comparison, but no gradient reaches the parameters behind its inputs, so the model built on it would not train.
    ``output`` picks the tensor to differentiate from a result (``lambda r: r[0]`` for an ``(output, weights)``
    pair); ``keep`` (broadcastable to it) leaves out the entries the value checks do not compare (padding rows).
    The two are differentiated through the same weighted sum, weights spread over [-1, 2]."""
    import torch

    labels = _parameter_names(reference)
    grads = []
    for fn in (learner, reference):
        args = list(copy.deepcopy(case.args))
        leaves = []
        for i in wrt:
            args[i] = torch.as_tensor(args[i]).detach().clone().requires_grad_()
            leaves.append(args[i])
        try:
            out = output(fn(*args, **copy.deepcopy(case.kwargs)))
        except Exception as exc:  # noqa: BLE001 - the learner's code passed the value checks on these inputs
            if fn is reference:
                raise
            fail(f"`{name}` raised {type(exc).__name__} when its inputs require gradients: {exc}")
        if fn is reference and getattr(out, "grad_fn", None) is None:
            raise TypeError(f"the reference {getattr(reference, '__name__', reference)!r} is not differentiable in "
                            "the arguments checked: give expect_gradients a written-out reference")
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            fail(f"`{name}` gives the right values but no gradient flows through them (computed with NumPy, "
                 "`.detach()` or under `torch.no_grad()`?): training could not reach the parameters behind its "
                 "inputs. Compute it with torch operations on the tensors passed in")
        weight = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).reshape(out.shape)
        if keep is not None:
            weight = weight * torch.as_tensor(keep, dtype=out.dtype)
        grads.append(torch.autograd.grad((out * weight).sum(), leaves, allow_unused=True))
    for i, mine, ref in zip(wrt, *grads):
        label = labels[i] if i < len(labels) else f"argument {i + 1}"
        if mine is None and ref is not None:
            fail(f"no gradient reaches `{label}` through `{name}` (detached, or replaced by a constant?): the loss "
                 "must be able to train what it depends on")
        if ref is not None and bool(torch.isnan(mine).any()) and not bool(torch.isnan(ref).any()):
            fail(f"`{name}` gives the library's values, but the gradient of `{label}` has NaN: a NaN computed along "
                 "the way (a softmax over a row that is entirely -inf, a 0 / 0) reaches the gradient even where the "
                 "output was replaced by 0 at the end, so one such row would turn the model's weights into NaN. "
                 "Remove the NaN where it arises (e.g. torch.nan_to_num on the weights before they multiply the "
                 "values), or let every position see itself")
        msg = None if ref is None else explain_difference(mine, ref, f"the gradient of `{label}`", atol, rtol)
        if msg:
            fail(f"`{name}` gives the library's values but not its gradients: {msg}")


def _parameter_names(fn: Callable) -> list[str]:
    """Names of ``fn``'s positional parameters (``[]`` when they cannot be read)."""
    import inspect

    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def fail(message: str) -> None:
    """Raise :class:`CheckFailed` with ``message`` (for property checks written by hand)."""
    raise CheckFailed(message)


def expect(condition: bool, message: str) -> None:
    """``fail(message)`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message)


def passed(message: str) -> None:
    """Print the success line of a hand-written check."""
    print(f"{OK_MARK} {message}")


def library_notice(name: str, library: str, advice: str = "the exercise is to write it yourself") -> None:
    """Print that an answer that passed calls the library's own version of what it was asked to write."""
    print(f"ℹ `{name}` calls the library's {library} itself: {advice}.")


def refers_to(fn: Callable, target: Any, depth: int = 3) -> bool:
    """Whether the code of ``fn`` names ``target`` (a global, or a variable it closes over), under any name,
    also through functions it closes over (a check's wrapper around the learner's function): how a check
    notices an exercise answered by calling the library's own function."""
    if fn is target:
        return True
    code = getattr(fn, "__code__", None)
    if code is None or depth == 0:
        return False
    globals_ = getattr(fn, "__globals__", {})
    named = [globals_.get(n) for n in code.co_names]
    modules = [obj for obj in named if isinstance(obj, types.ModuleType)]
    if any(obj is target for obj in named) or any(getattr(m, n, None) is target     # module.function
                                                   for m in modules for n in code.co_names):
        return True
    return any(callable(c) and refers_to(c, target, depth - 1) for c in _closure_values(fn))


def _closure_values(fn: Callable) -> list[Any]:
    """The values ``fn`` closes over (a variable not assigned yet is left out)."""
    values = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            pass
    return values


def library_objects(library: str | None) -> tuple[Any, ...]:
    """The objects a check's ``library`` string names: ``"tutorial_lib.evaluation.ndcg_at_k"``, or several
    joined by ``" + "`` or ``" / "`` where the later ones are names in the first one's module
    (``"tutorial_lib.data.TrainingWindows + iterate_batches"``). A description rather than a path
    (``"... (encoder='conv')"``) names nothing."""
    if not library:
        return ()
    first, *others = re.split(r"\s+[+/]\s+", library.strip())
    if not re.fullmatch(r"[A-Za-z_][\w.]*", first) or not all(re.fullmatch(r"[A-Za-z_]\w*", o) for o in others):
        return ()
    parts = first.split(".")
    for split_at in range(len(parts) - 1, 0, -1):      # the longest importable module, then attributes
        try:
            module = importlib.import_module(".".join(parts[:split_at]))
        except ImportError:
            continue
        owner, found = module, []
        try:
            for attr in parts[split_at:-1]:
                owner = getattr(owner, attr)
            found.append(getattr(owner, parts[-1]))
            found.extend(getattr(owner, o) for o in others)
        except AttributeError:
            return ()
        return tuple(found)
    return ()
