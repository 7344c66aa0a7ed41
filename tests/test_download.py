"""Downloads through file:// URLs and a loopback HTTP server (Range requests, resume)."""
from __future__ import annotations

import hashlib
import http.server
import threading
import zipfile
from pathlib import Path

import pytest

from tutorial_lib.data import registry
from tutorial_lib.data.download import download_file, ensure_dataset, git_blob_of, sha256_of
from tutorial_lib.data.registry import DatasetSpec, FileSpec, FileStats, get_spec
from tutorial_lib.errors import ChecksumError, DatasetUnavailableError

PAYLOAD = bytes(range(256)) * 400 + b"tail"  # 102,404 bytes
SHA = hashlib.sha256(PAYLOAD).hexdigest()


def _part(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


@pytest.fixture
def src(tmp_path) -> Path:
    p = tmp_path / "src" / "file.bin"
    p.parent.mkdir()
    p.write_bytes(PAYLOAD)
    return p


# ------------------------------------------------------------------------------------------------
# file:// URLs


def test_download_with_checksum(tmp_path, src):
    dest = tmp_path / "out" / "file.bin"
    assert download_file(src.as_uri(), dest, sha256=SHA, expected_size=len(PAYLOAD)) == dest
    assert dest.read_bytes() == PAYLOAD
    assert not _part(dest).exists()
    assert sha256_of(dest) == SHA


def test_checksum_mismatch_leaves_nothing(tmp_path, src):
    dest = tmp_path / "out" / "file.bin"
    with pytest.raises(ChecksumError) as info:
        download_file(src.as_uri(), dest, sha256="0" * 64)
    msg = str(info.value)
    assert "0" * 64 in msg and SHA in msg and "file.bin" in msg
    assert not dest.exists() and not _part(dest).exists()


def test_git_blob_id_is_what_git_hash_object_prints(tmp_path):
    hello = tmp_path / "hello.txt"
    hello.write_bytes(b"hello\n")
    assert git_blob_of(hello) == "ce013625030ba8dba906f756967f9e9ca394464a"   # git hash-object of "hello\n"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert git_blob_of(empty) == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"   # git's empty blob


def test_download_verified_by_git_blob_id(tmp_path, src):
    blob = hashlib.sha1(b"blob %d\0" % len(PAYLOAD) + PAYLOAD).hexdigest()
    dest = tmp_path / "out" / "file.bin"
    assert download_file(src.as_uri(), dest, git_blob=blob).read_bytes() == PAYLOAD
    other = tmp_path / "other" / "file.bin"
    with pytest.raises(ChecksumError, match=f"git blob id mismatch.*expected {'1' * 40}, actual {blob}"):
        download_file(src.as_uri(), other, git_blob="1" * 40)
    assert not other.exists() and not _part(other).exists()


def test_ml_1m_download_is_checked_against_the_original_s_git_blob():
    f = get_spec("ml-1m").main_file
    assert f.sha256 is None and f.git_blob == "9ab8e3edb8742f8d8cc4911e3dee25e82a6fcc24"


def test_size_mismatch_leaves_nothing(tmp_path, src):
    dest = tmp_path / "file.bin"
    with pytest.raises(ChecksumError):
        download_file(src.as_uri(), dest, expected_size=len(PAYLOAD) + 1)
    assert not dest.exists() and not _part(dest).exists()


def test_urls_are_tried_in_order(tmp_path, src):
    dest = tmp_path / "file.bin"
    missing = (tmp_path / "nowhere" / "file.bin").as_uri()
    download_file([missing, src.as_uri()], dest, sha256=SHA)
    assert dest.read_bytes() == PAYLOAD


def test_unreachable_names_file_urls_and_folder(tmp_path):
    dest = tmp_path / "data" / "Beauty" / "Beauty.txt"
    urls = [(tmp_path / "a.txt").as_uri(), (tmp_path / "b.txt").as_uri()]
    with pytest.raises(DatasetUnavailableError) as info:
        download_file(urls, dest, sha256=SHA)
    msg = str(info.value)
    assert "Beauty.txt" in msg and urls[0] in msg and urls[1] in msg and str(dest.parent) in msg
    assert not dest.exists()
    assert not (tmp_path / "data").exists()          # the folders made for it are gone again


def test_a_failed_download_removes_only_the_empty_folders_it_made(tmp_path, src):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "other.txt").write_text("kept")
    with pytest.raises(ChecksumError):
        download_file(src.as_uri(), tmp_path / "data" / "Beauty" / "deep" / "file.bin", sha256="0" * 64)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["other.txt"]
    existing = tmp_path / "data" / "Toys"
    existing.mkdir()
    with pytest.raises(DatasetUnavailableError):
        download_file((tmp_path / "nowhere.txt").as_uri(), existing / "file.bin")
    assert existing.is_dir()                           # it was there before: kept, though empty


def test_file_url_ignores_range_and_restarts(tmp_path, src):
    dest = tmp_path / "file.bin"
    _part(dest).write_bytes(b"garbage that is not a prefix")
    download_file(src.as_uri(), dest, sha256=SHA)
    assert dest.read_bytes() == PAYLOAD and not _part(dest).exists()


# ------------------------------------------------------------------------------------------------
# a loopback HTTP server with Range support


class _Handler(http.server.BaseHTTPRequestHandler):
    payload = PAYLOAD
    honour_range = True
    log: list[tuple[str | None, int]] = []

    def do_GET(self):  # noqa: N802 (http.server API)
        rng = self.headers.get("Range")
        data, start = self.payload, 0
        if rng and self.honour_range:
            start = int(rng.split("=", 1)[1].split("-", 1)[0])
            if start >= len(data):
                self.log.append((rng, 416))
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.log.append((rng, 206))
        else:
            self.send_response(200)
            self.log.append((rng, 200))
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")   # a machine's proxy must not get the loopback requests
    handler = type("H", (_Handler,), {"log": [], "honour_range": True})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/file.bin"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_http_download(tmp_path, server):
    handler, url = server
    dest = tmp_path / "file.bin"
    download_file(url, dest, sha256=SHA, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert handler.log == [(None, 200)]


def test_http_resume_from_partial_file(tmp_path, server):
    handler, url = server
    dest = tmp_path / "file.bin"
    _part(dest).write_bytes(PAYLOAD[:40_000])  # an interrupted earlier download
    download_file(url, dest, sha256=SHA, expected_size=len(PAYLOAD), timeout=5)
    assert dest.read_bytes() == PAYLOAD and not _part(dest).exists()
    assert handler.log == [("bytes=40000-", 206)]  # only the rest was transferred


def test_http_server_ignoring_range_restarts(tmp_path, server):
    handler, url = server
    handler.honour_range = False
    dest = tmp_path / "file.bin"
    _part(dest).write_bytes(PAYLOAD[:40_000])
    download_file(url, dest, sha256=SHA, timeout=5)
    assert dest.read_bytes() == PAYLOAD  # not 40,000 bytes too many
    assert handler.log == [("bytes=40000-", 200)]


def test_http_stale_partial_file_is_redownloaded(tmp_path, server):
    handler, url = server
    dest = tmp_path / "file.bin"
    _part(dest).write_bytes(b"x" * 1000)  # not a prefix of the file: resume gives a bad checksum
    download_file(url, dest, sha256=SHA, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert handler.log == [("bytes=1000-", 206), (None, 200)]


def test_http_complete_partial_file(tmp_path, server):
    handler, url = server
    dest = tmp_path / "file.bin"
    _part(dest).write_bytes(PAYLOAD)  # finished, but not yet renamed
    download_file(url, dest, sha256=SHA, expected_size=len(PAYLOAD), timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert handler.log == [(f"bytes={len(PAYLOAD)}-", 416)]


# ------------------------------------------------------------------------------------------------
# ensure_dataset


def test_missing_dataset_gives_instructions(tmp_path, monkeypatch):
    """The commands name the data folder when it was given explicitly (--data-dir, root=), which overrides
    SEQREC_DATA_DIR; found through SEQREC_DATA_DIR, the plain command and the variable are the remedy."""
    monkeypatch.delenv("SEQREC_DATA_DIR", raising=False)
    with pytest.raises(DatasetUnavailableError) as info:
        ensure_dataset("beauty", root=tmp_path, download=False)
    msg = str(info.value)
    spec = get_spec("beauty")
    assert "Beauty.txt" in msg and spec.main_file.urls[0] in msg
    assert str(tmp_path / "Beauty") in msg
    assert f"python -m tutorial_lib datasets --download beauty --data-dir {tmp_path}`" in msg
    assert f"root={str(tmp_path)!r}" in msg and "give --data-dir" in msg and "SEQREC_DATA_DIR" not in msg
    assert not (tmp_path / "Beauty").exists()  # nothing created without download=True

    monkeypatch.setenv("SEQREC_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetUnavailableError) as info:
        ensure_dataset("beauty", download=False)
    msg = str(info.value)
    assert "python -m tutorial_lib datasets --download beauty`" in msg and "--data-dir" not in msg
    assert "set SEQREC_DATA_DIR" in msg


def test_a_folder_where_the_data_file_goes_is_named(tmp_path):
    """It used to be reported as a missing file, with download instructions only."""
    (tmp_path / "Beauty" / "Beauty.txt").mkdir(parents=True)
    with pytest.raises(DatasetUnavailableError) as info:
        ensure_dataset("beauty", root=tmp_path, download=False)
    assert f"{tmp_path / 'Beauty' / 'Beauty.txt'} is a folder, not the file" in str(info.value)


def test_missing_files_names_the_required_files_only(tmp_path):
    from tutorial_lib.data.loading import missing_files

    assert missing_files("beauty", tmp_path) == ("Beauty.txt",)
    (tmp_path / "Beauty").mkdir()
    (tmp_path / "Beauty" / "Beauty.txt").write_text("1 1 2\n")
    assert missing_files("BEAUTY", tmp_path) == ()          # present; its contents are checked when loaded
    assert set(missing_files("beauty-locker", tmp_path)) == {"train.json", "val.json", "test.json"}


def test_missing_locker_lists_required_files(tmp_path):
    (tmp_path / "Beauty_LOCKER").mkdir()
    (tmp_path / "Beauty_LOCKER" / "train.json").write_text("{}")
    with pytest.raises(DatasetUnavailableError) as info:
        ensure_dataset("beauty-locker", root=tmp_path)
    msg = str(info.value)
    assert "val.json" in msg and "test.json" in msg and "train.json" not in msg.split("\n")[1]


def _fake(monkeypatch, spec: DatasetSpec) -> None:
    monkeypatch.setitem(registry.DATASETS, spec.name, spec)


def test_ensure_dataset_downloads_and_verifies(tmp_path, monkeypatch):
    src = tmp_path / "pub" / "tiny.txt"
    src.parent.mkdir()
    src.write_bytes(b"1 1 2 3\n2 2 3\n")
    sha = sha256_of(src)
    spec = DatasetSpec("tiny", "Tiny", "Tiny", (FileSpec("tiny.txt", (src.as_uri(),), sha),),
                       registry.USER_LINES, "none", FileStats(2, 3, 5, 2.5, 2))
    _fake(monkeypatch, spec)
    root = tmp_path / "data"
    folder = ensure_dataset("TINY", root=root, download=True)
    assert folder == root / "Tiny" and (folder / "tiny.txt").read_bytes() == src.read_bytes()
    assert ensure_dataset("tiny", root=root) == folder  # now present without downloading


def test_failed_download_does_not_suggest_the_same_command(tmp_path, monkeypatch):
    gone = (tmp_path / "pub" / "tiny.txt").as_uri()           # unreachable, as when offline
    spec = DatasetSpec("tiny", "Tiny", "Tiny", (FileSpec("tiny.txt", (gone,), "0" * 64),),
                       registry.USER_LINES, "none", FileStats(2, 3, 5, 2.5, 2))
    _fake(monkeypatch, spec)
    with pytest.raises(DatasetUnavailableError) as info:
        ensure_dataset("tiny", root=tmp_path / "data", download=True)
    msg = str(info.value)
    assert gone in msg and str(tmp_path / "data" / "Tiny") in msg and "give --data-dir" in msg
    assert "datasets --download tiny" not in msg and "download again once the source can be reached" in msg


def test_ensure_dataset_extracts_archive_member(tmp_path, monkeypatch):
    archive = tmp_path / "pub" / "bundle.zip"
    archive.parent.mkdir()
    content = b"1\t1\t5\t10\n1\t2\t3\t11\n"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("bundle/u.data", content)
        zf.writestr("bundle/u.item", "1|One|\n2|Two|\n")
    f = FileSpec("u.data", (archive.as_uri(),), hashlib.sha256(content).hexdigest(),
                 archive_member="bundle/u.data", archive_filename="bundle.zip")
    titles = FileSpec("u.item", (archive.as_uri(),), None, required=False,
                      archive_member="bundle/u.item", archive_filename="bundle.zip")
    spec = DatasetSpec("zipped", "Zipped", "zipped", (f, titles), registry.MOVIELENS, "none",
                       FileStats(1, 2, 2, 2.0, 2), titles_file="u.item")
    _fake(monkeypatch, spec)
    folder = ensure_dataset("zipped", root=tmp_path / "data", download=True)
    assert (folder / "u.data").read_bytes() == content
    assert (folder / "u.item").read_text() == "1|One|\n2|Two|\n"
    assert not (folder / "bundle.zip").exists()  # removed once every member is extracted


def test_an_archive_put_in_place_by_hand_is_extracted_without_downloading(tmp_path, monkeypatch):
    """The failed-download message offers "put the archive there": loading then unzips it, offline."""
    content = b"1\t1\t5\t10\n1\t2\t3\t11\n"
    folder = tmp_path / "data" / "zipped"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "bundle.zip", "w") as zf:
        zf.writestr("bundle/u.data", content)
    unreachable = (tmp_path / "nowhere" / "bundle.zip").as_uri()
    f = FileSpec("u.data", (unreachable,), hashlib.sha256(content).hexdigest(), archive_member="bundle/u.data",
                 archive_filename="bundle.zip")
    titles = FileSpec("u.item", (unreachable,), None, required=False, archive_member="bundle/u.item",
                      archive_filename="bundle.zip")                 # optional, and not in this copy of the archive
    _fake(monkeypatch, DatasetSpec("zipped", "Zipped", "zipped", (f, titles), registry.MOVIELENS, "none",
                                   FileStats(1, 2, 2, 2.0, 2)))
    from tutorial_lib.data.loading import missing_files
    assert missing_files("zipped", tmp_path / "data") == ()          # the archive counts as the file
    assert ensure_dataset("zipped", root=tmp_path / "data") == folder
    assert (folder / "u.data").read_bytes() == content and (folder / "bundle.zip").exists()   # the archive is kept


@pytest.mark.parametrize("bad", ["checksum", "not a zip"])
def test_a_bad_archive_put_in_place_by_hand_is_deleted_with_advice_that_works_offline(tmp_path, monkeypatch, bad):
    """A hand-placed archive that does not match is not kept (like a downloaded one), and the error says to place
    a good copy again or fetch one, not to "run the download again": no download was run."""
    folder = tmp_path / "data" / "zipped"
    folder.mkdir(parents=True)
    if bad == "checksum":
        with zipfile.ZipFile(folder / "bundle.zip", "w") as zf:
            zf.writestr("bundle/u.data", "1\t1\t5\t10\n")
    else:
        (folder / "bundle.zip").write_bytes(b"an html error page")
    source = (tmp_path / "nowhere" / "bundle.zip").as_uri()
    f = FileSpec("u.data", (source,), "f" * 64, archive_member="bundle/u.data", archive_filename="bundle.zip")
    _fake(monkeypatch, DatasetSpec("zipped", "Zipped", "zipped", (f,), registry.MOVIELENS, "none",
                                   FileStats(1, 1, 1, 1.0, 1)))
    with pytest.raises(ChecksumError) as info:
        ensure_dataset("zipped", root=tmp_path / "data")
    msg = str(info.value)
    assert "placed by hand, so put a good copy there again" in msg and source in msg
    assert "datasets --download zipped" in msg and "run the download again" not in msg
    assert not (folder / "bundle.zip").exists() and not (folder / "u.data").exists()


def test_archive_member_checksum_mismatch(tmp_path, monkeypatch):
    archive = tmp_path / "pub" / "bundle.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("bundle/u.data", "1\t1\t5\t10\n")
    f = FileSpec("u.data", (archive.as_uri(),), "f" * 64, archive_member="bundle/u.data",
                 archive_filename="bundle.zip")
    _fake(monkeypatch, DatasetSpec("zipped", "Zipped", "zipped", (f,), registry.MOVIELENS, "none",
                                   FileStats(1, 1, 1, 1.0, 1)))
    with pytest.raises(ChecksumError):
        ensure_dataset("zipped", root=tmp_path / "data", download=True)
    folder = tmp_path / "data" / "zipped"
    assert not (folder / "u.data").exists() and not (folder / "u.data.part").exists()
    assert not (folder / "bundle.zip").exists()      # the bad archive is not kept: a rerun fetches it afresh


def test_a_bad_archive_member_falls_back_to_the_mirror(tmp_path, monkeypatch):
    archive, mirror = tmp_path / "pub" / "bundle.zip", tmp_path / "mirror" / "u.data"
    archive.parent.mkdir()
    mirror.parent.mkdir()
    good = b"1\t1\t5\t10\n"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("bundle/u.data", "9\t9\t9\t9\n")             # not the published bytes
    mirror.write_bytes(good)
    f = FileSpec("u.data", (archive.as_uri(),), hashlib.sha256(good).hexdigest(), archive_member="bundle/u.data",
                 archive_filename="bundle.zip", mirrors=(mirror.as_uri(),))
    _fake(monkeypatch, DatasetSpec("zipped", "Zipped", "zipped", (f,), registry.MOVIELENS, "none",
                                   FileStats(1, 1, 1, 1.0, 1)))
    folder = ensure_dataset("zipped", root=tmp_path / "data", download=True)
    assert (folder / "u.data").read_bytes() == good and not (folder / "bundle.zip").exists()


def test_unknown_checksum_is_verified_by_statistics(tmp_path, monkeypatch):
    src = tmp_path / "pub" / "pairs.txt"
    src.parent.mkdir()
    src.write_text("1 1\n1 2\n2 1\n")
    good = DatasetSpec("pairs", "Pairs", "pairs", (FileSpec("pairs.txt", (src.as_uri(),), None),),
                       registry.PAIRS, "none", FileStats(2, 2, 3, 1.5, 1), verify_by_stats=True)
    _fake(monkeypatch, good)
    assert (ensure_dataset("pairs", root=tmp_path / "ok", download=True) / "pairs.txt").exists()
    bad = DatasetSpec("pairs", "Pairs", "pairs", good.files, registry.PAIRS, "none",
                      FileStats(2, 2, 4, 2.0, 2), verify_by_stats=True)
    _fake(monkeypatch, bad)
    with pytest.raises(ChecksumError, match="3 interactions"):
        ensure_dataset("pairs", root=tmp_path / "bad", download=True)
    assert not (tmp_path / "bad" / "pairs" / "pairs.txt").exists()


def test_download_failure_through_ensure_dataset(tmp_path, monkeypatch):
    f = FileSpec("gone.txt", ((tmp_path / "gone.txt").as_uri(),), None)
    _fake(monkeypatch, DatasetSpec("gone", "Gone", "Gone", (f,), registry.USER_LINES, "none",
                                   FileStats(1, 1, 1, 1.0, 1)))
    with pytest.raises(DatasetUnavailableError) as info:
        ensure_dataset("gone", root=tmp_path / "data", download=True)
    assert str(tmp_path / "data" / "Gone") in str(info.value)


def test_the_datasets_command_downloads_the_others_when_one_fails(tmp_path, monkeypatch, capsys):
    """`datasets --download a b` used to stop at the first failure and never try the second."""
    from tutorial_lib.cli import main

    gone = FileSpec("gone.txt", ((tmp_path / "gone.txt").as_uri(),), "0" * 64)
    _fake(monkeypatch, DatasetSpec("gone", "Gone", "Gone", (gone,), registry.USER_LINES, "none",
                                   FileStats(1, 1, 1, 1.0, 1)))
    src = tmp_path / "pub" / "tiny.txt"
    src.parent.mkdir()
    src.write_bytes(b"1 1 2 3\n2 2 3\n")
    _fake(monkeypatch, DatasetSpec("tiny", "Tiny", "Tiny", (FileSpec("tiny.txt", (src.as_uri(),), sha256_of(src)),),
                                   registry.USER_LINES, "none", FileStats(2, 3, 5, 2.5, 2)))
    root = tmp_path / "data"
    assert main(["datasets", "--data-dir", str(root), "--download", "gone", "tiny"]) == 2
    out, err = capsys.readouterr()
    assert (root / "Tiny" / "tiny.txt").read_bytes() == src.read_bytes() and "tiny: ready in" in out
    assert "could not download gone.txt" in err and "not downloaded: gone" in err
    assert main(["datasets", "--data-dir", str(root), "--download", "tiny", "nosuch"]) == 2   # names first
    assert "unknown dataset 'nosuch'" in capsys.readouterr().err
