"""Exercise checks: compare a learner's function with the library's tested version.

In a notebook, every exercise cell (tagged ``exercise``) is followed by a check cell (tagged ``check``)::

    from tutorial_lib.course.checks import ch00
    ch00.check_make_window(make_window)

A check runs both functions on a handful of small inputs (simplest first, then seeded random ones) and

* prints ``✅ `make_window` matches the library's version ... on N test cases`` when they agree;
* raises :class:`CheckFailed` (an ``AssertionError``) explaining the first difference: which input, what
  differs (tuple length, shape, dtype, NaN, masking, values at an index, inputs modified in place) and a hint;
* prints the ⏳ message of :class:`ExerciseNotDone` while the exercise is still the stub, saying that the
  notebook continues with the library's version. It does not raise, so Jupyter's "Run All" (which stops at the
  first cell that raises) and nbval run the untouched student notebook to the end: every check a notebook calls
  is decorated with :func:`exercise_check`, and ``check.__wrapped__`` is the version that raises.

Adding the checks of a chapter (one module per notebook, ``chNN.py``)
--------------------------------------------------------------------
::

    # tutorial_lib/course/checks/ch02.py
    \"\"\"Checks of notebook 02 (SASRec from scratch).\"\"\"
    import torch
    from .base import Case, check_function, exercise_check

    @exercise_check                                          # a stub is reported, not raised
    def check_causal_mask(causal_mask):                      # the learner's function is the argument
        from tutorial_lib.attention import causal_mask as reference   # the tested version
        cases = [Case((1,), label="a single position"), Case((4,), label="4 positions")]
        check_function(causal_mask, reference, cases, library="tutorial_lib.attention.causal_mask",
                       hint="position t may attend to positions <= t only")

Rules: a check takes the learner's callable and returns nothing; cases are deterministic (fixed lists or a
seeded ``np.random.default_rng``), small enough to run in well under a second on a CPU, simplest first; import
the reference inside the function or at module top (never import chapter modules from here); use
``diagnose=`` for hints about typical mistakes, and :func:`expect` / :func:`passed` for property checks that
have no reference function (e.g. "the output at t does not change when inputs after t change"). Add unit tests
in ``tests/test_course_checks_chNN.py`` that feed the check the reference (passes), a stub raising
``NotImplementedError`` (the ⏳ message printed; ``check.__wrapped__`` raises ExerciseNotDone) and one typical
mistake (CheckFailed with the expected hint).
"""
from .base import (
    Case,
    CheckFailed,
    ExerciseNotDone,
    call_learner,
    check_function,
    exercise_check,
    expect,
    explain_difference,
    fail,
    passed,
    passes,
    short_repr,
    to_numpy,
)

__all__ = ["Case", "CheckFailed", "ExerciseNotDone", "call_learner", "check_function", "exercise_check", "expect",
           "explain_difference", "fail", "passed", "passes", "short_repr", "to_numpy"]
