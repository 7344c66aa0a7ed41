"""Readers for the public file formats: fast (numpy/pandas) and strict.

Every reader returns the ids exactly as they are in the file (no filtering, no remapping; LOCKER's
0-based ids are shifted to 1-based) and raises :class:`~tutorial_lib.errors.DataFormatError` naming
the file and the 1-based line number of the first malformed line, or saying that the file is empty.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tutorial_lib.data.dataset import DatasetStats
from tutorial_lib.data.preprocess import group_by_user
from tutorial_lib.errors import DataFormatError

PathLike = str | os.PathLike


@dataclass
class RawSequences:
    """Per-user chronological item sequences with the file's own ids.

    Attributes:
        user_ids: ``(n_users,)`` int64, the file's user id of each sequence.
        sequences: one 1-D int64 array of item ids per user (file ids, not remapped).
        source: the file (or folder) they were read from.
    """

    user_ids: np.ndarray
    sequences: list[np.ndarray]
    source: str

    def stats(self) -> DatasetStats:
        """Users, distinct items, interactions and length statistics of the file as read."""
        lengths = np.fromiter((len(s) for s in self.sequences), dtype=np.int64, count=len(self.sequences))
        items = int(np.unique(np.concatenate(self.sequences)).size) if self.sequences else 0
        n = int(lengths.sum())
        users = len(self.sequences)
        return DatasetStats(
            users=users,
            items=items,
            interactions=n,
            avg_len=float(lengths.mean()) if users else 0.0,
            min_len=int(lengths.min()) if users else 0,
            max_len=int(lengths.max()) if users else 0,
            density=n / (users * items) if users and items else 0.0,
        )


@dataclass
class Ratings:
    """A MovieLens ratings table in file order (one entry per line)."""

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    timestamps: np.ndarray
    source: str

    def __len__(self) -> int:
        """Number of ratings (lines of the file)."""
        return int(self.users.size)


# ----------------------------------------------------------------------------------------------
# helpers


def _check_not_empty(path: Path) -> None:
    if not path.is_file():
        raise DataFormatError(f"{path}: not a file")
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                return
    raise DataFormatError(f"{path}: the file is empty (no data lines)")


INT64_MAX = 2**63 - 1
#: a byte-order mark some editors (Notepad) put at the start of a UTF-8 file: not part of the first id
UTF8_BOM = b"\xef\xbb\xbf"


def _scan_for_bad_line(path: Path, n_cols: int, layout: str) -> None:
    """Slow line-by-line check; raises for the first line that does not have ``n_cols`` integers."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            toks = (raw.removeprefix(UTF8_BOM) if lineno == 1 else raw).split()
            if not toks:
                continue
            if len(toks) != n_cols:
                raise DataFormatError(
                    f"{path}, line {lineno}: expected {n_cols} fields ({layout}), found {len(toks)}: "
                    f"{raw.decode('utf-8', 'replace').rstrip()!r}"
                )
            for tok in toks:
                if not tok.isdigit():
                    raise DataFormatError(
                        f"{path}, line {lineno}: {tok.decode('utf-8', 'replace')!r} is not a non-negative "
                        f"integer ({layout})"
                    )
                if int(tok) > INT64_MAX:
                    raise DataFormatError(f"{path}, line {lineno}: {tok.decode()} is too large for an id "
                                          f"(at most {INT64_MAX}; {layout})")


def _read_int_table(path: PathLike, names: Sequence[str], layout: str) -> pd.DataFrame:
    """Whitespace-separated table of non-negative integers, one row per non-blank line."""
    path = Path(path)
    _check_not_empty(path)
    try:
        df = pd.read_csv(path, sep=r"\s+", header=None, dtype=np.int64, engine="c")
    except (ValueError, OverflowError, pd.errors.ParserError) as exc:
        _scan_for_bad_line(path, len(names), layout)
        raise DataFormatError(f"{path}: cannot be parsed as {layout}: {exc}") from exc
    if df.shape[1] != len(names) or (df.to_numpy() < 0).any():
        _scan_for_bad_line(path, len(names), layout)
        raise DataFormatError(f"{path}: expected {len(names)} integer columns ({layout})")
    df.columns = list(names)
    return df


# ----------------------------------------------------------------------------------------------
# public readers


def read_pairs(path: PathLike) -> RawSequences:
    """SASRec format: one ``user item`` pair per line, grouped by user, chronological within a user.

    Users come out in ascending id order; within a user the file order is kept.
    """
    df = _read_int_table(path, ("user", "item"), "`user item`")
    user_ids, seqs = group_by_user(df["user"].to_numpy(), df["item"].to_numpy())
    return RawSequences(user_ids, seqs, str(path))


def read_user_lines(path: PathLike) -> RawSequences:
    """S3-Rec format: one line per user, ``user item_1 item_2 ... item_n`` (chronological).

    Users keep the file's line order; a user id that occurs on two lines is an error.
    """
    path = Path(path)
    _check_not_empty(path)
    user_ids: list[int] = []
    seqs: list[np.ndarray] = []
    first_line: dict[int, int] = {}
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            toks = (raw.removeprefix(UTF8_BOM) if lineno == 1 else raw).split()
            if not toks:
                continue
            if not b"".join(toks).isdigit():
                bad = next(t for t in toks if not t.isdigit())
                raise DataFormatError(
                    f"{path}, line {lineno}: {bad.decode('utf-8', 'replace')!r} is not a non-negative integer "
                    "(expected `user item_1 ... item_n`)"
                )
            if len(toks) < 2:
                raise DataFormatError(f"{path}, line {lineno}: user {int(toks[0])} has no items (expected "
                                      "`user item_1 ... item_n`)")
            user = int(toks[0])
            if user in first_line:
                raise DataFormatError(
                    f"{path}, line {lineno}: user {user} already appeared on line {first_line[user]}"
                )
            first_line[user] = lineno
            user_ids.append(user)
            seqs.append(np.fromiter(map(int, toks[1:]), dtype=np.int64, count=len(toks) - 1))
    if not seqs:
        raise DataFormatError(f"{path}: the file is empty (no data lines)")
    return RawSequences(np.asarray(user_ids, dtype=np.int64), seqs, str(path))


def read_movielens_ratings(path: PathLike) -> Ratings:
    """GroupLens ``u.data``: ``user item rating timestamp`` per line (tab or space separated), file order."""
    df = _read_int_table(path, ("user", "item", "rating", "timestamp"), "`user item rating timestamp`")
    return Ratings(
        users=df["user"].to_numpy(),
        items=df["item"].to_numpy(),
        ratings=df["rating"].to_numpy(),
        timestamps=df["timestamp"].to_numpy(),
        source=str(path),
    )


def _load_json(path: Path) -> dict:
    _check_not_empty(path)
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}, line {exc.lineno}: invalid JSON ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise DataFormatError(f"{path}, line 1: expected a JSON object {{\"uid\": [sid, ...]}}")
    return obj


def read_locker_json(folder: PathLike, shift: int = 1) -> RawSequences:
    """LOCKER split files ``train.json``, ``val.json``, ``test.json`` in ``folder``.

    Each user's sequence is train + val + test; users in ascending uid order. LOCKER's ids are 0-based,
    so ``shift=1`` (default) adds 1 to user and item ids (0 stays free for padding).
    """
    folder = Path(folder)
    names = ("train.json", "val.json", "test.json")
    paths = [folder / fn for fn in names]
    parts = [_load_json(p) for p in paths]
    train = parts[0]
    for path, part in zip(paths, parts):
        for key in part:
            if not key.isdigit():
                raise DataFormatError(f"{path}: user key {key!r} is not a non-negative integer")
        if path is not paths[0]:
            extra = set(part) - set(train)
            if extra:
                raise DataFormatError(f"{path}: user {min(extra, key=int)!r} is not in train.json")
    keys = sorted(train, key=int)
    lengths = np.zeros(len(keys), dtype=np.int64)
    flat: list = []
    for j, key in enumerate(keys):
        n0 = len(flat)
        for path, part in zip(paths, parts):
            value = part.get(key)
            if value is None:
                continue
            if not isinstance(value, list):
                raise DataFormatError(f"{path}: entry of user {key!r} must be a list of item ids, got {value!r:.60}")
            flat.extend(value)
        lengths[j] = len(flat) - n0
        if lengths[j] == 0:
            raise DataFormatError(f"{paths[0]}: user {key!r} has no items")
    if not keys:
        raise DataFormatError(f"{paths[0]}: the file has no users")
    # a negative id is refused too: -1 + shift would silently become the padding id 0
    bad_at = next((i for i, v in enumerate(flat) if type(v) is not int or v < 0), None)
    if bad_at is not None:
        bad = flat[bad_at]
        user = keys[int(np.searchsorted(np.cumsum(lengths), bad_at, side="right"))]
        what = (f"a non-integer item id {bad!r:.40}" if type(bad) is not int
                else f"a negative item id {bad}; LOCKER ids are 0-based and non-negative")
        raise DataFormatError(f"{folder}: user {user!r} has {what}")
    arr = np.asarray(flat, dtype=np.int64) + shift
    user_ids = np.asarray([int(k) for k in keys], dtype=np.int64) + shift
    return RawSequences(user_ids, np.split(arr, np.cumsum(lengths)[:-1]), str(folder))


def read_ml1m_titles(path: PathLike) -> dict[int, str]:
    """``ml-1m_item_map.tsv`` (columns item_id, MovieID, id_certain, title, genres) -> {item_id: title}."""
    path = Path(path)
    _check_not_empty(path)
    try:
        df = pd.read_csv(path, sep="\t", dtype={"item_id": np.int64}, usecols=["item_id", "title"],
                         keep_default_na=False, quoting=3)
    except (ValueError, pd.errors.ParserError) as exc:
        raise DataFormatError(f"{path}: expected tab-separated columns item_id, MovieID, id_certain, title, "
                              f"genres ({exc})") from exc
    return dict(zip(df["item_id"].tolist(), df["title"].tolist()))


def read_movielens_titles(path: PathLike) -> dict[int, str]:
    """GroupLens ``u.item`` (``|`` separated, ISO-8859-1) -> {movie id: title}."""
    path = Path(path)
    _check_not_empty(path)
    titles: dict[int, str] = {}
    with open(path, encoding="iso-8859-1") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("|")
            if len(fields) < 2 or not fields[0].isdigit():
                raise DataFormatError(f"{path}, line {lineno}: expected `movie id|title|...`, got {line.strip()!r:.80}")
            titles[int(fields[0])] = fields[1]
    return titles


def read_raw(fmt: str, folder: PathLike, main_file: str) -> RawSequences:
    """Read a dataset's interactions as published, by registry format (see :mod:`.registry`).

    For MovieLens ratings the rows are grouped by user in file order (no time sort, no filtering).
    """
    from tutorial_lib.data.registry import LOCKER_JSON, MOVIELENS, PAIRS, USER_LINES

    folder = Path(folder)
    if fmt == PAIRS:
        return read_pairs(folder / main_file)
    if fmt == USER_LINES:
        return read_user_lines(folder / main_file)
    if fmt == MOVIELENS:
        r = read_movielens_ratings(folder / main_file)
        user_ids, seqs = group_by_user(r.users, r.items)
        return RawSequences(user_ids, seqs, r.source)
    if fmt == LOCKER_JSON:
        return read_locker_json(folder)
    raise ValueError(f"unknown dataset format {fmt!r}")
