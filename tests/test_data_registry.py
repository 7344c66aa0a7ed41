"""Registry completeness, data directory lookup, and the published statistics of the real files."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tutorial_lib.data import paths
from tutorial_lib.data.loading import file_statistics, load_dataset
from tutorial_lib.data.registry import DATASETS, FORMATS, dataset_names, get_spec
from tutorial_lib.errors import UnknownNameError

NAMES = ["ml-1m", "ml-100k", "beauty", "sports", "toys", "yelp", "video", "beauty-locker"]
FOLDERS = {
    "ml-1m": "ml-1m", "ml-100k": "ml-100k", "beauty": "Beauty", "sports": "Sports_and_Outdoors",
    "toys": "Toys_and_Games", "yelp": "Yelp", "video": "Video", "beauty-locker": "Beauty_LOCKER",
}

# The spec: /work/shared/data/README.md (users, items, interactions, avg len, min len of the files as published).
EXPECTED_FILE_STATS = {
    "ml-1m": (6_040, 3_416, 999_611, 165.50, 18),
    "ml-100k": (943, 1_682, 100_000, 106.04, 20),
    "beauty": (22_363, 12_101, 198_502, 8.88, 5),
    "sports": (35_598, 18_357, 296_337, 8.32, 5),
    "toys": (19_412, 11_924, 167_597, 8.63, 5),
    "yelp": (30_431, 20_033, 316_354, 10.40, 5),
    "video": (31_013, 23_715, 287_107, 9.26, 1),
    "beauty-locker": (40_226, 54_542, 353_962, 8.80, 5),
}


def test_exactly_the_registered_names():
    assert sorted(DATASETS) == sorted(NAMES)
    assert dataset_names() == list(DATASETS)


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_complete(name):
    spec = get_spec(name)
    assert spec.name == name and spec.title and spec.licence and spec.preprocessing
    assert spec.folder == FOLDERS[name]
    assert spec.format in FORMATS
    assert spec.files and spec.main_file.required
    for f in spec.required_files:
        assert f.urls, f"{name}/{f.filename} needs a public URL"
        assert all(u.startswith("https://") for u in f.urls + f.mirrors)
    for f in spec.files:
        if f.sha256 is not None:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256)
        else:
            assert "unknown" in f.note
    st = spec.file_stats
    assert (st.users, st.items, st.interactions, st.avg_len, st.min_len) == EXPECTED_FILE_STATS[name]


def test_known_checksums():
    assert get_spec("beauty").main_file.sha256.startswith("226cce9c")
    assert get_spec("sports").main_file.sha256.startswith("2a095e06")
    assert get_spec("toys").main_file.sha256.startswith("176c680c")
    assert get_spec("yelp").main_file.sha256.startswith("724b2191")
    assert get_spec("video").main_file.sha256.startswith("b7376fe2")
    locker = get_spec("beauty-locker")
    assert {f.filename for f in locker.files} == {"train.json", "val.json", "test.json", "umap.json", "smap.json"}
    assert all(f.sha256 for f in locker.files)
    assert all("AaronHeee/LOCKER" in f.urls[0] for f in locker.files)


def test_ml1m_has_no_checksum_but_is_checked_by_statistics():
    spec = get_spec("ml-1m")
    main = spec.main_file
    assert main.filename == "ml-1m.txt" and main.sha256 is None
    assert any("kang205/SASRec" in u and u.endswith("data/ml-1m.txt") for u in main.urls)
    assert spec.verify_by_stats
    assert spec.titles_file == "ml-1m_item_map.tsv" and not spec.file("ml-1m_item_map.tsv").required


def test_ml100k_is_a_zip_member_with_known_member_checksum():
    f = get_spec("ml-100k").main_file
    assert f.urls == ("https://files.grouplens.org/datasets/movielens/ml-100k.zip",)
    assert f.archive_member == "ml-100k/u.data" and f.archive_sha256 is None
    assert f.sha256 == "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490"
    assert "unknown" in f.note
    assert get_spec("ml-100k").titles_file == "u.item"


def test_get_spec_is_case_insensitive():
    assert get_spec("ML-1M") is get_spec("ml-1m")
    assert get_spec(" Beauty ") is get_spec("beauty")


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownNameError) as info:
        get_spec("netflix")
    msg = str(info.value)
    assert "netflix" in msg
    for name in NAMES:
        assert name in msg
    assert isinstance(info.value, KeyError)
    assert "did you mean" not in msg                     # nothing registered is close to it


@pytest.mark.parametrize("typed, meant", [
    ("MovieLens-1M", ["ml-1m"]),                        # words of the title
    ("ML_1M", ["ml-1m"]),                               # the same letters and digits
    ("movielens", ["ml-1m", "ml-100k"]),                # both MovieLens files, in registry order
    ("amazon beauty", ["beauty", "beauty-locker"]),
    ("sports_and_outdoors", ["sports"]),                # filler words ("and") are not needed
    ("Video Games", ["video"]),
    ("beuty", ["beauty"]),                              # a misspelling of a name
    ("sasrec", []),                                     # a title's bracketed provenance is not searched
])
def test_an_unknown_dataset_name_suggests_what_it_meant(typed, meant):
    from tutorial_lib.data.registry import dataset_titles
    from tutorial_lib.errors import close_names

    assert close_names(typed, dataset_names(), dataset_titles()) == meant
    with pytest.raises(UnknownNameError) as info:
        get_spec(typed)
    message = str(info.value)
    if meant:
        assert f"(did you mean {' or '.join(map(repr, meant))}?)" in message
    else:
        assert "did you mean" not in message


def test_data_dir_lookup_order(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ENV_VAR, str(tmp_path / "env"))
    assert paths.data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert paths.data_dir() == tmp_path / "env"
    monkeypatch.delenv(paths.ENV_VAR)
    default = paths.data_dir()
    assert default == paths.default_cache_dir()
    if paths.project_root() is not None:
        assert default == paths.project_root() / "data" / "cache"
    assert paths.dataset_folder("sports", tmp_path) == tmp_path / "Sports_and_Outdoors"
    assert paths.dataset_folder(get_spec("beauty-locker"), tmp_path) == tmp_path / "Beauty_LOCKER"


# ------------------------------------------------------------------------------------------------
# The real files (CI sets SEQREC_DATA_DIR=/work/shared/data); skipped only when they are absent.


@pytest.mark.parametrize("name", NAMES)
def test_file_statistics_match_the_data_readme(name, require_dataset):
    require_dataset(name)
    st = file_statistics(name)
    users, items, interactions, avg_len, min_len = EXPECTED_FILE_STATS[name]
    assert (st.users, st.items, st.interactions, round(st.avg_len, 2), st.min_len) == (
        users, items, interactions, avg_len, min_len)


def test_load_ml1m_with_titles(require_dataset):
    require_dataset("ml-1m")
    ds = load_dataset("ml-1m")
    st = ds.stats()
    assert (st.users, st.items, st.interactions) == (6_040, 3_416, 999_611)
    assert ds.n_items == 3_416
    assert ds.meta["file_stats_match_registry"] is True
    if ds.item_titles is not None:  # the titles file is optional
        assert ds.item_titles[1] == "Raiders of the Lost Ark (1981)"
        assert ds.title(1) == "Raiders of the Lost Ark (1981)"
    elif (paths.dataset_folder("ml-1m") / "ml-1m_item_map.tsv").exists():
        pytest.fail("ml-1m_item_map.tsv is present but no titles were loaded")
    again = load_dataset("ML-1M")  # memoised: same arrays, fresh container
    assert again is not ds and again.sequences[0] is ds.sequences[0]


def test_load_ml100k_processed(require_dataset):
    require_dataset("ml-100k")
    ds = load_dataset("ml-100k")
    st = ds.stats()
    # 5-core of the raw 943 / 1,682 / 100,000 (every user already has >= 20 ratings; 333 rare items go)
    assert (st.users, st.items, st.interactions, st.min_len) == (943, 1_349, 99_287, 19)
    assert ds.meta["sha256_verified"] is True
    if ds.item_titles is not None:
        old = ds.meta["item_id_map"]
        assert len(ds.item_titles) == ds.n_items + 1 and len(old) == ds.n_items + 1


def test_manifest_lists_every_dataset_and_checksum():
    readme = Path(__file__).resolve().parents[1] / "data" / "README.md"
    if not readme.is_file():
        pytest.skip(f"{readme} not found (not a source checkout)")
    text = readme.read_text(encoding="utf-8")
    for spec in DATASETS.values():
        assert f"`{spec.name}`" in text and f"{spec.folder}/" in text
        for f in spec.files:
            if f.sha256:
                assert f.sha256 in text, f"{spec.name}/{f.filename} sha256 missing from data/README.md"
            for url in f.urls + f.mirrors:
                source = "/".join(url.split("/")[2:5])  # host/owner/repo
                assert source in text, f"{url} (of {spec.name}) is not named in data/README.md"


def test_status_table_without_data(tmp_path):
    from tutorial_lib.data.loading import dataset_status, format_dataset_table

    rows = dataset_status(tmp_path)
    assert [r.name for r in rows] == NAMES and not any(r.available for r in rows)
    table = format_dataset_table(rows)
    assert table.splitlines()[0].split() == ["dataset", "available", "users", "items", "interactions", "avg",
                                             "len", "min", "len"]
    assert str(tmp_path / "Sports_and_Outdoors") in table
    assert "python -m tutorial_lib datasets --download yelp" in table


def test_status_table_with_data(require_dataset):
    from tutorial_lib.data.loading import dataset_status, format_dataset_table

    require_dataset("ml-100k")
    rows = {r.name: r for r in dataset_status()}
    r = rows["ml-100k"]
    assert r.available and r.file_stats.items == 1_682 and r.processed_stats.items == 1_349
    line = next(x for x in format_dataset_table(list(rows.values())).splitlines() if x.startswith("ml-100k"))
    assert line.split()[1:5] == ["yes", "943", "1,349", "99,287"]


def test_load_or_synthetic_falls_back_and_says_why(capsys):
    from tutorial_lib.data import load_or_synthetic

    data = load_or_synthetic("no-such-dataset", n_users=30, n_items=20, max_len=10)
    assert data.name == "synthetic" and len(data.sequences) == 30
    assert "no-such-dataset unavailable" in capsys.readouterr().err


def test_the_synthetic_data_is_pointed_to_its_generator():
    """`--dataset synthetic` works on the command line, so a learner tries load_dataset("synthetic") too."""
    with pytest.raises(UnknownNameError, match=r"unknown dataset 'synthetic' \(the synthetic data is generated, "
                                               r"not loaded: tutorial_lib.data.make_synthetic\(\) makes it\)"):
        load_dataset("synthetic")
