"""README.md, results/README.md, the pages under docs/ that cite results, the course map and the notebooks of
solutions/ (read as text; notebooks/ is generated from them) only point at files that exist (links and the scripts they tell users to run), and their links into a Markdown file's sections
name headings that file has."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "results/README.md", "docs/results.md", "docs/instructors.md", "docs/speed.md",
        "docs/reproducibility.md", "notebooks/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "solutions").glob("*.ipynb"))]   # read as text


def _targets(text: str) -> set[str]:
    links = {m.group(1).split("#")[0] for m in re.finditer(r"\]\(([^)\s]+)\)", text)}
    scripts = set(re.findall(r"python ((?:benchmarks|tools)/[\w/]+\.py)", text))
    return {t for t in links | scripts if t and not re.match(r"[a-z]+:", t)}


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_and_script_exists(doc):
    path = ROOT / doc
    missing = sorted(t for t in _targets(path.read_text(encoding="utf-8")) if not (path.parent / t).exists()
                     and not (ROOT / t).exists())
    assert not missing, f"{doc} points at files that do not exist: {missing}"


def test_the_checker_sees_links_and_scripts():
    text = "see [a](results/x.md) and [b](https://example.org) or `python benchmarks/y.py --out z`"
    assert _targets(text) == {"results/x.md", "benchmarks/y.py"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)}


@pytest.mark.parametrize("doc", DOCS)
def test_every_section_link_names_a_heading(doc):
    path = ROOT / doc
    anchors: dict[Path, set[str]] = {}  # each linked file's headings, read once
    broken = []
    for m in re.finditer(r"\]\(([^)\s#]*\.md|)#([^)\s]+)\)", path.read_text(encoding="utf-8")):
        target = (path.parent / m.group(1)) if m.group(1) else path
        if not target.exists():
            continue  # test_every_relative_link_and_script_exists reports it
        if target not in anchors:
            anchors[target] = _anchors(target)
        if m.group(2) not in anchors[target]:
            broken.append(f"{m.group(1)}#{m.group(2)}")
    assert not broken, f"{doc} links to sections that do not exist: {broken}"


def test_slugs_follow_github():
    assert _slug("The FPARec paper's cross-entropy SASRec (full ranking)") == \
        "the-fparec-papers-cross-entropy-sasrec-full-ranking"
    assert _slug("Test (one command)") == "test-one-command"
