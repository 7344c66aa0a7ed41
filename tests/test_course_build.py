"""The solutions -> notebooks generator: notebooks/ is exactly what it produces, and its transformation rules."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tutorial_lib.course.__main__ import main
from tutorial_lib.course.build import (
    RAISES_TAG,
    NotebookBuildError,
    build_notebooks,
    clean_solutions,
    dumps,
    strip_solutions,
    student_notebook,
)

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS, NOTEBOOKS = ROOT / "solutions", ROOT / "notebooks"
REGENERATE = "python -m tutorial_lib.course build-notebooks"


# ----------------------------------------------------------------------------- the repository's notebooks
def test_notebooks_folder_is_generated_from_solutions():
    report = build_notebooks(SOLUTIONS, NOTEBOOKS, check=True)
    problems = [f"out of date: notebooks/{p.name}" for p in report.written]
    problems += [f"no solution for notebooks/{p.name}" for p in report.orphans]
    assert report.ok, "; ".join(problems) + f". Run `{REGENERATE}` (and commit the result)."
    assert report.unchanged, "no notebook was checked: solutions/ is empty"


def test_solutions_are_clean():
    report = clean_solutions(SOLUTIONS, check=True)
    assert not report.written, (f"not normalised: {', '.join(p.name for p in report.written)}. Run "
                                "`python -m tutorial_lib.course clean-solutions` (outputs stripped except "
                                "'# NBVAL_CHECK_OUTPUT' cells).")


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_student_notebooks_follow_the_conventions(path):
    nb = nbformat.read(path, as_version=4)
    tags = [c.get("metadata", {}).get("tags", []) for c in nb.cells]
    assert any("parameters" in t for t in tags), "every notebook has a cell tagged 'parameters'"
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert "setup_notebook(" in setup.source, "the first code cell calls setup_notebook()"
    for cell, t in zip(nb.cells, tags):
        assert RAISES_TAG not in t, f"no cell may raise, a check cell included: {cell.source[:60]!r}"
        assert "### BEGIN SOLUTION" not in cell.source


def _measured_seconds(table: str) -> dict[str, float]:
    rows = (line.split("|") for line in (ROOT / "results" / "benchmarks" / table).read_text().splitlines())
    return {r[1].strip(): float(r[3]) for r in rows if len(r) > 4 and r[1].strip()[:2].isdigit()}


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.name)
def test_estimated_running_times_are_the_committed_measurements(path):
    """Each notebook's 'Running every cell takes ...' gives the figures of the committed notebook_times tables."""
    import re

    intro = "".join(nbformat.read(path, as_version=4).cells[1].source)
    found = re.search(r"Running every cell takes about ([\d.]+) (seconds|minutes) in the default `small` mode and "
                      r"([\d.]+) (seconds|minutes) in `smoke` mode .*? and ([\d.]+) (seconds|minutes) in `small` mode on one "
                      r"thread", intro, re.S)
    assert found, "the introduction states the running times (see benchmarks/notebook_times.py)"
    said = [float(found.group(i)) * (60 if found.group(i + 1) == "minutes" else 1) for i in (1, 3, 5)]
    for value, table in zip(said, ("notebook_times_small.md", "notebook_times_smoke.md", "notebook_times_small_1thread.md")):
        measured = _measured_seconds(table)[path.stem]
        assert abs(value - measured) <= max(1.0, 0.05 * measured), f"{value:.0f} s stated, {measured:.1f} s in {table}"


def test_check_command_succeeds_on_the_repository(capsys):
    assert main(["build-notebooks", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


# ----------------------------------------------------------------------------- a synthetic notebook
EXERCISE = '''import numpy as np


def f(x):
    """Docstring stays."""
    y = 1
    ### BEGIN SOLUTION
    z = x + y
    ### END SOLUTION
    for i in range(3):
        ### BEGIN SOLUTION
        z += i
        ### END SOLUTION
    return z'''

EXPECTED_STUB = '''import numpy as np


def f(x):
    """Docstring stays."""
    y = 1
    # YOUR CODE HERE
    raise NotImplementedError()
    for i in range(3):
        # YOUR CODE HERE
        raise NotImplementedError()
    return z'''


def code(source, tags=(), outputs=(), count=None, cid=None):
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(tags), "collapsed": False} if tags else {})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=o) for o in outputs]
    cell.execution_count = count
    if cid:
        cell.id = cid
    return cell


def make_nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    for i, c in enumerate(nb.cells):
        c.id = f"c{i}"
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python", "version": "3.11.7"}, "widgets": {"state": {}}}
    return nb


def good_nb():
    return make_nb(
        nbformat.v4.new_markdown_cell("# Title"),
        code("env = 1", outputs=["setup output\n"], count=1),
        code("# NBVAL_CHECK_OUTPUT\nprint('hi')", outputs=["hi\n"], count=7),
        code(EXERCISE, tags=["exercise"], outputs=["x"], count=3),
        nbformat.v4.new_markdown_cell("Now the check:"),
        code("check(f)", tags=["check"], outputs=["ok\n"], count=4),
        code("print(2)", tags=["parameters"], outputs=["2\n"], count=5),
    )


def test_strip_solutions_keeps_indentation_and_handles_several_regions():
    out, regions = strip_solutions(EXERCISE)
    assert regions == 2
    assert out == EXPECTED_STUB


@pytest.mark.parametrize("source, message", [
    ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", "never closed"),
    ("def f():\n    return 1\n    ### END SOLUTION\n", "without a '### BEGIN SOLUTION'"),
    ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    ### END SOLUTION\n", "nested"),
    ("def f():\n    ## BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n", "looks like a solution marker"),
    ("def f():\n    ### BEGIN SOLUTION here\n    return 1\n    ### END SOLUTION\n", "looks like a solution marker"),
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "not indented"),
])
def test_malformed_markers_give_a_clear_error(source, message):
    with pytest.raises(NotebookBuildError, match=message) as info:
        strip_solutions(source, "nb.ipynb, cell 3")
    assert "nb.ipynb, cell 3, line" in str(info.value)


def test_student_version_strips_outputs_and_keeps_the_tags():
    nb = good_nb()
    before = json.dumps(nb, sort_keys=True)
    student = student_notebook(nb, "x.ipynb")
    assert json.dumps(nb, sort_keys=True) == before, "the solution notebook object is not modified"
    cells = student.cells
    assert cells[3].source == EXPECTED_STUB
    assert [c.metadata.get("tags", []) for c in cells] == [[], [], [], ["exercise"], [], ["check"], ["parameters"]]
    for c in cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, "student notebooks carry no outputs"
        assert set(c.metadata) <= {"tags"}, "only tags are kept in cell metadata"
    # the solution keeps the reference output nbval compares; the student copy drops the marker with it
    assert cells[2].source == "print('hi')" and "NBVAL_CHECK_OUTPUT" in nb.cells[2].source
    assert student.metadata == {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                               "name": "python3"}, "language_info": {"name": "python"}}
    assert student.nbformat == 4 and student.nbformat_minor == 5
    assert [c.id for c in cells] == [c.id for c in nb.cells]


def test_output_is_deterministic_sorted_json_with_trailing_newline():
    a, b = dumps(student_notebook(good_nb())), dumps(student_notebook(good_nb()))
    assert a == b
    assert a.endswith("}\n") and not a.endswith("\n\n")
    data = json.loads(a)
    assert a == json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def test_cells_without_ids_get_stable_ones():
    nb = good_nb()
    nb.nbformat_minor = 4
    for c in nb.cells:
        del c["id"]
    ids = [c.id for c in student_notebook(nb).cells]
    assert ids == [f"cell-{i:03d}" for i in range(len(nb.cells))]


@pytest.mark.parametrize("mutate, message", [
    (lambda nb: nb.cells[5].metadata.update(tags=["check", "raises-exception"]), "must not carry"),
    (lambda nb: nb.cells[1].metadata.update(tags=["raises-exception"]), "must not carry"),
    (lambda nb: nb.cells[3].metadata.update(tags=[]), "not tagged 'exercise'"),
    (lambda nb: nb.cells[5].metadata.update(tags=[]), "must be followed by a code cell tagged 'check'"),
    (lambda nb: nb.cells.__setitem__(3, code("def f():\n    return 1", tags=["exercise"], cid="c3")),
     "no '### BEGIN SOLUTION'"),
    (lambda nb: nb.cells.__setitem__(4, nbformat.v4.new_markdown_cell("    ### BEGIN SOLUTION\nx\n")),
     "only allowed in code cells"),
    (lambda nb: nb.cells[5].metadata.update(tags=["check", "exercise"]), "not both"),
    (lambda nb: nb.cells[2].update(outputs=[], execution_count=None), "no stored output"),
    (lambda nb: nb.cells[5].update(source="# NBVAL_CHECK_OUTPUT\ncheck(f)"), "cannot be used"),
    (lambda nb: nb.cells[1].update(source="# NBVAL_RAISES_EXCEPTION\n1/0"), "not allowed"),
])
def test_rule_violations_are_reported(mutate, message):
    nb = good_nb()
    mutate(nb)
    with pytest.raises(NotebookBuildError, match=message):
        student_notebook(nb, "x.ipynb")


# ----------------------------------------------------------------------------- folders and the command line
def write_solution(folder: Path, name: str = "00_x.ipynb") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    nbformat.write(good_nb(), str(path))
    return path


def test_build_and_check_on_folders(tmp_path, capsys):
    sol, out = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(sol)
    args = ["--solutions", str(sol), "--notebooks", str(out)]
    assert main(["build-notebooks", "--check", *args]) == 1
    assert "00_x.ipynb" in capsys.readouterr().out
    assert main(["build-notebooks", *args]) == 0
    first = (out / "00_x.ipynb").read_bytes()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((out / "00_x.ipynb").stat().st_mode) == 0o666 & ~umask, "ordinary file permissions"
    mtime = (out / "00_x.ipynb").stat().st_mtime_ns
    assert main(["build-notebooks", *args]) == 0
    assert (out / "00_x.ipynb").read_bytes() == first and (out / "00_x.ipynb").stat().st_mtime_ns == mtime
    assert main(["build-notebooks", "--check", *args]) == 0
    # a hand edit of the student notebook, and a notebook without a solution, are both reported
    (out / "00_x.ipynb").write_text(first.decode().replace("Title", "Edited"))
    (out / "01_orphan.ipynb").write_bytes(first)
    capsys.readouterr()
    assert main(["build-notebooks", "--check", *args]) == 1
    text = capsys.readouterr().out
    assert "00_x.ipynb" in text and "01_orphan.ipynb" in text


def test_a_notebook_someone_has_run_and_saved_is_not_overwritten_without_force(tmp_path, capsys):
    sol, out = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(sol)
    args = ["--solutions", str(sol), "--notebooks", str(out)]
    assert main(["build-notebooks", *args]) == 0
    generated = (out / "00_x.ipynb").read_text()
    nb = nbformat.read(str(out / "00_x.ipynb"), as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\n# my answer"
    code.execution_count = 3
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nbformat.write(nb, str(out / "00_x.ipynb"))
    learner = (out / "00_x.ipynb").read_text()
    capsys.readouterr()
    assert main(["build-notebooks", *args]) == 1
    err = capsys.readouterr().err
    assert "kept:" in err and "00_x.ipynb" in err and "--force" in err
    assert (out / "00_x.ipynb").read_text() == learner
    assert main(["build-notebooks", "--check", *args]) == 1      # still reported as out of date
    assert main(["build-notebooks", "--force", *args]) == 0
    assert (out / "00_x.ipynb").read_text() == generated


def test_build_error_exits_2_with_the_message(tmp_path, capsys):
    path = write_solution(tmp_path / "solutions")
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[3].source = nb.cells[3].source.replace("    ### END SOLUTION\n    for", "    for", 1)
    nbformat.write(nb, str(path))
    assert main(["build-notebooks", "--solutions", str(path.parent), "--notebooks", str(tmp_path / "nb")]) == 2
    assert "00_x.ipynb, cell 3, line" in capsys.readouterr().err


def test_clean_solutions_in_place(tmp_path):
    path = write_solution(tmp_path / "solutions")
    report = clean_solutions(path.parent, check=True)
    assert report.written == [path]
    clean_solutions(path.parent)
    nb = nbformat.read(str(path), as_version=4)
    assert nb.cells[1].outputs == [] and nb.cells[2].outputs, "only '# NBVAL_CHECK_OUTPUT' outputs are kept"
    assert "raises-exception" not in path.read_text()
    assert clean_solutions(path.parent, check=True).ok


def test_module_entry_point(tmp_path):
    sol = tmp_path / "solutions"
    write_solution(sol)
    cmd = [sys.executable, "-m", "tutorial_lib.course", "build-notebooks", "--check", "--solutions", str(sol),
           "--notebooks", str(tmp_path / "notebooks")]
    # the limit only stops a hang: the command takes seconds, but minutes on a machine busy with training
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert "00_x.ipynb" in proc.stdout and "build-notebooks" in proc.stderr
