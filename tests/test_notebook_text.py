"""The notebooks' text renders as written.

Tables: every row of a Markdown table has the header's number of cells, in the notebooks and in the project's
Markdown pages. A row broken over two lines, or a `|` inside a code span (GitHub-flavoured Markdown splits cells
there too), renders as a shifted or truncated row without any error.

Formulas: each one goes through MathJax 3, the engine JupyterLab renders notebook math with
(tests/math/mathjax_check.js, on Node.js). A formula MathJax cannot typeset shows up in JupyterLab as raw TeX or
red error text in the middle of an explanation.

Needs `node` and the npm package mathjax-full: `npm install --prefix .cache/mathjax mathjax-full@3.2.2` puts it
where this test looks (or set MATHJAX_NODE_MODULES to a node_modules folder that has it). Without them the
tests that typeset are skipped, unless SEQREC_REQUIRE_MATHJAX=1 (CI sets it, and installs both), which makes
them fail instead.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKER = ROOT / "tests" / "math" / "mathjax_check.js"
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
PAGES = [ROOT / "README.md", ROOT / "notebooks" / "README.md", ROOT / "results" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]
INSTALL = "npm install --prefix .cache/mathjax mathjax-full@3.2.2"

_FENCED = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_MATH = re.compile(
    r"\$\$(?P<display>.+?)\$\$|\\\[(?P<bracket>.+?)\\\]"                 # $$ ... $$ and \[ ... \]
    r"|\\\((?P<paren>.+?)\\\)"                                          # \( ... \)
    r"|(?P<env>\\begin\{(?P<name>[A-Za-z]+\*?)\}.+?\\end\{(?P=name)\})"  # \begin{align} ... \end{align}
    r"|(?<![\\$])\$(?!\$)(?P<inline>(?:\\\$|[^$])+?)(?<!\\)\$",          # $ ... $ (not \$)
    re.S)


def formulas(markdown: str, where: str) -> list[dict]:
    """The TeX of ``markdown`` as JupyterLab hands it to MathJax: ``$...$`` and ``\\(...\\)`` inline, ``$$...$$``,
    ``\\[...\\]`` and ``\\begin{env}...\\end{env}`` displayed; code (fenced blocks, backtick spans) and ``\\$`` are
    not math."""
    text = _FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)
    text = _CODE_SPAN.sub("code", text)
    found = []
    for m in _MATH.finditer(text):
        kind = m.lastgroup                                              # the alternative that matched
        found.append({"where": where, "tex": m.group(kind), "display": kind in ("display", "bracket", "env")})
    return found


def markdown_cells(path: Path) -> list[tuple[str, str]]:
    """``(where, text)`` for each Markdown cell of a notebook, or the whole text of a ``.md`` file."""
    if path.suffix != ".ipynb":
        return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(f"{path.relative_to(ROOT)}, cell {i}", "".join(cell["source"]))
            for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"]


_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def row_cells(line: str) -> int:
    """The number of cells of a table row: split at every ``|`` not escaped as ``\\|`` (inside code spans too, as
    GitHub-flavoured Markdown does), the outer pipes optional."""
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return len(re.split(r"(?<!\\)\|", row))


def ragged_table_rows(markdown: str) -> list[str]:
    """The rows of the Markdown tables in ``markdown`` whose number of cells differs from their header's.
    Math is taken out first (JupyterLab hands ``$...$`` to MathJax before the Markdown parser sees it)."""
    text = _MATH.sub("math", _FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), markdown))
    lines, ragged = text.split("\n"), []
    for k in range(1, len(lines)):
        if "|" not in lines[k - 1] or not _DELIMITER_ROW.match(lines[k]) or "-" not in lines[k]:
            continue
        width = row_cells(lines[k - 1])
        if row_cells(lines[k]) != width:
            ragged.append(lines[k])
        for row in lines[k + 1:]:
            if "|" not in row or not row.strip():
                break
            if row_cells(row) != width:
                ragged.append(row)
    return ragged


def notebook_formulas(path: Path) -> list[dict]:
    """Every formula of the markdown cells of one notebook, each labelled with its file and cell index."""
    return [f for where, text in markdown_cells(path) for f in formulas(text, where)]


def _node_modules() -> Path | None:
    for candidate in (os.environ.get("MATHJAX_NODE_MODULES"), ROOT / ".cache" / "mathjax" / "node_modules"):
        if candidate and (Path(candidate) / "mathjax-full" / "package.json").is_file():
            return Path(candidate)
    return None


def typeset_failures(items: list[dict]) -> list[dict]:
    """Run the MathJax checker on ``items``; return the formulas it could not typeset, with its error."""
    node, modules = shutil.which("node"), _node_modules()
    if node is None or modules is None:
        missing = "node" if node is None else f"the npm package mathjax-full ({INSTALL})"
        if os.environ.get("SEQREC_REQUIRE_MATHJAX") == "1":
            pytest.fail(f"SEQREC_REQUIRE_MATHJAX=1 but {missing} is missing")
        pytest.skip(f"typesetting needs {missing}")
    done = subprocess.run([node, str(CHECKER)], input=json.dumps(items), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NODE_PATH": str(modules)})
    assert done.returncode == 0, f"the MathJax checker failed:\n{done.stderr}"
    return json.loads(done.stdout)


def test_formulas_are_found_as_jupyter_finds_them():
    markdown = ("Inline $a_i$ and $\\hat{y}$, a price \\$5 and \\$6, code `x = $y$` and\n"
                "```python\ncost = '$z$'\n```\n"
                "$$\\sum_{j} w_j = 1$$\n"
                "\\begin{align} a &= b \\\\ c &= d \\end{align}\n"
                "$\\mathrm{softmax}(x)$, \\(b_t\\) and \\[c^2\\].")
    found = [(f["tex"], f["display"]) for f in formulas(markdown, "t")]
    assert found == [("a_i", False), ("\\hat{y}", False), ("\\sum_{j} w_j = 1", True),
                     ("\\begin{align} a &= b \\\\ c &= d \\end{align}", True), ("\\mathrm{softmax}(x)", False),
                     ("b_t", False), ("c^2", True)]


def test_the_checker_reports_what_mathjax_cannot_typeset():
    items = [{"where": "ok", "tex": "\\operatorname{softmax}_j\\!\\Big(\\frac{Q_i K_j^\\top}{\\sqrt{d_h}}\\Big)",
              "display": False},
             {"where": "ok", "tex": "\\begin{aligned} \\psi &= L L^\\top \\end{aligned}", "display": True},
             {"where": "undefined", "tex": "\\softmax(x)", "display": False},
             {"where": "unbalanced", "tex": "\\frac{a}{b", "display": True},
             {"where": "double script", "tex": "x_i_j", "display": False}]
    assert [f["where"] for f in typeset_failures(items)] == ["undefined", "unbalanced", "double script"]


def test_every_formula_of_the_notebooks_typesets():
    items = [f for path in NOTEBOOKS for f in notebook_formulas(path)]
    assert len(items) > 1000, f"found only {len(items)} formulas: has the extraction broken?"
    failures = typeset_failures(items)
    assert not failures, "MathJax cannot typeset these formulas:\n" + "\n".join(
        f"  {f['where']}: {f['error']}: {f['tex'][:200]!r}" for f in failures)


def test_ragged_table_rows_are_found():
    table = ("| a | b | c |\n| --- | --- | --- |\n| `x` | $|y_0|$ | z |\n| one | two, \\| escaped | three |\n"
             "| a row | broken | over two\nlines) | c |\n| `p | q` | r | s |\n\nafter | the | table\n")
    assert ragged_table_rows(table) == ["lines) | c |", "| `p | q` | r | s |"]
    assert ragged_table_rows("a | b\n--- | ---\n1 | 2\n") == []


@pytest.mark.parametrize("path", NOTEBOOKS + PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_row_has_the_headers_cells(path):
    ragged = [f"{where}: {row[:120]!r}" for where, text in markdown_cells(path) for row in ragged_table_rows(text)]
    assert not ragged, "table rows with another number of cells than their header (a row broken over two lines, " \
                       "or a | to escape as \\|):\n  " + "\n  ".join(ragged)
