"""Option values written as text: one parser for the CLI's --option, benchmark specs and the results' options."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tutorial_lib.errors import ConfigError
from tutorial_lib.experiments.efficiency import parse_spec
from tutorial_lib.options import parse_key_value, parse_value
from tutorial_lib.viz.benchmark import parse_options


@pytest.mark.parametrize("text, value", [("2", 2), ("-1", -1), ("0.2", 0.2), ("1e-3", 0.001), ("true", True),
                                         ("False", False), ("None", None), ("tf", "tf"), ("", "")])
def test_values_are_parsed_as_what_they_look_like(text, value):
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_key_value_pairs_need_a_key_and_an_equals_sign():
    assert parse_key_value("layout=tf") == ("layout", "tf")
    assert parse_key_value("name=a=b") == ("name", "a=b")
    for bad in ("dropout", "=0.2"):
        with pytest.raises(ValueError, match="key=value"):
            parse_key_value(bad)


def test_benchmark_specs_and_results_options_read_values_alike():
    """parse_spec used to keep 'True', '1e-3' and '-1' as strings, so lightsans:compat=True could not be built."""
    assert parse_spec("lightsans:compat=True,k=40,lr=1e-3,shift=-1") == (
        "lightsans", {"compat": True, "k": 40, "lr": 0.001, "shift": -1})
    assert parse_spec("sasrec") == ("sasrec", {})
    with pytest.raises(ConfigError, match="'sasrec:dropout'.*key=value"):
        parse_spec("sasrec:dropout")
    assert parse_options("compat=True k=40 lr=1e-3") == {"compat": True, "k": 40, "lr": 0.001}


def test_the_options_module_does_not_import_torch():
    code = "import sys, tutorial_lib.options; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
