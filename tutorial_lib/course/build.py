"""Generate the student notebooks (``notebooks/``) from the solution notebooks (``solutions/``).

``solutions/NN_name.ipynb`` is the single source of truth of a lesson. The student version
``notebooks/NN_name.ipynb`` is derived from it, deterministically (same input, same bytes):

* In every code cell tagged ``exercise``, each region from a line ``### BEGIN SOLUTION`` to a line
  ``### END SOLUTION`` (the nbgrader markers) becomes, at the indentation of the BEGIN line::

      # YOUR CODE HERE
      raise NotImplementedError()

  Regions must be indented (inside a function body): the exercise cell then still runs in the student
  version, and the *check* cell that follows it is the one that reports the missing code.
* No cell carries nbval's ``raises-exception`` tag: a check prints its "not done yet" message instead of
  raising (:func:`~tutorial_lib.course.checks.base.exercise_check`), so the untouched student notebook runs
  from top to bottom, in Jupyter's "Run All" as in nbval, and nbval fails on any cell that raises.
* Outputs and execution counts are stripped from every cell, and the ``# NBVAL_CHECK_OUTPUT`` comment
  lines are removed: the student version carries no outputs, and the solutions (which keep the
  reference outputs of those cells) are where nbval compares them.
* Cell metadata keeps only ``tags``; notebook metadata only the kernel spec and the language name;
  nbformat 4.5 with stable cell ids; JSON with sorted keys, one-space indent and a trailing newline.

Rules checked while building (each violation is a :class:`NotebookBuildError` naming notebook, cell
and line): markers only in code cells tagged ``exercise``; every exercise cell has at least one region
and is followed by a code cell tagged ``check``; markers are exactly ``### BEGIN SOLUTION`` /
``### END SOLUTION`` and properly paired; no ``raises-exception`` tag and no ``NBVAL_RAISES_EXCEPTION``
comment in a solution; no ``# NBVAL_CHECK_OUTPUT`` in exercise or check cells; every
``# NBVAL_CHECK_OUTPUT`` cell of a solution has a stored output (else nbval would silently skip it).

:func:`clean_solution` applies the same normalisation to a solution notebook itself (outputs stripped
except ``# NBVAL_CHECK_OUTPUT`` cells), so that solutions stay small and diff-friendly in git.
"""
from __future__ import annotations

import copy
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..errors import TutorialLibError

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
EXERCISE_TAG = "exercise"
CHECK_TAG = "check"
RAISES_TAG = "raises-exception"
PARAMETERS_TAG = "parameters"
CHECK_OUTPUT_MARKER = "NBVAL_CHECK_OUTPUT"
RAISES_MARKER = "NBVAL_RAISES_EXCEPTION"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
NBFORMAT_MINOR = 5
_NEAR_MARKER = re.compile(r"(BEGIN|END)\s*SOLUTION", re.IGNORECASE)


class NotebookBuildError(TutorialLibError, ValueError):
    """A solution notebook that breaks a rule of the generator (the message says which and where)."""


# ----------------------------------------------------------------------------- one cell's source
def _where(notebook: str, cell: int | None, line: int | None = None) -> str:
    out = notebook or "<notebook>"
    if cell is not None:
        out += f", cell {cell}"
    if line is not None:
        out += f", line {line}"
    return out


def _marker(line: str) -> str | None:
    """``"begin"``/``"end"`` for an exact marker line; raise on something that looks like a mistyped one."""
    text = line.strip()
    if text == BEGIN:
        return "begin"
    if text == END:
        return "end"
    if _NEAR_MARKER.search(text) and text.startswith("#"):
        raise ValueError(f"{text!r} looks like a solution marker; write exactly {BEGIN!r} or {END!r} "
                         "alone on its line")
    return None


def has_markers(source: str) -> bool:
    """Whether ``source`` contains a line that is (or looks like) a solution marker."""
    return any(_NEAR_MARKER.search(line) and line.strip().startswith("#") for line in source.splitlines())


def strip_solutions(source: str, where: str = "<cell>") -> tuple[str, int]:
    """Replace every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region by the stub.

    Returns the new source and the number of regions replaced. Raises :class:`NotebookBuildError` on an
    unmatched or nested marker, a mistyped marker, or a region at indentation 0.
    """
    out: list[str] = []
    begin_line: int | None = None
    regions = 0
    for number, line in enumerate(source.split("\n"), 1):
        try:
            kind = _marker(line)
        except ValueError as exc:
            raise NotebookBuildError(f"{where}, line {number}: {exc}") from None
        if kind == "begin":
            if begin_line is not None:
                raise NotebookBuildError(
                    f"{where}, line {number}: {BEGIN!r} inside the region opened at line {begin_line}; "
                    f"close it with {END!r} first (regions cannot be nested)")
            indent = line[: len(line) - len(line.lstrip())]
            if not indent:
                raise NotebookBuildError(
                    f"{where}, line {number}: the solution region is not indented. Put exercise code inside a "
                    "function body, so that the student's cell still runs and the check cell below it reports "
                    "the missing code")
            begin_line = number
            regions += 1
            out.extend(indent + s for s in STUB)
        elif kind == "end":
            if begin_line is None:
                raise NotebookBuildError(f"{where}, line {number}: {END!r} without a {BEGIN!r} before it")
            begin_line = None
        elif begin_line is None:
            out.append(line)
    if begin_line is not None:
        raise NotebookBuildError(f"{where}, line {begin_line}: {BEGIN!r} is never closed by {END!r}")
    return "\n".join(out), regions


def _comment_markers(source: str) -> set[str]:
    """nbval comment markers (``# NBVAL_...``) in a cell, as nbval finds them."""
    found = set()
    for line in source.splitlines():
        line = line.strip()
        if line.startswith("#"):
            found.add(line.lstrip("#").strip())
    return found


def checks_output(cell: nbformat.NotebookNode) -> bool:
    """Whether nbval compares this cell's output in lax mode (it has a ``# NBVAL_CHECK_OUTPUT`` line)."""
    return cell.cell_type == "code" and CHECK_OUTPUT_MARKER in _comment_markers(cell.source)


def _without_check_output_marker(source: str) -> str:
    """``source`` without its ``# NBVAL_CHECK_OUTPUT`` comment lines (student notebooks have no stored
    output for nbval to compare with)."""
    lines = source.splitlines(keepends=True)
    kept = [ln for ln in lines if not (ln.strip().startswith("#") and ln.strip().lstrip("#").strip() == CHECK_OUTPUT_MARKER)]
    return "".join(kept)


# ----------------------------------------------------------------------------- whole notebooks
def _tags(cell: nbformat.NotebookNode) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    if not isinstance(tags, list):
        raise NotebookBuildError(f"cell metadata 'tags' must be a list, got {tags!r}")
    return list(dict.fromkeys(str(t) for t in tags))  # drop duplicates, keep order


def _clean_outputs(outputs: list, execution_count: int) -> list:
    out = []
    for o in copy.deepcopy(list(outputs)):
        if o.get("output_type") == "execute_result":
            o["execution_count"] = execution_count
        if "metadata" in o:
            o["metadata"] = {}
        out.append(o)
    return out


def _cell_id(index: int) -> str:
    return f"cell-{index:03d}"


def _normalise(nb: nbformat.NotebookNode, name: str, keep_outputs_of_checked: bool) -> nbformat.NotebookNode:
    """Normalised copy: minimal metadata, stable ids, outputs stripped (except checked cells)."""
    out = nbformat.v4.new_notebook()
    out.nbformat, out.nbformat_minor = 4, NBFORMAT_MINOR
    lang = nb.get("metadata", {}).get("language_info", {}).get("name", "python")
    out.metadata = nbformat.NotebookNode({"kernelspec": dict(KERNELSPEC), "language_info": {"name": lang}})
    seen_ids: set[str] = set()
    code_index = 0
    for index, cell in enumerate(nb.cells):
        cid = cell.get("id") or _cell_id(index)
        if cid in seen_ids:
            raise NotebookBuildError(f"{_where(name, index)}: duplicate cell id {cid!r}")
        seen_ids.add(cid)
        tags = _tags(cell)
        meta = {"tags": tags} if tags else {}
        if cell.cell_type == "code":
            code_index += 1
            new = nbformat.v4.new_code_cell(cell.source, metadata=meta)
            if keep_outputs_of_checked and checks_output(cell) and cell.get("execution_count") is not None:
                new.execution_count = code_index
                new.outputs = _clean_outputs(cell.outputs, code_index)
        elif cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.source, metadata=meta)
            if cell.get("attachments"):
                new.attachments = copy.deepcopy(cell.attachments)
        else:
            new = nbformat.v4.new_raw_cell(cell.source, metadata=meta)
        new.id = cid
        out.cells.append(new)
    return out


def validate_solution(nb: nbformat.NotebookNode, name: str = "<notebook>") -> None:
    """Check the rules of a solution notebook (see the module docstring); raise on the first violation."""
    cells = nb.cells
    for index, cell in enumerate(cells):
        where = _where(name, index)
        tags = _tags(cell)
        if RAISES_TAG in tags:
            raise NotebookBuildError(
                f"{where}: solutions must not carry the {RAISES_TAG!r} tag: every cell must run without an exception "
                f"(a check reports an exercise not done yet by printing, not raising)")
        if cell.cell_type != "code":
            if has_markers(cell.source):
                raise NotebookBuildError(f"{where}: solution markers are only allowed in code cells tagged "
                                         f"{EXERCISE_TAG!r}; this is a {cell.cell_type} cell")
            continue
        markers = _comment_markers(cell.source)
        if RAISES_MARKER in markers:
            raise NotebookBuildError(f"{where}: '# {RAISES_MARKER}' is not allowed: every solution cell must run "
                                     "without an exception")
        is_exercise, is_check = EXERCISE_TAG in tags, CHECK_TAG in tags
        if is_exercise and is_check:
            raise NotebookBuildError(f"{where}: a cell is either {EXERCISE_TAG!r} or {CHECK_TAG!r}, not both: "
                                     "put the check call in its own cell after the exercise")
        if CHECK_OUTPUT_MARKER in markers:
            if is_exercise or is_check:
                raise NotebookBuildError(f"{where}: '# {CHECK_OUTPUT_MARKER}' cannot be used in {EXERCISE_TAG!r} "
                                         f"or {CHECK_TAG!r} cells (their output differs in the student version)")
            if cell.get("execution_count") is None or not cell.get("outputs"):
                raise NotebookBuildError(
                    f"{where}: the cell is marked '# {CHECK_OUTPUT_MARKER}' but has no stored output, so nbval "
                    "would not compare anything; store it with "
                    "`python -m tutorial_lib.course clean-solutions --execute`")
        if is_exercise:
            _, regions = strip_solutions(cell.source, where)
            if regions == 0:
                raise NotebookBuildError(f"{where}: the cell is tagged {EXERCISE_TAG!r} but has no "
                                         f"{BEGIN!r} ... {END!r} region")
            following = next((c for c in cells[index + 1:] if c.cell_type == "code"), None)
            if following is None or CHECK_TAG not in _tags(following):
                raise NotebookBuildError(f"{where}: an {EXERCISE_TAG!r} cell must be followed by a code cell "
                                         f"tagged {CHECK_TAG!r} that calls the learner's function")
        elif has_markers(cell.source):
            strip_solutions(cell.source, where)  # a clearer error for a malformed marker, if any
            raise NotebookBuildError(f"{where}: solution markers found in a cell that is not tagged "
                                     f"{EXERCISE_TAG!r}; add the tag (and a check cell after it)")


def student_notebook(nb: nbformat.NotebookNode, name: str = "<notebook>") -> nbformat.NotebookNode:
    """The student version of a solution notebook (a new object; ``nb`` is not modified)."""
    validate_solution(nb, name)
    out = _normalise(nb, name, keep_outputs_of_checked=False)
    for index, cell in enumerate(out.cells):
        tags = _tags(cell)
        if checks_output(cell):
            cell.source = _without_check_output_marker(cell.source)
        if cell.cell_type == "code" and EXERCISE_TAG in tags:
            cell.source, _ = strip_solutions(cell.source, _where(name, index))
    return out


def clean_solution(nb: nbformat.NotebookNode, name: str = "<notebook>") -> nbformat.NotebookNode:
    """The normalised solution: outputs stripped except in ``# NBVAL_CHECK_OUTPUT`` cells, minimal metadata."""
    return _normalise(nb, name, keep_outputs_of_checked=True)


def dumps(nb: nbformat.NotebookNode) -> str:
    """Deterministic JSON text of a notebook (sorted keys, indent 1, trailing newline); validates it."""
    nbformat.validate(nb)
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def read_notebook(path: str | Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, read as nbformat 4."""
    return nbformat.read(str(path), as_version=4)


# ----------------------------------------------------------------------------- folders
@dataclass
class BuildReport:
    """What :func:`build_notebooks` did or, with ``check=True``, would do."""

    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    orphans: list[Path] = field(default_factory=list)  # notebooks/*.ipynb without a solution
    kept: list[Path] = field(default_factory=list)  # out of date but holding a learner's run: not overwritten

    @property
    def ok(self) -> bool:
        """True when nothing had to change (the meaning of ``--check``)."""
        return not self.written and not self.orphans


def solution_paths(solutions: str | Path) -> list[Path]:
    """The ``*.ipynb`` files of the solutions folder, sorted; :class:`NotebookBuildError` if it does not exist."""
    folder = Path(solutions)
    if not folder.is_dir():
        raise NotebookBuildError(f"solutions folder {folder} does not exist")
    return sorted(folder.glob("*.ipynb"))


def _compare_or_write(path: Path, text: str, check: bool, report: BuildReport) -> None:
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current == text:
        report.unchanged.append(path)
        return
    report.written.append(path)
    if not check:
        _write_text(path, text)


def _write_text(path: Path, text: str) -> None:
    """Write through a temporary file and a rename (never a half-written notebook), with normal permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def has_learner_work(path: Path) -> bool:
    """Whether a notebook on disk has been run and saved: a code cell with outputs or an execution count.

    Generated student notebooks never have either, so such a file holds someone's work (their answers to the
    exercises) that regenerating it would throw away."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any(c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count") is not None)
               for c in nb.get("cells", []))


def build_notebooks(solutions: str | Path, notebooks: str | Path, check: bool = False,
                    force: bool = False) -> BuildReport:
    """Write ``notebooks/X.ipynb`` for every ``solutions/X.ipynb`` (only files whose bytes change).

    A notebook that has been run and saved (:func:`has_learner_work`) is not overwritten but listed in
    ``report.kept``, unless ``force``. With ``check=True`` nothing is written: the report lists what differs
    (``report.ok`` is False when a notebook is missing, stale, or has no solution).
    """
    report = BuildReport()
    out_dir = Path(notebooks)
    sources = solution_paths(solutions)
    for src in sources:
        text = dumps(student_notebook(read_notebook(src), src.name))
        target = out_dir / src.name
        if not check and not force and target.is_file() and has_learner_work(target):
            report.kept.append(target)  # a generated notebook never has outputs: this one differs from it
            continue
        _compare_or_write(target, text, check, report)
    names = {p.name for p in sources}
    if out_dir.is_dir():
        report.orphans = sorted(p for p in out_dir.glob("*.ipynb") if p.name not in names)
    return report


def clean_solutions(solutions: str | Path, check: bool = False, execute: bool = False,
                    log: Callable[[str], None] | None = None, only: list[str] | None = None) -> BuildReport:
    """Normalise every solution notebook in place (see :func:`clean_solution`).

    With ``execute=True`` each notebook is first run in smoke mode (:func:`execute_notebook`), which
    refreshes the stored outputs of its ``# NBVAL_CHECK_OUTPUT`` cells. With ``check=True`` nothing is
    written (``report.written`` lists the notebooks that are not clean). ``only``: file names (or paths)
    of the notebooks to process, default all.
    """
    report = BuildReport()
    paths = solution_paths(solutions)
    if only:
        wanted = {Path(n).name for n in only}
        unknown = sorted(wanted - {p.name for p in paths})
        if unknown:
            raise NotebookBuildError(f"not in {solutions}: {', '.join(unknown)}")
        paths = [p for p in paths if p.name in wanted]
    for src in paths:
        nb = read_notebook(src)
        if execute:
            if log is not None:
                log(f"executing {src} (COURSE_MODE=smoke) ...")
            nb = execute_notebook(nb, cwd=src.parent)
        _compare_or_write(src, dumps(clean_solution(nb, src.name)), check, report)
    return report


def execute_notebook(nb: nbformat.NotebookNode, cwd: str | Path, mode: str = "smoke", timeout: int = 600,
                     extra_env: dict[str, str] | None = None,
                     cell_seconds: list[float] | None = None) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in a fresh kernel (``COURSE_MODE=mode``, quiet, Agg backend).

    ``extra_env``: more variables for the kernel. ``cell_seconds``: a list that receives the wall-clock
    seconds of every code cell, in order. Returns the executed copy."""
    from nbclient import NotebookClient

    env = {"COURSE_MODE": mode, "TUTORIAL_LIB_QUIET": "1", "MPLBACKEND": "Agg", **(extra_env or {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nb = copy.deepcopy(nb)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(cwd)}})
        if cell_seconds is not None:
            started: dict[int, float] = {}
            client.on_cell_execute = lambda cell, cell_index: started.__setitem__(cell_index, time.perf_counter())
            client.on_cell_executed = lambda cell, cell_index, execute_reply: cell_seconds.append(
                time.perf_counter() - started[cell_index])
        client.execute()
        return nb
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
