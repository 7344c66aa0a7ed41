"""Course tooling: ``python -m tutorial_lib.course {check,build-notebooks,clean-solutions}``.

check             is this machine ready for the course? versions, Jupyter kernel, device, datasets, and one
                  training epoch; exit status 1 when something the notebooks need is missing (for lab machines
                  and server images: docs/instructors.md); --data-dir DIR looks for the datasets there,
                  --no-train skips the training epoch

build-notebooks   write notebooks/NN_name.ipynb (the student version) for every solutions/NN_name.ipynb;
                  --check writes nothing and exits 1 naming every notebook that differs; a notebook that
                  has been run and saved (a learner's work) is kept unless --force
clean-solutions   normalise solutions/*.ipynb in place (strip outputs except '# NBVAL_CHECK_OUTPUT' cells,
                  minimal metadata); --execute first runs each notebook in smoke mode to refresh the stored
                  outputs of those cells; --check writes nothing and exits 1 naming what would change;
                  name notebooks (e.g. 02_sasrec_from_scratch.ipynb) to process only those

Workflow of a lesson author: edit solutions/NN_name.ipynb in Jupyter, then
    python -m tutorial_lib.course clean-solutions --execute NN_name.ipynb
    python -m tutorial_lib.course build-notebooks
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import TutorialLibError
from .build import build_notebooks, clean_solutions


def _root() -> Path:
    from ..data.paths import project_root

    return project_root() or Path.cwd()


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m tutorial_lib.course``: ``check``, ``build-notebooks``, ``clean-solutions``."""
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("check", allow_abbrev=False, help="is this machine ready for the course? (exit status 1 if not)")
    k.add_argument("--data-dir", type=Path, default=None,
                   help="where to look for the datasets (default: $SEQREC_DATA_DIR when it is set, otherwise data/cache/)")
    k.add_argument("--no-train", action="store_true", help="skip the one-epoch training check")
    b = sub.add_parser("build-notebooks", allow_abbrev=False, help="generate notebooks/ from solutions/")
    c = sub.add_parser("clean-solutions", allow_abbrev=False, help="normalise solutions/*.ipynb in place")
    for p in (b, c):
        p.add_argument("--solutions", type=Path, default=None, help="solutions folder (default: <project>/solutions)")
        p.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything would change")
    b.add_argument("--notebooks", type=Path, default=None, help="output folder (default: <project>/notebooks)")
    b.add_argument("--force", action="store_true",
                   help="also overwrite notebooks that have been run and saved (their outputs and answers are lost)")
    c.add_argument("names", nargs="*", metavar="NOTEBOOK",
                   help="only these solution notebooks (file names or paths; default: all)")
    c.add_argument("--execute", action="store_true",
                   help="run each solution (COURSE_MODE=smoke) to refresh the outputs of '# NBVAL_CHECK_OUTPUT' cells")
    return parser


def cmd_build(args: argparse.Namespace) -> int:
    """``build-notebooks``: write (or, with ``--check``, compare) the student notebooks; the exit status."""
    solutions = args.solutions or _root() / "solutions"
    notebooks = args.notebooks or _root() / "notebooks"
    report = build_notebooks(solutions, notebooks, check=args.check, force=args.force)
    if args.check:
        for p in report.written:
            print(f"out of date: {_rel(p)} (differs from what solutions/{p.name} generates)")
        for p in report.orphans:
            print(f"no solution: {_rel(p)} (there is no {_rel(Path(solutions) / p.name)})")
        if report.ok:
            print(f"notebooks up to date ({len(report.unchanged)} checked)")
            return 0
        print("run `python -m tutorial_lib.course build-notebooks` to regenerate them", file=sys.stderr)
        return 1
    for p in report.written:
        print(f"wrote {_rel(p)}")
    for p in report.orphans:
        print(f"warning: {_rel(p)} has no solution notebook; delete it if the lesson was renamed", file=sys.stderr)
    for p in report.kept:
        print(f"kept: {_rel(p)} has been run and saved (someone's work): not overwritten; move it aside, or pass "
              "--force to replace it", file=sys.stderr)
    print(f"{len(report.written)} written, {len(report.unchanged)} unchanged"
          + (f", {len(report.kept)} kept" if report.kept else ""))
    return 1 if report.kept else 0


def cmd_clean(args: argparse.Namespace) -> int:
    """``clean-solutions``: normalise (or, with ``--check``, test) the solution notebooks; the exit status."""
    solutions = args.solutions or _root() / "solutions"
    report = clean_solutions(solutions, check=args.check, execute=args.execute,
                             log=lambda msg: print(msg, flush=True), only=args.names)
    verb = "not clean" if args.check else "cleaned"
    for p in report.written:
        print(f"{verb}: {_rel(p)}")
    if args.check and report.written:
        print("run `python -m tutorial_lib.course clean-solutions` to normalise them", file=sys.stderr)
        return 1
    print(f"{len(report.written)} {verb}, {len(report.unchanged)} already clean")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``check``: print the preflight report of this machine; 1 when a required check failed."""
    from .preflight import report, run_checks

    text, status = report(run_checks(args.data_dir, train=not args.no_train))
    print(text)
    return status


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; 2 for a library error, 1 for a solution cell that failed while executing."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "check":
            return cmd_check(args)
        if args.command == "build-notebooks":
            return cmd_build(args)
        return cmd_clean(args)
    except TutorialLibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a solution cell failed while executing (nbclient's CellExecutionError)
        if type(exc).__name__ != "CellExecutionError":
            raise
        print(f"error: a cell of the solution notebook failed while executing:\n{exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
