"""Readers of the public formats and the preprocessing steps, on small generated files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tutorial_lib.data.loading import file_statistics, load_dataset
from tutorial_lib.data.preprocess import chronological_order, group_by_user, is_contiguous, k_core, remap_contiguous
from tutorial_lib.data.readers import (
    read_locker_json,
    read_movielens_ratings,
    read_movielens_titles,
    read_pairs,
    read_user_lines,
)
from tutorial_lib.errors import DataFormatError


def _seqs(raw):
    return [s.tolist() for s in raw.sequences]


# ------------------------------------------------------------------------------------------------
# pairs (SASRec)


def test_read_pairs(tmp_path):
    p = tmp_path / "pairs.txt"
    p.write_text("1 5\n1 3\n1 9\n2 3\n2 1\n3 7\n")
    raw = read_pairs(p)
    assert raw.user_ids.tolist() == [1, 2, 3]
    assert _seqs(raw) == [[5, 3, 9], [3, 1], [7]]
    assert all(s.dtype == np.int64 for s in raw.sequences)
    st = raw.stats()
    assert (st.users, st.items, st.interactions, st.min_len, st.max_len) == (3, 5, 6, 1, 3)


def test_read_pairs_groups_users_keeping_file_order(tmp_path):
    p = tmp_path / "pairs.txt"
    p.write_text("2 4\n1 5\n2 6\n1 3\n\n")  # interleaved users, trailing blank line
    raw = read_pairs(p)
    assert raw.user_ids.tolist() == [1, 2]
    assert _seqs(raw) == [[5, 3], [4, 6]]


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("1 2\n1 3\n1 4 5\n", 3, "expected 2 fields"),
        ("1 2\n1\n1 4\n", 2, "expected 2 fields"),
        ("1 2\n1 3\n2 x\n", 3, "'x'"),
        ("1 2\n1 2.5\n", 2, "'2.5'"),
        ("1 2\n-1 3\n", 2, "'-1'"),
        ("user item\n1 2\n", 1, "'user'"),
        ("1 2\n1 99999999999999999999\n", 2, "too large"),
    ],
)
def test_read_pairs_malformed(tmp_path, text, line, what):
    p = tmp_path / "bad_pairs.txt"
    p.write_text(text)
    with pytest.raises(DataFormatError) as info:
        read_pairs(p)
    msg = str(info.value)
    assert "bad_pairs.txt" in msg and f"line {line}:" in msg and what in msg


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_files(tmp_path, text):
    p = tmp_path / "empty.txt"
    p.write_text(text)
    for reader in (read_pairs, read_user_lines, read_movielens_ratings):
        with pytest.raises(DataFormatError, match="empty.txt.*empty"):
            reader(p)


# ------------------------------------------------------------------------------------------------
# user lines (S3-Rec)


def test_read_user_lines(tmp_path):
    p = tmp_path / "Beauty.txt"
    p.write_text("1 1 2 3 4 5\n2 6 7 2\n\n3 4 8\n")
    raw = read_user_lines(p)
    assert raw.user_ids.tolist() == [1, 2, 3]
    assert _seqs(raw) == [[1, 2, 3, 4, 5], [6, 7, 2], [4, 8]]
    assert raw.stats().items == 8


def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    """Notepad's UTF-8 files start with one; the pairs reader (pandas) always skipped it, the user-lines reader
    used to call the first id not an integer."""
    lines, pairs = tmp_path / "Beauty.txt", tmp_path / "Video.txt"
    lines.write_bytes(b"\xef\xbb\xbf1 1 2 3\n2 4 5\n")
    pairs.write_bytes(b"\xef\xbb\xbf1 1\n1 2\n2 3\n")
    assert read_user_lines(lines).user_ids.tolist() == [1, 2] and _seqs(read_user_lines(lines)) == [[1, 2, 3], [4, 5]]
    assert _seqs(read_pairs(pairs)) == [[1, 2], [3]]


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("1 1 2\n2 3 four\n", 2, "'four'"),
        ("1 1 2\n2\n", 2, "no items"),
        ("1 1 2\n2 3\n1 4\n", 3, "already appeared on line 1"),
    ],
)
def test_read_user_lines_malformed(tmp_path, text, line, what):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(DataFormatError) as info:
        read_user_lines(p)
    assert "bad.txt" in str(info.value) and f"line {line}:" in str(info.value) and what in str(info.value)


# ------------------------------------------------------------------------------------------------
# MovieLens u.data / u.item, LOCKER json


def test_read_movielens_ratings(tmp_path):
    p = tmp_path / "u.data"
    p.write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n")
    r = read_movielens_ratings(p)
    assert r.users.tolist() == [196, 186] and r.items.tolist() == [242, 302]
    assert r.ratings.tolist() == [3, 3] and r.timestamps.tolist() == [881250949, 891717742]
    p.write_text("196\t242\t3\t881250949\n186\t302\t3\n")
    with pytest.raises(DataFormatError, match=r"u.data, line 2: expected 4 fields"):
        read_movielens_ratings(p)


def test_read_movielens_titles_latin1(tmp_path):
    p = tmp_path / "u.item"
    p.write_bytes("1|Toy Story (1995)|01-Jan-1995||http://x|0\n2|Misérables, Les (1995)|x\n".encode("iso-8859-1"))
    assert read_movielens_titles(p) == {1: "Toy Story (1995)", 2: "Misérables, Les (1995)"}


def _write_locker(folder, train, val, test):
    folder.mkdir(exist_ok=True)
    for name, obj in (("train", train), ("val", val), ("test", test)):
        (folder / f"{name}.json").write_text(json.dumps(obj))


def test_read_locker_json(tmp_path):
    _write_locker(tmp_path, {"1": [3, 0], "0": [0, 1, 2], "10": [4]}, {"0": [5], "1": [1]}, {"0": [6], "1": [2]})
    raw = read_locker_json(tmp_path)
    assert raw.user_ids.tolist() == [1, 2, 11]  # ascending uid, +1
    assert _seqs(raw) == [[1, 2, 3, 6, 7], [4, 1, 2, 3], [5]]


def test_read_locker_json_malformed(tmp_path):
    _write_locker(tmp_path, {"0": [1, 2]}, {"0": [3]}, {"0": [4]})
    (tmp_path / "val.json").write_text('{"0": [3],\n "1": }')
    with pytest.raises(DataFormatError, match=r"val.json, line 2"):
        read_locker_json(tmp_path)
    _write_locker(tmp_path, {"0": [1, "b"]}, {"0": [3]}, {"0": [4]})
    with pytest.raises(DataFormatError, match="non-integer"):
        read_locker_json(tmp_path)
    _write_locker(tmp_path, {"0": [1, 2], "1": [5, -1]}, {"0": [3]}, {"0": [4]})
    with pytest.raises(DataFormatError, match="user '1' has a negative item id -1"):
        read_locker_json(tmp_path)                 # -1 + 1 would have become the padding id
    (tmp_path / "test.json").write_text("")
    with pytest.raises(DataFormatError, match="test.json.*empty"):
        read_locker_json(tmp_path)


# ------------------------------------------------------------------------------------------------
# preprocessing


def test_chronological_order_is_stable_for_ties():
    users = np.array([2, 1, 1, 2, 1, 1])
    times = np.array([5, 9, 3, 5, 3, 1])
    items = np.array([10, 11, 12, 13, 14, 15])
    order = chronological_order(users, times)
    # user 1: t=1 (15), t=3 tie: 12 before 14 (file order), t=9 (11); user 2: t=5 tie: 10 before 13
    assert items[order].tolist() == [15, 12, 14, 11, 10, 13]
    ids, seqs = group_by_user(users[order], items[order])
    assert ids.tolist() == [1, 2] and [s.tolist() for s in seqs] == [[15, 12, 14, 11], [10, 13]]


def test_k_core_is_iterative():
    # k=2: items c and d occur once. Dropping them leaves users 2 and 3 with one item each; dropping those
    # users leaves a and b with two users each. A single pass would keep users 2 and 3.
    pairs = [(1, "a"), (1, "b"), (2, "a"), (2, "c"), (3, "b"), (3, "d"), (4, "a"), (4, "b")]
    users = np.array([u for u, _ in pairs])
    items = np.array([i for _, i in pairs])
    mask = k_core(users, items, k=2)
    assert [p for p, m in zip(pairs, mask) if m] == [(1, "a"), (1, "b"), (4, "a"), (4, "b")]
    # the single-pass filter would not be a 2-core
    _, uc = np.unique(users, return_counts=True)
    _, ic = np.unique(items, return_counts=True)
    one_pass = np.isin(users, np.unique(users)[uc >= 2]) & np.isin(items, np.unique(items)[ic >= 2])
    assert np.unique(users[one_pass], return_counts=True)[1].min() < 2


def test_remap_contiguous_first_appearance():
    seqs = [np.array([30, 10, 30]), np.array([20, 10]), np.array([99])]
    new, old = remap_contiguous(seqs)
    assert [s.tolist() for s in new] == [[1, 2, 1], [3, 2], [4]]
    assert old.tolist() == [0, 30, 10, 20, 99]
    assert is_contiguous(new) and not is_contiguous(seqs)
    assert not is_contiguous([np.array([0, 1, 2])])


def _ml100k_fixture(folder):
    """u.data where the 5-core needs three passes and user 1 has timestamp ties."""
    rows = []
    for u in range(1, 7):  # users 1..6 rate items 1..5 (each item 6 ratings, each user 5)
        for i in range(1, 6):
            rows.append((u, i, 100 * u + (6 - i)))  # reverse chronological in the file
    rows[0:5] = [(1, 5, 7), (1, 3, 7), (1, 1, 7), (1, 2, 8), (1, 4, 1)]  # ties at t=7 keep file order 5, 3, 1
    rows += [(7, i, 1000 + i) for i in (1, 2, 3, 6)]  # item 6 is rare -> user 7 drops to 4 (pass 2)
    rows += [(u, 7, 2000 + u) for u in (1, 2, 3, 4, 7)]  # item 7 has 5 until user 7 goes (pass 3)
    folder.mkdir(parents=True)
    (folder / "u.data").write_text("".join(f"{u}\t{i}\t4\t{t}\n" for u, i, t in rows))
    titles = {i: f"Movie {i}" for i in range(1, 8)}
    titles[3] = "Misérables, Les (1995)"
    (folder / "u.item").write_bytes("".join(f"{i}|{t}|x\n" for i, t in titles.items()).encode("iso-8859-1"))


def test_a_malformed_titles_file_is_skipped_with_a_warning(tmp_path):
    """Titles only label items: a bad optional file is named in a warning and the data loads without them."""
    _ml100k_fixture(tmp_path / "ml-100k")
    (tmp_path / "ml-100k" / "u.item").write_bytes(b"1|Movie 1|x\nthree|Movie 3|x\n")
    with pytest.warns(UserWarning) as caught:
        ds = load_dataset("ml-100k", root=tmp_path)
    messages = " ".join(str(w.message) for w in caught)
    assert "u.item, line 2" in messages and "optional" in messages
    assert ds.item_titles is None and ds.stats().users == 6


def test_ml100k_preprocessing(tmp_path):
    _ml100k_fixture(tmp_path / "ml-100k")
    raw = file_statistics("ml-100k", root=tmp_path)
    assert (raw.users, raw.items, raw.interactions) == (7, 7, 39)
    with pytest.warns(UserWarning, match="sha256"):  # not the real u.data
        ds = load_dataset("ml-100k", root=tmp_path)
    st = ds.stats()
    assert (st.users, st.items, st.interactions, st.min_len) == (6, 5, 30, 5)
    # user 1 chronologically: item 4 (t=1), then the t=7 tie in file order 5, 3, 1, then item 2 (t=8)
    old = ds.meta["item_id_map"]
    assert old[ds.sequences[0]].tolist() == [4, 5, 3, 1, 2]
    assert ds.sequences[0].tolist() == [1, 2, 3, 4, 5]  # ids by first appearance
    assert old[ds.sequences[1]].tolist() == [5, 4, 3, 2, 1]  # user 2 rated in reverse file order
    assert ds.item_titles[3] == "Misérables, Les (1995)" and ds.item_titles[0] == "<pad>"
    assert ds.meta["k_core"] == 5 and ds.meta["sha256_verified"] is False


def test_an_ml1m_file_with_other_statistics_is_named_in_a_warning(tmp_path):
    """ML-1M has no published checksum, so its statistics are the only check: a partial or other file used to
    load silently and its runs were recorded as ML-1M results."""
    folder = tmp_path / "ml-1m"
    folder.mkdir()
    (folder / "ml-1m.txt").write_text("".join(f"{u} {i}\n" for u in range(1, 7) for i in range(1, 7)))
    with pytest.warns(UserWarning, match=r"ml-1m.txt has 6 users, 6 items and 36 interactions; the registry's "
                                         r"'ml-1m' file has 6,040, 3,416 and 999,611: a different or partial"):
        ds = load_dataset("ml-1m", root=tmp_path)
    assert ds.meta["file_stats_match_registry"] is False and ds.meta["sha256_verified"] is None
