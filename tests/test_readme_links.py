"""README.md and results/README.md only point at files that exist (links and the scripts they tell users to run)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "results/README.md"]


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
