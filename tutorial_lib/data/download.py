"""Fetching dataset files: checksummed, atomic, resumable, never interactive.

Only :mod:`urllib` is used, so ``http(s)://`` and ``file://`` URLs both work. A download streams to
``<dest>.part``, resumes it with an HTTP ``Range`` request when it exists (starting afresh when the
server ignores the range), is verified, and only then is moved into place with :func:`os.replace`.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import shlex
import shutil
import sys
import urllib.error
import urllib.request
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path

from tutorial_lib.data.paths import ENV_VAR, data_dir, dataset_folder, default_cache_dir
from tutorial_lib.data.registry import DatasetSpec, FileSpec, get_spec
from tutorial_lib.errors import ChecksumError, DatasetUnavailableError

DEFAULT_TIMEOUT = 60.0
_CHUNK = 1 << 20
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError, ValueError)


def _hex_digest(path: str | os.PathLike, h) -> str:
    """Feed the file to the hash object ``h`` in chunks; return its hex digest."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sha256_of(path: str | os.PathLike) -> str:
    """Hex sha256 of a file."""
    return _hex_digest(path, hashlib.sha256())


def git_blob_of(path: str | os.PathLike) -> str:
    """The file's git blob id, as ``git hash-object`` prints it: SHA-1 of ``b"blob <size>\\0"`` + the bytes."""
    return _hex_digest(path, hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode()))


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _range_start(resp) -> int | None:
    """First byte of a ``206 Partial Content`` answer (from ``Content-Range: bytes a-b/n``)."""
    value = resp.headers.get("Content-Range", "") if resp.headers else ""
    try:
        unit, rest = value.split(" ", 1)
        return int(rest.split("-", 1)[0]) if unit.strip().lower() == "bytes" else None
    except ValueError:
        return None


def _fetch(url: str, part: Path, timeout: float, expected_size: int | None) -> bool:
    """Stream ``url`` into ``part``, resuming an existing partial file when the server allows.

    Returns True when an existing partial file was resumed (appended to).
    """
    offset = part.stat().st_size if part.is_file() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "tutorial_lib (python urllib)"})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # range not satisfiable: the partial file is complete or stale
            if expected_size is not None and offset == expected_size:
                return True
            part.unlink()
            return _fetch(url, part, timeout, expected_size)
        raise
    with resp:
        status = getattr(resp, "status", None)
        resume = bool(offset) and status == 206 and _range_start(resp) == offset
        with open(part, "ab" if resume else "wb") as fh:
            shutil.copyfileobj(resp, fh, _CHUNK)
    return resume


def _check(part: Path, dest: Path, url: str, sha256: str | None, expected_size: int | None,
           git_blob: str | None = None) -> str | None:
    """Problem with the downloaded ``part`` (size, sha256 or git blob id), or None when it is good."""
    size = part.stat().st_size
    if expected_size is not None and size != expected_size:
        return f"size mismatch for {dest.name} from {url}: expected {expected_size:,} bytes, got {size:,}"
    if sha256 is not None:
        actual = sha256_of(part)
        if actual.lower() != sha256.lower():
            return f"sha256 mismatch for {dest.name} from {url}: expected {sha256}, actual {actual}"
    if git_blob is not None:
        actual = git_blob_of(part)
        if actual.lower() != git_blob.lower():
            return f"git blob id mismatch for {dest.name} from {url}: expected {git_blob}, actual {actual}"
    return None


def download_file(
    urls: str | Sequence[str],
    dest: str | os.PathLike,
    sha256: str | None = None,
    expected_size: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    git_blob: str | None = None,
) -> Path:
    """Download the first URL of ``urls`` that answers into ``dest``; return ``dest``.

    Streams to ``dest.part`` (resuming it when present), verifies ``expected_size``, ``sha256`` and
    ``git_blob`` when given, then atomically renames it to ``dest``. Never prompts.

    Raises:
        ChecksumError: the download does not match (the partial file is deleted, ``dest`` untouched).
        DatasetUnavailableError: no URL could be fetched; the message says where to put the file by hand.
    """
    urls = (urls,) if isinstance(urls, str) else tuple(urls)
    dest = Path(dest)
    created = _make_folders(dest.parent)
    try:
        return _download_into(urls, dest, sha256, expected_size, timeout, git_blob)
    except BaseException:
        for folder in created:     # a failed first download leaves no empty folder behind (a partial file stays)
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return the ones created, deepest first."""
    created = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        created.append(path)
    folder.mkdir(parents=True, exist_ok=True)
    return created


def _download_into(urls: tuple[str, ...], dest: Path, sha256: str | None, expected_size: int | None,
                   timeout: float, git_blob: str | None) -> Path:
    """:func:`download_file`'s work, once ``dest``'s folder exists."""
    part = dest.with_name(dest.name + ".part")
    failures: list[str] = []
    for url in urls:
        try:
            resumed = _fetch(url, part, timeout, expected_size)
        except _NETWORK_ERRORS as exc:
            failures.append(f"{url}: {exc}")
            continue
        problem = _check(part, dest, url, sha256, expected_size, git_blob)
        if problem and resumed:  # the old partial file may be stale: one fresh attempt
            part.unlink()
            try:
                _fetch(url, part, timeout, expected_size)
            except _NETWORK_ERRORS as exc:
                failures.append(f"{url}: {exc}")
                continue
            problem = _check(part, dest, url, sha256, expected_size, git_blob)
        if problem:
            part.unlink(missing_ok=True)
            raise ChecksumError(
                f"{problem}.\nThe partial download was deleted and nothing was written to {dest}. "
                "Run the download again; if it fails the same way, the file at the source has changed: "
                "compare it with the checksums in data/README.md, or fetch a matching copy by hand into "
                f"{dest.parent}/."
            )
        os.replace(part, dest)
        return dest
    tried = "\n".join(f"  - {f}" for f in failures) or "  (no URL given)"
    raise DatasetUnavailableError(
        f"could not download {dest.name}. Tried:\n{tried}\n"
        f"Download it by hand from one of the URLs above and put it at {dest} (folder {dest.parent}/)."
        + (f" Expected sha256: {sha256}." if sha256 else "")
    )


def extract_member(
    archive: str | os.PathLike,
    member: str,
    dest: str | os.PathLike,
    sha256: str | None = None,
    expected_size: int | None = None,
    remedy: str = "run the download again",
) -> Path:
    """Extract ``member`` of the zip ``archive`` to ``dest`` (via ``dest.part``), verifying its sha256. A bad
    archive is deleted, and the error ends with ``remedy`` (how to get a good one)."""
    archive, dest = Path(archive), Path(dest)
    part = dest.with_name(dest.name + ".part")
    try:
        with zipfile.ZipFile(archive) as zf, zf.open(member) as src, open(part, "wb") as out:
            shutil.copyfileobj(src, out, _CHUNK)
    except (zipfile.BadZipFile, KeyError) as exc:
        part.unlink(missing_ok=True)
        archive.unlink(missing_ok=True)
        raise ChecksumError(
            f"{archive} is not a valid zip with member {member!r} ({exc}); the archive was deleted: {remedy}."
        ) from exc
    problem = _check(part, dest, f"{archive}:{member}", sha256, expected_size)
    if problem:
        part.unlink(missing_ok=True)
        archive.unlink(missing_ok=True)   # the bad file is not kept: a rerun downloads the archive afresh
        raise ChecksumError(f"{problem}.\nNothing was written to {dest}, and {archive} was deleted: {remedy}.")
    os.replace(part, dest)
    return dest


def _holds(archive: Path, member: str) -> bool:
    try:
        with zipfile.ZipFile(archive) as zf:
            return member in zf.namelist()
    except zipfile.BadZipFile:
        return False


def archive_path(f: FileSpec, folder: Path) -> Path | None:
    """Where the archive that holds ``f`` goes in the dataset's folder (``None`` for a file without one)."""
    if not (f.archive_member and f.urls):
        return None
    return Path(folder) / (f.archive_filename or Path(f.urls[0]).name)


def extract_placed_archives(folder: Path, missing: Sequence[FileSpec], dataset: str) -> bool:
    """Extract (and verify) the missing files whose archive was put in ``folder`` by hand, as the download
    instructions allow; the archive is kept (a bad one is deleted). Whether anything was extracted."""
    done = False
    for f in missing:
        archive = archive_path(f, folder)
        if archive is not None and archive.is_file():
            if not f.required and not _holds(archive, f.archive_member):
                continue                # an optional file (titles) the archive at hand lacks: skipped
            _log(f"extracting {f.archive_member} from {archive}")
            remedy = (f"it was placed by hand, so put a good copy there again (from {f.urls[0]}), or let the "
                      f"library fetch one: python -m tutorial_lib datasets --download {dataset}")
            extract_member(archive, f.archive_member, folder / f.filename, f.sha256, f.size, remedy)
            done = True
    return done


def file_sources(f: FileSpec) -> list[str]:
    """Where a registered file can be had: its URLs (an archive's as 'member M of URL (unzip it)'), then mirrors."""
    lines = [f"member {f.archive_member} of {u} (unzip it)" if f.archive_member else u for u in f.urls]
    return lines + list(f.mirrors)


def missing_files_message(spec: DatasetSpec, folder: Path, missing: Sequence[FileSpec],
                          download_failed: bool = False) -> str:
    """Instructions for a user whose dataset files are missing (which files, URLs, folder, commands).
    ``download_failed``: the download was just tried and failed, so the first remedy is to try it again later
    rather than to run the download command."""
    lines = [f"Dataset {spec.name!r} ({spec.title}) is not available: missing in {folder}/:"]
    root = folder.parent
    # a folder other than the one the default resolution finds (--data-dir, root=): the commands must name it
    named_root = f" --data-dir {shlex.quote(str(root))}" if root != data_dir() else ""
    if root.name == spec.folder:
        lines[0] += (f"\n  (the data directory {root} looks like the dataset's own folder: name the folder that holds "
                     f"'{spec.folder}/', i.e. {root.parent})")
    elif not root.is_dir() and root != default_cache_dir():     # a folder the user named, not the default cache
        lines[0] += f"\n  (the data directory {root} does not exist: is the path, or {ENV_VAR}, spelt right?)"
    for f in missing:
        where = folder / f.filename
        lines.append(f"  {f.filename}" + ("" if f.required else " (optional)")
                     + (f"  ({where} is a folder, not the file: move it away)" if where.is_dir() else ""))
        note = f.note.removeprefix("sha256 unknown: ")
        lines.append(f"      sha256: {f.sha256 or 'unknown (' + note + ')'}")
        if f.git_blob:
            lines.append(f"      git blob id: {f.git_blob} (`git hash-object {f.filename}` prints it)")
        srcs = file_sources(f)
        lines += [f"      from:   {s}" for s in srcs] or ["      from:   (no public URL; see data/README.md)"]
    lines += [
        "To make it available, do one of:",
        (f"  - run the download again once the source can be reached (a partial file resumes where it stopped);"
         if download_failed else
         f"  - run `python -m tutorial_lib datasets --download {spec.name}{named_root}` "
         f"(or call load_dataset({spec.name!r}{', root=' + repr(str(root)) if named_root else ''}, download=True));"),
        f"  - download the file(s) above by hand into {folder}/;",
        (f"  - give --data-dir (root= in Python) a data folder that already has a '{spec.folder}/' sub-folder with "
         "these files." if named_root else
         f"  - set {ENV_VAR} to a data folder that already has a '{spec.folder}/' sub-folder with these files."),
        f"Terms: {spec.licence}",
    ]
    return "\n".join(lines)


def fetch_file(f: FileSpec, folder: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT) -> Path:
    """Download one registered file into ``folder`` (through its archive when it has one)."""
    folder = Path(folder)
    dest = folder / f.filename
    if f.archive_member:
        archive = archive_path(f, folder)
        try:
            if not archive.is_file():
                _log(f"downloading {f.urls[0]} -> {archive}")
                download_file(f.urls, archive, f.archive_sha256, None, timeout)
            return extract_member(archive, f.archive_member, dest, f.sha256, f.size)
        except (DatasetUnavailableError, ChecksumError) as exc:
            if not f.mirrors:
                raise
            _log(f"{exc}\ntrying the mirrors of {f.filename}")
        urls: tuple[str, ...] = f.mirrors
    else:
        urls = f.urls + f.mirrors
    if not urls:
        raise DatasetUnavailableError(f"{f.filename} has no public download URL; {f.note}")
    _log(f"downloading {urls[0]} -> {dest}")
    return download_file(urls, dest, f.sha256, f.size, timeout, f.git_blob)


def verify_statistics(spec: DatasetSpec, folder: str | os.PathLike) -> None:
    """Check the published file's users/items/interactions against the registry (for unknown sha256)."""
    from tutorial_lib.data.readers import read_raw

    st = read_raw(spec.format, folder, spec.main_file.filename).stats()
    want = spec.file_stats
    got = (st.users, st.items, st.interactions)
    if got != (want.users, want.items, want.interactions):
        raise ChecksumError(
            f"{Path(folder) / spec.main_file.filename} has {got[0]:,} users / {got[1]:,} items / {got[2]:,} "
            f"interactions, expected {want.users:,} / {want.items:,} / {want.interactions:,} for {spec.name!r}."
        )


def ensure_dataset(
    name: str | DatasetSpec,
    root: str | os.PathLike | None = None,
    download: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    include_optional: bool | None = None,
) -> Path:
    """Return the dataset's folder once all its required files are there.

    With ``download=True`` missing required files are fetched and verified; a download without a known
    sha256 is checked by its statistics and deleted if they differ. Optional files (titles, id maps)
    that have a URL are fetched too when ``include_optional`` is True, or, by default (None), only
    in a call that has to download a required file anyway (so a complete hand-placed copy never
    triggers network access). With ``download=False`` a missing required file raises
    :class:`DatasetUnavailableError` with instructions.
    """
    spec = get_spec(name)
    folder = dataset_folder(spec, root)
    missing = [f for f in spec.files if not (folder / f.filename).is_file()]
    if any(f.required for f in missing) and extract_placed_archives(folder, missing, spec.name):
        missing = [f for f in spec.files if not (folder / f.filename).is_file()]
    missing_required = [f for f in missing if f.required]
    if not download:
        if missing_required:
            raise DatasetUnavailableError(missing_files_message(spec, folder, missing_required))
        return folder
    if include_optional is None:
        include_optional = bool(missing_required)
    archives: set[Path] = set()
    for f in missing:
        if not f.required and (not include_optional or not (f.urls or f.mirrors)):
            continue
        if not f.urls and not f.mirrors:
            raise DatasetUnavailableError(missing_files_message(spec, folder, [f]))
        try:
            fetch_file(f, folder, timeout)
        except DatasetUnavailableError as exc:
            if f.required:
                message = missing_files_message(spec, folder, [f], download_failed=True)
                raise DatasetUnavailableError(f"{exc}\n\n{message}") from exc
            warnings.warn(f"optional file {f.filename} of {spec.name!r} could not be downloaded: {exc}",
                          stacklevel=2)
            continue
        except (ChecksumError, OSError) as exc:
            if f.required:
                raise
            warnings.warn(f"optional file {f.filename} of {spec.name!r} was not stored: {exc}", stacklevel=2)
            continue
        if f.archive_member:
            archives.add(archive_path(f, folder))
        if f.required and f.sha256 is None and spec.verify_by_stats and f is spec.main_file:
            try:
                verify_statistics(spec, folder)
            except Exception:
                (folder / f.filename).unlink(missing_ok=True)
                raise
    for archive in archives:  # every member is extracted (and verified): the archive is not needed
        archive.unlink(missing_ok=True)
    return folder
