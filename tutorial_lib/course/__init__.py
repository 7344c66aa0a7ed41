"""Course mechanics: the notebook set-up helper, exercise checks, and the solutions -> notebooks generator.

* ``env = setup_notebook()`` is the first code cell of every notebook (:mod:`tutorial_lib.course.setup`).
* ``select_sizes(SIZES, COURSE_MODE)`` picks the sizes of the parameters cell (``smoke`` / ``small`` / ``full``).
* :mod:`tutorial_lib.course.checks` holds the exercise checks (one ``chNN`` module per notebook).
* ``python -m tutorial_lib.course build-notebooks`` writes ``notebooks/`` from ``solutions/``
  (:mod:`tutorial_lib.course.build`).
"""
from .setup import (
    COURSE_MODES,
    MODE_ENV,
    NotebookEnv,
    course_mode,
    environment_report,
    select_sizes,
    set_plot_style,
    setup_notebook,
)

__all__ = ["COURSE_MODES", "MODE_ENV", "NotebookEnv", "course_mode", "environment_report", "select_sizes",
           "set_plot_style", "setup_notebook"]
