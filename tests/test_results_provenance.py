"""git_commit: results appended by a run (and Markdown) never make the recorded commit 'dirty'; code does.
process_commit: a long-running process records the commit it started from, not commits made while it runs."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tutorial_lib.experiments import results

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.fixture(autouse=True)
def _no_commit_override(monkeypatch):
    monkeypatch.delenv("SEQREC_COMMIT", raising=False)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):   # set by git for its hooks: pytest run from a
        monkeypatch.delenv(name, raising=False)                   # hook would ask the project's repository


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin"})


def test_only_code_changes_make_the_commit_dirty(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "runs.csv").write_text("model\n")
    (tmp_path / "README.md").write_text("# r\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    monkeypatch.setattr(results, "project_root", lambda: tmp_path)
    clean = results.git_commit()
    assert len(clean) == 10 and not clean.endswith("-dirty")
    (tmp_path / "results" / "runs.csv").write_text("model\nsasrec\n")
    (tmp_path / "README.md").write_text("# r\n\nnew table\n")
    assert results.git_commit() == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert results.git_commit() == clean + "-dirty"


def test_a_copy_without_git_history_names_its_commit_in_the_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "project_root", lambda: tmp_path)          # no repository here
    assert results.git_commit() == "unknown"
    monkeypatch.setenv("SEQREC_COMMIT", "09506cb3f2")
    assert results.git_commit() == "09506cb3f2"
    (tmp_path / "code.py").write_text("x = 1\n")           # a real checkout: git wins over the variable
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    real = results.git_commit()
    assert real != "09506cb3f2" and len(real) == 10


def test_a_process_records_the_commit_it_started_from(tmp_path, monkeypatch):
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    monkeypatch.setattr(results, "project_root", lambda: tmp_path)
    monkeypatch.setattr(results, "_PROCESS_COMMIT", None)
    first = results.process_commit()
    (tmp_path / "code.py").write_text("x = 2\n")
    _git(tmp_path, "commit", "-qam", "second")                 # committed while the process trains
    assert results.git_commit() != first
    assert results.process_commit() == first


def test_provenance_says_when_the_library_comes_from_another_checkout(tmp_path, monkeypatch):
    library, other = tmp_path / "library", tmp_path / "worktree"
    for repo in (library, other):
        repo.mkdir()
        _git(repo, "init", "-q")
    monkeypatch.setattr(results, "project_root", lambda: library)
    monkeypatch.chdir(library)
    assert results.library_elsewhere() is None
    assert not any(line.startswith("library:") for line in results.provenance_lines(commit="abc"))
    monkeypatch.chdir(other)                          # a second worktree whose scripts import the first's code
    note = results.library_elsewhere()
    assert note is not None and str(library) in note and str(other.resolve()) in note
    assert any(line.startswith("library:") for line in results.provenance_lines(commit="abc"))
    monkeypatch.chdir(tmp_path)                       # not a checkout at all: nothing to say
    assert results.library_elsewhere() is None
