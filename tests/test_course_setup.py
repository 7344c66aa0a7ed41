"""setup_notebook(), COURSE_MODE and the parameters-cell helpers."""
from __future__ import annotations

import matplotlib as mpl
import pytest
import torch

from tutorial_lib.course import NotebookEnv, course_mode, environment_report, select_sizes, setup_notebook
from tutorial_lib.data import DATASETS
from tutorial_lib.errors import ConfigError


@pytest.fixture
def no_mode(monkeypatch):
    monkeypatch.delenv("COURSE_MODE", raising=False)


@pytest.fixture
def empty_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQREC_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_mode_defaults_to_small(no_mode):
    assert course_mode() == "small"


@pytest.mark.parametrize("value, mode", [("smoke", "smoke"), ("FULL", "full"), (" small ", "small")])
def test_mode_from_the_environment(monkeypatch, value, mode):
    monkeypatch.setenv("COURSE_MODE", value)
    assert course_mode() == mode


def test_invalid_mode_lists_the_valid_ones(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "fast")
    with pytest.raises(ConfigError) as info:
        setup_notebook(quiet=True)
    msg = str(info.value)
    assert "'fast'" in msg and all(m in msg for m in ("smoke", "small", "full"))


def test_select_sizes():
    sizes = {"smoke": 1, "small": 2, "full": 3}
    assert select_sizes(sizes, "full") == 3
    with pytest.raises(ConfigError, match="no sizes given for COURSE_MODE='full'"):
        select_sizes({"smoke": 1, "small": 2}, "full")
    with pytest.raises(ConfigError, match="not course modes"):
        select_sizes({"smoke": 1, "small": 2, "medium": 3}, "small")
    with pytest.raises(ConfigError, match="Valid values"):
        select_sizes(sizes, "tiny")


def test_setup_notebook_prints_and_returns_the_environment(no_mode, empty_data_dir, capsys):
    env = setup_notebook(seed=3)
    out = capsys.readouterr().out
    assert isinstance(env, NotebookEnv)
    assert env.mode == "small" and env.seed == 3 and env.data_dir == empty_data_dir
    assert env.device.type in ("cpu", "cuda", "mps")
    for text in (f"torch {torch.__version__}", "numpy ", "python ", f"device: {env.device.type}",
                 "COURSE_MODE=small", "CPU thread"):
        assert text in out
    assert env.sizes(smoke="a", small="b", full="c") == "b"
    assert set(env.data_available) == set(DATASETS) and not env.real_data
    assert "no real dataset found" in out and "--download ml-1m" in out
    if not env.has_gpu:
        assert "No GPU found" in out and "hours" in out


def test_full_mode_on_cpu_warns_clearly(monkeypatch, empty_data_dir, capsys):
    monkeypatch.setenv("COURSE_MODE", "full")
    env = setup_notebook(quiet=False)
    if env.has_gpu:
        pytest.skip("a GPU is present")
    out = capsys.readouterr().out
    assert "COURSE_MODE=full" in out and "HOURS per notebook" in out


def test_seeding_is_reproducible(empty_data_dir):
    setup_notebook(seed=5, quiet=True)
    a = torch.rand(3)
    env = setup_notebook(seed=5, quiet=True)
    assert torch.equal(a, torch.rand(3))
    assert env.rng.integers(1000) == setup_notebook(seed=5, quiet=True).rng.integers(1000)


def test_plot_style(empty_data_dir):
    setup_notebook(quiet=True)
    assert tuple(mpl.rcParams["figure.figsize"]) == (7.0, 4.0)
    assert mpl.rcParams["axes.spines.top"] is False


def test_threads(empty_data_dir, keep_threads):
    env = setup_notebook(threads=1, quiet=True)
    assert env.cpu_threads == 1 == torch.get_num_threads()
    with pytest.raises(ConfigError):
        setup_notebook(threads=0, quiet=True)


def test_busy_cpu_uses_one_thread(monkeypatch, empty_data_dir, keep_threads, capsys):
    import tutorial_lib.course.setup as setup_module

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(setup_module, "busy_cpu", lambda: (9.0, 2))
    torch.set_num_threads(2)
    assert setup_notebook().cpu_threads == 1
    assert "CPU is busy (load average 9.0 on 2 cores)" in capsys.readouterr().out
    torch.set_num_threads(2)
    assert setup_notebook(threads=2, quiet=True).cpu_threads == 2, "an explicit choice wins"
    monkeypatch.setattr(setup_module, "busy_cpu", lambda: None)
    assert setup_notebook(quiet=True).cpu_threads == 2


def test_data_availability_is_a_file_check(empty_data_dir, capsys):
    spec = DATASETS["ml-1m"]
    folder = empty_data_dir / spec.folder
    folder.mkdir()
    for f in spec.required_files:
        (folder / f.filename).write_text("1 1\n")
    env = setup_notebook()
    assert env.data_available["ml-1m"] and not env.data_available["beauty"] and env.real_data
    out = capsys.readouterr().out
    assert "1 of 8 real datasets" in out and "(ml-1m)" in out


def test_environment_report(capsys):
    rows = environment_report()
    names = {r["name"] for r in rows}
    assert {"torch", "numpy", "ipywidgets"} <= names
    assert all(r["ok"] for r in rows if not r["optional"])
    assert "environment OK" in capsys.readouterr().out
