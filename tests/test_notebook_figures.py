"""The figures that notebook 01's prose quotes for its untrained baselines, recomputed on the real ML-1M.

The popularity and Markov-chain baselines involve no training, so on the full ML-1M their HR@10 is fixed. The
notebook's text quotes them; these tests run the notebook's own code (its ``MarkovChain``, ``hold_out`` and
``leak_experiment``) and the library's evaluator, and compare with the numbers written in the markdown, so the text
cannot drift from what the code measures. Skipped when ML-1M is not on disk (CI sets SEQREC_DATA_DIR).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tutorial_lib.data import leave_one_out, load_dataset

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "01_data_and_evaluation.ipynb"


def cells(kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == kind]


def markdown_with(phrase: str) -> str:
    """The one markdown cell of notebook 01 that contains ``phrase``, with its lines joined."""
    found = [text for text in cells("markdown") if phrase in text]
    assert len(found) == 1, f"{len(found)} markdown cells of {NOTEBOOK.name} contain {phrase!r}"
    return " ".join(found[0].split())


def quoted(text: str, pattern: str) -> tuple[float, ...]:
    match = re.search(pattern, text)
    assert match, f"the notebook's text no longer matches {pattern!r}: {text[:300]}"
    return tuple(float(g) for g in match.groups())


@pytest.fixture(scope="module")
def notebook_code(require_dataset):
    """Notebook 01's definitions (the cell with ``leak_experiment``) run on the full ML-1M, as in ``small`` mode."""
    require_dataset("ml-1m")
    code = [text for text in cells("code") if "def leak_experiment" in text]
    assert len(code) == 1
    namespace = {"np": np, "pd": pd, "data": load_dataset("ml-1m")}
    exec(compile(code[0], f"{NOTEBOOK.name}:leak_experiment", "exec"), namespace)
    return namespace


def test_the_leak_figures_of_the_random_split_are_what_the_code_measures(notebook_code):
    text = markdown_with("popularity's HR@10 rises from")
    pop_chrono, pop_random = quoted(text, r"popularity's HR@10 rises from (\d+\.\d+) to (\d+\.\d+)")
    markov_chrono, markov_random = quoted(text, r"Markov chain rises a little \((\d+\.\d+) to (\d+\.\d+)\)")
    (peek,) = quoted(text, r"peeks at the next item reaches (\d+\.\d+)")
    leak = notebook_code["leak"]
    measured = [
        ((pop_chrono, pop_random), (leak["chronological"]["popularity: HR@10"], leak["random"]["popularity: HR@10"])),
        ((markov_chrono, markov_random), (leak["chronological"]["Markov chain: HR@10"],
                                          leak["random"]["Markov chain: HR@10"])),
        ((peek,), (leak["random"]["Markov chain + peek: HR@10"],)),
    ]
    for text_values, values in measured:
        assert tuple(round(v, 3) for v in values) == text_values


def test_the_baseline_figures_under_each_protocol_are_what_the_evaluator_measures(notebook_code):
    from tutorial_lib.evaluation import EvalProtocol, Evaluator
    from tutorial_lib.models.baselines import PopularityRecommender

    text = markdown_with("they always give these HR@10")
    markov_text = quoted(text, r"Markov chain (\d+\.\d+) / (\d+\.\d+) / (\d+\.\d+)")
    popularity_text = quoted(text, r"popularity (\d+\.\d+) / (\d+\.\d+) / (\d+\.\d+)")
    data = notebook_code["data"]
    split = leave_one_out(data)
    models = {"markov": notebook_code["MarkovChain"](split.train, data.n_items),
              "popularity": PopularityRecommender(split)}
    hr = {(name, protocol): Evaluator(split, 50, EvalProtocol(protocol)).evaluate(model, "test")["hr@10"]
          for name, model in models.items() for protocol in ("full", "full-nohist", "sampled100")}
    for name, in_text in (("markov", markov_text), ("popularity", popularity_text)):
        assert tuple(round(hr[name, p], 3) for p in ("full", "full-nohist", "sampled100")) == in_text
    # the ratios the bullets quote, from the same measurements
    assert f"{hr['popularity', 'sampled100'] / hr['popularity', 'full']:.0f} times for popularity" in text
    assert f"({hr['popularity', 'full-nohist'] / hr['popularity', 'full']:.1f} times the HR@10)" in text
    assert f"least ({hr['markov', 'full-nohist'] / hr['markov', 'full']:.2f} times)" in text
