"""Load a registered dataset into the internal :class:`SequenceDataset` format, and report which
datasets are available."""
from __future__ import annotations

import copy
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tutorial_lib.data.dataset import DatasetStats, SequenceDataset
from tutorial_lib.data.download import archive_path, ensure_dataset, sha256_of
from tutorial_lib.data.paths import dataset_folder
from tutorial_lib.data.preprocess import (
    chronological_order,
    group_by_user,
    is_contiguous,
    k_core,
    remap_contiguous,
)
from tutorial_lib.data.readers import (
    RawSequences,
    read_ml1m_titles,
    read_movielens_ratings,
    read_movielens_titles,
    read_raw,
)
from tutorial_lib.data.registry import (
    DATASETS,
    MOVIELENS,
    DatasetSpec,
    FileSpec,
    PaperStats,
    get_spec,
)
from tutorial_lib.errors import DataFormatError, DatasetUnavailableError

PAD_TITLE = "<pad>"
_MEMO: dict[tuple, SequenceDataset] = {}


def clear_cache() -> None:
    """Forget the datasets memoised by :func:`load_dataset` in this process."""
    _MEMO.clear()


def _file_key(folder: Path, spec: DatasetSpec) -> tuple:
    out = []
    for f in spec.files:
        p = folder / f.filename
        if p.is_file():
            st = p.stat()
            out.append((f.filename, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _checksums(spec: DatasetSpec, folder: Path) -> dict[str, dict]:
    """sha256 of every present file and whether it matches the registry (None: nothing to compare with)."""
    result = {}
    for f in spec.files:
        p = folder / f.filename
        if not p.is_file():
            continue
        actual = sha256_of(p)
        ok = None if f.sha256 is None else actual == f.sha256
        if ok is False:
            warnings.warn(
                f"{p} has sha256 {actual}, the registry expects {f.sha256}: a different version of the file "
                "(results may differ from the papers).",
                stacklevel=3,
            )
        result[f.filename] = {"sha256": actual, "expected": f.sha256, "verified": ok}
    return result


def stats_match(stats: DatasetStats, spec: DatasetSpec) -> bool:
    """Whether ``stats`` equal the registry's file statistics (users, items, interactions, min len, avg len to 2 dp)."""
    want = spec.file_stats
    return (stats.users, stats.items, stats.interactions, stats.min_len, round(stats.avg_len, 2)) == (
        want.users, want.items, want.interactions, want.min_len, round(want.avg_len, 2))


def _titles(spec: DatasetSpec, folder: Path, old_ids: np.ndarray | None, n_items: int) -> list[str] | None:
    """Titles indexed by our item id (0 = padding), or None without a titles file."""
    if spec.titles_file is None or not (folder / spec.titles_file).is_file():
        return None
    path = folder / spec.titles_file
    try:
        by_id = read_movielens_titles(path) if spec.format == MOVIELENS else read_ml1m_titles(path)
    except DataFormatError as exc:    # titles only label items in plots and tables: train without them
        warnings.warn(f"{exc}. The titles file is optional: the items go without titles; fix the file or delete "
                      f"it to silence this", stacklevel=2)
        return None
    ids = old_ids if old_ids is not None else np.arange(n_items + 1)
    return [PAD_TITLE] + [by_id.get(int(i), f"item {int(i)}") for i in ids[1:]]


def _build(spec: DatasetSpec, folder: Path) -> SequenceDataset:
    main = folder / spec.main_file.filename
    meta: dict = {
        "source_folder": str(folder),
        "source_file": str(main) if spec.format != "locker-json" else str(folder),
        "format": spec.format,
        "preprocessing": spec.preprocessing,
    }
    old_ids: np.ndarray | None = None
    if spec.format == MOVIELENS:
        r = read_movielens_ratings(main)
        published = RawSequences(*group_by_user(r.users, r.items), source=r.source).stats()
        keep = k_core(r.users, r.items, k=5)
        users, items, ts = r.users[keep], r.items[keep], r.timestamps[keep]
        order = chronological_order(users, ts)
        user_ids, seqs = group_by_user(users[order], items[order])
        seqs, old_ids = remap_contiguous(seqs)
        meta["interactions_before_filter"] = len(r)
        meta["k_core"] = 5
    else:
        raw = read_raw(spec.format, folder, spec.main_file.filename)
        published = raw.stats()
        user_ids, seqs = raw.user_ids, raw.sequences
        if not is_contiguous(seqs):
            seqs, old_ids = remap_contiguous(seqs)
    n_items = int(max(int(s.max()) for s in seqs))
    meta["user_ids"] = np.asarray(user_ids)  # the file's user id of each sequence
    meta["item_ids_remapped"] = old_ids is not None
    if old_ids is not None:
        meta["item_id_map"] = old_ids  # item_id_map[our id] = the file's id
    meta["file_stats"] = published.as_dict()
    meta["file_stats_match_registry"] = stats_match(published, spec)
    meta["checksums"] = _checksums(spec, folder)
    meta["sha256_verified"] = meta["checksums"][spec.main_file.filename]["verified"]
    if spec.verify_by_stats and not meta["file_stats_match_registry"]:
        # no published checksum (ml-1m): the statistics are the only check that this is the papers' file
        want = spec.file_stats
        warnings.warn(f"{folder / spec.main_file.filename} has {published.users:,} users, {published.items:,} items "
                      f"and {published.interactions:,} interactions; the registry's {spec.name!r} file has "
                      f"{want.users:,}, {want.items:,} and {want.interactions:,}: a different or partial version "
                      f"(results will not compare with the papers; `python -m tutorial_lib datasets --download "
                      f"{spec.name}` fetches the registered one)", stacklevel=3)
    titles = _titles(spec, folder, old_ids, n_items)
    return SequenceDataset(spec.name, seqs, n_items, item_titles=titles, meta=meta)


def load_dataset(
    name: str, root: str | os.PathLike | None = None, download: bool = False
) -> SequenceDataset:
    """Load a registered dataset as per-user chronological sequences with contiguous item ids.

    Looks in :func:`~tutorial_lib.data.paths.data_dir` (``root``, ``$SEQREC_DATA_DIR``, the project
    cache); downloads when ``download=True``; raises :class:`DatasetUnavailableError` with
    instructions otherwise. Repeated calls in one process are served from memory (a shallow copy:
    the arrays are shared, so do not modify them in place).
    """
    spec = get_spec(name)
    folder = ensure_dataset(spec, root, download=download)
    key = (spec.name, str(folder.resolve()), _file_key(folder, spec))
    if key not in _MEMO:
        _MEMO[key] = _build(spec, folder)
    ds = copy.copy(_MEMO[key])
    ds.sequences = list(ds.sequences)
    ds.meta = dict(ds.meta)
    return ds


def load_or_synthetic(name: str, **synthetic: int) -> SequenceDataset:
    """:func:`load_dataset` ``name``, or, when that fails (offline, file missing, unknown name), synthetic data
    made with ``make_synthetic(**synthetic)``, saying so on stderr: what keeps a benchmark script runnable
    anywhere."""
    try:
        return load_dataset(name)
    except Exception as exc:  # any failure falls back: the script must still run and say why
        from tutorial_lib.data.synthetic import make_synthetic

        print(f"[{name} unavailable: {exc}; using synthetic data]", file=sys.stderr)
        return make_synthetic(**synthetic)


def file_statistics(name: str, root: str | os.PathLike | None = None) -> DatasetStats:
    """Statistics of the dataset's file(s) as published, before any preprocessing of ours.

    (For ml-100k this is the raw u.data: 943 users / 1,682 items / 100,000 ratings; the statistics of
    what :func:`load_dataset` returns are ``load_dataset(name).stats()``.)
    """
    spec = get_spec(name)
    folder = ensure_dataset(spec, root, download=False)
    return read_raw(spec.format, folder, spec.main_file.filename).stats()


@dataclass
class DatasetStatusRow:
    """One line of :func:`dataset_status`."""

    name: str
    title: str
    available: bool
    folder: Path
    file_stats: DatasetStats | None
    processed_stats: DatasetStats | None
    paper_stats: tuple[PaperStats, ...]
    missing: tuple[str, ...]
    urls: tuple[str, ...]
    error: str | None = None


def missing_files(name: str, root: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The dataset's required files that are not in its folder of the data directory, nor in an archive put there
    (empty when it can be loaded without downloading; contents are checked when it is loaded, not here)."""
    spec = get_spec(name)
    folder = dataset_folder(spec, root)

    def there(f: FileSpec) -> bool:
        archive = archive_path(f, folder)
        return (folder / f.filename).is_file() or (archive is not None and archive.is_file())

    return tuple(f.filename for f in spec.required_files if not there(f))


def dataset_status(root: str | os.PathLike | None = None) -> list[DatasetStatusRow]:
    """Availability and statistics of every registered dataset in the data directory."""
    rows = []
    for spec in DATASETS.values():
        folder = dataset_folder(spec, root)
        missing = missing_files(spec.name, root)
        urls = tuple(u for f in spec.required_files for u in (f.urls + f.mirrors))
        fstats = pstats = None
        error = None
        if not missing:
            try:
                fstats = file_statistics(spec.name, root)
                pstats = load_dataset(spec.name, root).stats()
            except (DatasetUnavailableError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
        rows.append(
            DatasetStatusRow(spec.name, spec.title, not missing and error is None, folder, fstats, pstats,
                             spec.paper_stats, missing, urls, error)
        )
    return rows


def _first_source(f: FileSpec) -> str:
    """Where one registered file can be had: its first URL, the archive it is unzipped from, or data/README.md."""
    if f.archive_member and f.urls:
        return f"{f.urls[0]} (unzip {f.archive_member})"
    urls = f.urls + f.mirrors
    return urls[0] if urls else "see data/README.md"


def format_dataset_table(rows: list[DatasetStatusRow]) -> str:
    """Aligned text table of :func:`dataset_status` rows (processed statistics where available)."""
    header = ("dataset", "available", "users", "items", "interactions", "avg len", "min len")
    body: list[tuple[str, ...]] = []
    notes: list[str] = []
    changed: list[str] = []
    for r in rows:
        st = r.processed_stats
        if st is not None:
            body.append((r.name, "yes", f"{st.users:,}", f"{st.items:,}", f"{st.interactions:,}",
                         f"{st.avg_len:.2f}", f"{st.min_len}"))
            fs = r.file_stats
            if fs is not None and (fs.users, fs.items, fs.interactions) != (st.users, st.items, st.interactions):
                changed.append(f"{r.name}: the file as published has {fs.users:,} users / {fs.items:,} items / "
                               f"{fs.interactions:,} interactions (before our preprocessing)")
        else:
            body.append((r.name, "no", "-", "-", "-", "-", "-"))
            if r.error:
                notes.append(f"{r.name}: cannot be read: {r.error}")
            else:
                files = {f.filename: f for f in get_spec(r.name).required_files}
                where = "; ".join(f"{name} from {_first_source(files[name])}" for name in r.missing)
                notes.append(f"{r.name}: run `python -m tutorial_lib datasets --download {r.name}`, or put "
                             f"{', '.join(r.missing)} into {r.folder}/ by hand ({where})")
    widths = [max(len(row[j]) for row in (header, *body)) for j in range(len(header))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths)))

    lines = [fmt(header), "  ".join("-" * w for w in widths), *(fmt(row) for row in body)]
    if changed:
        lines += ["", "Statistics of the data as loaded; " + "; ".join(changed) + "."]
    if notes:
        lines += ["", "Not available:"] + [f"  {n}" for n in notes]
    return "\n".join(lines)
