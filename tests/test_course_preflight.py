"""``python -m tutorial_lib.course check``: the preflight report an instructor runs on lab machines."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tutorial_lib.course import __main__ as course_cli
from tutorial_lib.course import preflight
from tutorial_lib.course.preflight import NOTEBOOK_DATASETS, Finding, report, run_checks
from tutorial_lib.data.registry import DATASETS

ROOT = Path(__file__).resolve().parents[1]


def code_of(number: str) -> str:
    path = next((ROOT / "solutions").glob(f"{number}_*.ipynb"))
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")


def quoted_datasets(code: str) -> set[str]:
    return {name for name in DATASETS if re.search(rf'"{re.escape(name)}"', code)}


def test_the_notebook_map_names_only_registered_datasets_and_notebooks_that_read_them():
    assert set(NOTEBOOK_DATASETS) <= set(DATASETS)
    for name, notebooks in NOTEBOOK_DATASETS.items():
        for notebook in notebooks:
            assert name in quoted_datasets(code_of(notebook[:2])), (name, notebook)


@pytest.mark.parametrize("number", ["01", "02", "03", "04", "05", "06"])
def test_every_dataset_a_notebook_reads_is_in_the_map(number):
    # notebook 07 is left out: it names beauty only in its table of the benchmark's presets
    for name in quoted_datasets(code_of(number)):
        assert any(n.startswith(number) for n in NOTEBOOK_DATASETS.get(name, ())), (number, name)


def test_missing_data_warns_and_a_missing_package_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQREC_DATA_DIR", str(tmp_path))  # an empty data folder, the one the notebooks read
    installed = [f for f in preflight.package_findings() if f.ok or f.required]   # this machine's kernel and
    with monkeypatch.context() as m:                                 # optional packages may warn too: only the data's
        m.setattr(preflight, "kernel_finding", lambda: Finding("jupyter kernel", True, "stand-in", required=False))
        m.setattr(preflight, "package_findings", lambda: installed)   # warnings are counted below
        findings = run_checks(None, train=False)
    data = [f for f in findings if f.topic.startswith("data")]
    assert [f.topic for f in data] == [f"data: {n}" for n in NOTEBOOK_DATASETS]
    assert not any(f.ok or f.required for f in data)
    assert data[0].detail.endswith("python -m tutorial_lib datasets --download ml-1m") and str(tmp_path) in data[0].detail
    text, status = report(findings)
    assert status == 0 and "ready for the course (3 warnings" in text

    rows = [{"name": "torch", "required": ">=2.3", "found": "2.0.1", "ok": False, "optional": False},
            {"name": "pandas", "required": ">=2.0", "found": None, "ok": False, "optional": False},
            {"name": "jupyterlab", "required": ">=4.0", "found": None, "ok": False, "optional": True}]
    monkeypatch.setattr(preflight, "environment_report", lambda quiet: rows)
    torch_, pandas_, lab = preflight.package_findings()
    assert (torch_.ok, torch_.required) == (False, True) and "pip install -U 'torch>=2.3'" in torch_.detail
    assert (pandas_.ok, pandas_.required) == (False, True) and "not installed" in pandas_.detail
    assert (lab.ok, lab.required) == (False, False) and "Jupyter server" in lab.detail
    text, status = report([torch_, pandas_, lab])
    assert status == 1 and "NOT READY: fix torch, pandas" in text and "FAIL  torch" in text


def test_a_named_data_folder_that_is_missing_fails_and_a_download_hint_keeps_it(tmp_path, monkeypatch):
    monkeypatch.delenv("SEQREC_DATA_DIR", raising=False)
    missing = tmp_path / "not-mounted"
    folder, elsewhere, *data = preflight.data_findings(missing)
    assert folder.topic == "data folder" and not folder.ok and folder.required and "does not exist" in folder.detail
    assert not elsewhere.required and "the notebooks read" in elsewhere.detail and "SEQREC_DATA_DIR=" in elsewhere.detail
    assert f"datasets --data-dir {missing} --download ml-1m" in data[0].detail
    monkeypatch.setenv("SEQREC_DATA_DIR", str(missing))                 # the same folder through the variable
    assert [f.topic for f in preflight.data_findings()][:1] == ["data folder"]


def test_a_dataset_file_that_is_there_but_broken_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQREC_DATA_DIR", str(tmp_path))
    spec = DATASETS["ml-1m"]
    (tmp_path / spec.folder).mkdir()
    for f in spec.required_files:
        (tmp_path / spec.folder / f.filename).write_text("")
    ml1m = next(f for f in preflight.data_findings() if f.topic == "data: ml-1m")
    assert not ml1m.ok and ml1m.required and "unreadable" in ml1m.detail


def test_an_unknown_course_mode_fails(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "fast")
    finding = preflight.mode_finding()
    assert not finding.ok and finding.required and "fast" in finding.detail
    monkeypatch.setenv("COURSE_MODE", "smoke")
    assert preflight.mode_finding().ok


def test_the_kernel_check_names_the_python_the_kernel_runs(monkeypatch):
    import sys

    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel

    def spec_running(python, folder="/home/me/.local/share/jupyter/kernels/python3"):
        return lambda self, name: KernelSpec(argv=[python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                                             resource_dir=folder)

    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", spec_running(sys.executable))
    assert preflight.kernel_finding().ok
    assert preflight.environment_of(sys.executable) == sys.prefix and preflight.environment_of("/no/python") is None
    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", spec_running("/opt/other/bin/python"))
    finding = preflight.kernel_finding()
    assert not finding.ok and "runs /opt/other/bin/python" in finding.detail and "--sys-prefix" in finding.detail

    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec",
                        spec_running("/opt/other/bin/python", "/env/lib/python3.11/site-packages/ipykernel/resources"))
    assert preflight.kernel_finding().ok and "built-in" in preflight.kernel_finding().detail

    # a kernel file saying just "python" (or python3): Jupyter starts its own interpreter, whatever PATH holds
    monkeypatch.setenv("PATH", "/nowhere")
    for bare in ("python", f"python{sys.version_info[0]}"):
        monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", spec_running(bare))
        assert preflight.kernel_finding().ok and "Jupyter replaces" in preflight.kernel_finding().detail

    def no_kernel(self, name):
        raise NoSuchKernel(name)

    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", no_kernel)
    assert "no kernel named python3" in preflight.kernel_finding().detail


def test_an_old_python_fails(monkeypatch):
    monkeypatch.setattr(preflight, "MIN_PYTHON", (99, 0))
    finding = preflight.python_finding()
    assert not finding.ok and finding.required and "99.0 or newer" in finding.detail


def test_the_training_check_trains_one_epoch_and_reports_a_failure(monkeypatch):
    finding = preflight.training_finding()
    assert finding.ok and "one epoch" in finding.detail and "NDCG@10" in finding.detail

    def broken(spec, dataset=None):
        raise RuntimeError("no kernel image for this GPU")

    monkeypatch.setattr("tutorial_lib.experiments.run.run_experiment", broken)
    finding = preflight.training_finding()
    assert not finding.ok and finding.required and "RuntimeError: no kernel image" in finding.detail


def test_the_command_prints_the_report_and_returns_its_status(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(preflight, "run_checks", lambda root, train: [Finding("python", True, "3.11"),
                                                                      Finding("torch", False, "too old")])
    assert course_cli.main(["check", "--no-train", "--data-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  torch   too old" in out and "NOT READY" in out
