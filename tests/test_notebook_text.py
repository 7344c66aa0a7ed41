"""The notebooks' text renders as written.

Tables: every row of a Markdown table has the header's number of cells, in the notebooks and in the project's
Markdown pages. A row broken over two lines, or a `|` inside a code span (GitHub-flavoured Markdown splits cells
there too), renders as a shifted or truncated row without any error.

Formulas: each one goes through MathJax 3, the engine JupyterLab renders notebook math with
(tests/math/mathjax_check.js, on Node.js). A formula MathJax cannot typeset shows up in JupyterLab as raw TeX or
red error text in the middle of an explanation.

Needs `node` and the npm package mathjax-full: `npm install --prefix .cache/mathjax mathjax-full@3.2.2` puts it
where this test looks (so do MATHJAX_NODE_MODULES, the project's node_modules/ and NODE_PATH). Without them the
tests that typeset are skipped, unless SEQREC_REQUIRE_MATHJAX=1 (CI sets it, and installs both), which makes
them fail instead.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKER = ROOT / "tests" / "math" / "mathjax_check.js"
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
PAGES = [ROOT / "README.md", ROOT / "notebooks" / "README.md", ROOT / "results" / "README.md",
         ROOT / "data" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INSTALL = "npm install --prefix .cache/mathjax mathjax-full@3.2.2"

_FENCED = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)([^\n]*?[^`\n])\1(?!`)")    # one line, as JupyterLab's math extraction reads them
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_MATH = re.compile(
    r"\$\$(?P<display>.+?)\$\$"                                          # $$ ... $$
    r"|\\\\\[(?P<bracket>.+?)\\\\\]|\\\\\((?P<paren>.+?)\\\\\)"          # \\[ ... \\] and \\( ... \\) in the source
    r"|(?P<env>\\begin\{(?P<name>[A-Za-z]+\*?)\}.+?\\end\{(?P=name)\})"  # \begin{align} ... \end{align}
    r"|(?<![\\$])\$(?!\$)(?P<inline>(?:\\\$|[^$])+?)(?<!\\)\$",          # $ ... $ (not \$)
    re.S)


def _without_code(markdown: str, span: Callable[[re.Match], str] = lambda m: "code") -> str:
    """``markdown`` with fenced code blocks blanked (their lines kept) and each code span replaced by ``span(m)``."""
    return _CODE_SPAN.sub(span, _FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), markdown))


def formulas(markdown: str, where: str) -> list[dict]:
    """The TeX of ``markdown`` as JupyterLab 4 hands it to MathJax: ``$...$`` and ``\\\\(...\\\\)`` inline,
    ``$$...$$``, ``\\\\[...\\\\]`` and ``\\begin{env}...\\end{env}`` displayed (in the Markdown source the
    brackets take two backslashes: Markdown itself turns ``\\(`` into ``(``). Code (fenced blocks, one-line backtick
    spans) and ``\\$`` are not math, and no formula runs on past a blank line: JupyterLab leaves such a ``$`` as
    text."""
    found = []
    for paragraph in _PARAGRAPH_BREAK.split(_without_code(markdown)):
        for m in _MATH.finditer(paragraph):
            kind = m.lastgroup                                          # the alternative that matched
            found.append({"where": where, "tex": m.group(kind), "display": kind in ("display", "bracket", "env")})
    return found


def markdown_cells(path: Path) -> list[tuple[str, str]]:
    """``(where, text)`` for each Markdown cell of a notebook, or the whole text of a ``.md`` file."""
    if path.suffix != ".ipynb":
        return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(f"{path.relative_to(ROOT)}, cell {i}", "".join(cell["source"]))
            for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"]


_DELIMITER_ROW = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_BLOCK_START = re.compile(r"^ {0,3}(#{1,6}(\s|$)|>|```|~~~|[-+*]\s|\d{1,9}[.)]\s|<)")


def row_cells(line: str) -> int:
    """The number of cells of a table row: split at every ``|`` that no backslash escapes (inside code spans
    too, as GitHub-flavoured Markdown does; ``\\\\|`` is an escaped backslash and then a split), the outer pipes
    optional."""
    cells, escaped, row = 1, False, line.strip()
    row = row[1:] if row.startswith("|") else row
    for i, char in enumerate(row):
        if char == "|" and not escaped and i < len(row) - 1:
            cells += 1
        escaped = char == "\\" and not escaped
    return cells


def ragged_table_rows(markdown: str) -> list[str]:
    """The rows of the Markdown tables in ``markdown`` whose number of cells differs from their header's, and the
    delimiter rows that keep a table from being one (their cells differ from the header's, so the whole table shows
    as text). A table runs on to a blank line or the start of another block, so a line without a pipe is a row
    too (of one cell). Math is taken out first, as JupyterLab does before the Markdown parser sees it, but not from
    code spans, where a ``$`` stays a dollar."""
    text = _without_code(markdown, lambda m: m.group(0).replace("$", "S"))
    text = "\n\n".join(_MATH.sub("math", paragraph) for paragraph in _PARAGRAPH_BREAK.split(text))
    lines, ragged = text.split("\n"), []
    for k in range(1, len(lines)):
        header, delimiter = lines[k - 1], lines[k]
        if "|" not in header or "|" not in delimiter or not _DELIMITER_ROW.match(delimiter):
            continue                                   # no table (a lone --- under a line is a heading or a rule)
        width = row_cells(header)
        if row_cells(delimiter) != width:
            ragged.append(delimiter)
            continue
        for row in lines[k + 1:]:
            if not row.strip() or _BLOCK_START.match(row):
                break
            if row_cells(row) != width:
                ragged.append(row)
    return ragged


def notebook_formulas(path: Path) -> list[dict]:
    """Every formula of the markdown cells of one notebook, each labelled with its file and cell index."""
    return [f for where, text in markdown_cells(path) for f in formulas(text, where)]


def _node_modules() -> Path | None:
    """The ``node_modules`` folder that holds mathjax-full: ``$MATHJAX_NODE_MODULES``, ``.cache/mathjax/``, the
    project's own ``node_modules/`` or a folder on ``$NODE_PATH``."""
    candidates = [os.environ.get("MATHJAX_NODE_MODULES"), ROOT / ".cache" / "mathjax" / "node_modules",
                  ROOT / "node_modules", *os.environ.get("NODE_PATH", "").split(os.pathsep)]
    for candidate in candidates:
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
                          timeout=300, env={**os.environ, "NODE_PATH": os.pathsep.join(
                              p for p in (str(modules), os.environ.get("NODE_PATH", "")) if p)})
    assert done.returncode == 0, f"the MathJax checker failed:\n{done.stderr}"
    return json.loads(done.stdout)


def test_formulas_are_found_as_jupyter_finds_them():
    markdown = ("Inline $a_i$ and $\\hat{y}$, a price \\$5 and \\$6, code `x = $y$` and\n"
                "```python\ncost = '$z$'\n```\n"
                "$$\\sum_{j} w_j = 1$$\n"
                "\\begin{align} a &= b \\\\ c &= d \\end{align}\n"
                "$\\mathrm{softmax}(x)$, \\\\(b_t\\\\) and \\\\[c^2\\\\]; \\(not math\\) in Markdown.")
    found = [(f["tex"], f["display"]) for f in formulas(markdown, "t")]
    assert found == [("a_i", False), ("\\hat{y}", False), ("\\sum_{j} w_j = 1", True),
                     ("\\begin{align} a &= b \\\\ c &= d \\end{align}", True), ("\\mathrm{softmax}(x)", False),
                     ("b_t", False), ("c^2", True)]


def test_a_dollar_left_open_is_not_paired_across_a_paragraph():
    markdown = "Use $\\alpha and more words.\n\nNext paragraph with $x_1$ here, and `a $ b` then $\\beta$."
    assert [f["tex"] for f in formulas(markdown, "t")] == ["x_1", "\\beta"]


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
             "| a row | broken | over two\nlines) | c |\n| `p | q` | r | s |\n| one | more | row that\nwraps\n"
             "| `$HOME` | `$PATH` | `$` |\n| ends \\\\| with | a split \\\\| |\n\nafter | the | table\n")
    assert ragged_table_rows(table) == ["lines) | c |", "| `p | q` | r | s |", "wraps",
                                        "| ends \\\\| with | a split \\\\| |"]
    assert ragged_table_rows("a | b\n--- | ---\n1 | 2\n") == []
    assert ragged_table_rows("a | b\n--- | --- | ---\n1 | 2\n") == ["--- | --- | ---"]     # then not a table
    assert ragged_table_rows("Values a | b\n---\n\n| x | y |\n|---|---|\n| 1 | 2 |\n- a list\n") == []


@pytest.mark.parametrize("path", NOTEBOOKS + PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_row_has_the_headers_cells(path):
    ragged = [f"{where}: {row[:120]!r}" for where, text in markdown_cells(path) for row in ragged_table_rows(text)]
    assert not ragged, "table rows with another number of cells than their header (a row broken over two lines, " \
                       "or a | to escape as \\|):\n  " + "\n  ".join(ragged)
