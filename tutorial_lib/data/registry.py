"""Registry of the public datasets the course uses: where each file comes from, its checksum,
its format, its licence and the statistics the papers publish.

Nothing here touches the disk or the network; :mod:`tutorial_lib.data.download` and
:mod:`tutorial_lib.data.loading` act on these specifications.
"""
from __future__ import annotations

from dataclasses import dataclass

from tutorial_lib.errors import UnknownNameError

# Formats understood by tutorial_lib.data.readers
PAIRS = "pairs"  # SASRec: one `user item` per line, grouped by user, chronological
USER_LINES = "user-lines"  # S3-Rec: one line per user `user i1 i2 ... in`, chronological
MOVIELENS = "movielens-ratings"  # GroupLens u.data: `user \t item \t rating \t timestamp`
LOCKER_JSON = "locker-json"  # LOCKER: train/val/test.json {"uid": [sid, ...]}, 0-based ids
FORMATS = (PAIRS, USER_LINES, MOVIELENS, LOCKER_JSON)

_S3REC = "https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/e6c774da92dba847b00ac89e8bfc5c55cc44d378/data"
_ICLREC = "https://raw.githubusercontent.com/salesforce/ICLRec/4afb54a036ebbf4166ed5858122d89c0642251a7/data"
_SASREC = "https://raw.githubusercontent.com/kang205/SASRec/641c378fcfac265ea8d1e5fe51d4d53eb892d1b4/data"
_LOCKER = "https://raw.githubusercontent.com/AaronHeee/LOCKER/7b2ff65235f634cd8b7f02ef5b18faafd22fa5c0/data/Beauty"
_ML100K_ZIP = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
_ML100K_MIRROR = (
    "https://raw.githubusercontent.com/deipss/BERT4Rec-VAE-Pytorch/4c1aaecb8c6923f17f9ea4bf1d0ad5950f223877/Data/ml-100k"
)

_MOVIELENS_LICENCE = (
    "GroupLens usage licence (see the README shipped with the data): research use only, no redistribution "
    "without permission, cite Harper & Konstan (2015)."
)
_AMAZON_LICENCE = (
    "Amazon review data (McAuley et al., 2014 version): research use under its terms; do not redistribute."
)
_YELP_LICENCE = "Yelp Open Dataset terms (research/academic use); do not redistribute."


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset and where to fetch it.

    Attributes:
        filename: name of the file inside the dataset folder.
        urls: public sources, tried in order. When ``archive_member`` is set they point to an archive
            (zip) that contains the file; otherwise they point to the file itself.
        sha256: published/verified sha256 of the file itself (for archives: of the extracted member),
            ``None`` when unknown.
        size: size in bytes when known.
        note: provenance and anything unusual (e.g. why the checksum is unknown).
        required: ``False`` for files that only add extras (titles, id maps).
        archive_member: path of the file inside the archive at ``urls``.
        archive_filename: local name under which the archive is kept in the dataset folder.
        archive_sha256: sha256 of the archive itself, ``None`` when unknown (the member is verified).
        mirrors: direct copies of the file itself, tried after the archive ``urls``.
        git_blob: the file's git blob id (``git hash-object FILE``: SHA-1 of ``b"blob <size>\\0"`` + the bytes)
            where only that is published (the file lives in a git repository whose tree names it); a download is
            verified against it like a checksum.
    """

    filename: str
    urls: tuple[str, ...]
    sha256: str | None
    size: int | None = None
    note: str = ""
    required: bool = True
    archive_member: str | None = None
    archive_filename: str | None = None
    archive_sha256: str | None = None
    mirrors: tuple[str, ...] = ()
    git_blob: str | None = None


@dataclass(frozen=True)
class FileStats:
    """Statistics of a data file as published (before any preprocessing of ours)."""

    users: int
    items: int
    interactions: int
    avg_len: float
    min_len: int


@dataclass(frozen=True)
class PaperStats:
    """Dataset statistics as printed in a paper table (``None`` where the paper gives none)."""

    source: str  # e.g. "FPARec, Table 2"
    users: int | None
    items: int | None
    interactions: str | None  # as printed, e.g. "0.20M" or "353,962"
    avg_len: float | None
    note: str = ""


@dataclass(frozen=True)
class DatasetSpec:
    """Everything the library knows about one registered dataset."""

    name: str
    title: str
    folder: str  # sub-folder of the data directory
    files: tuple[FileSpec, ...]
    format: str
    licence: str
    file_stats: FileStats  # of the published file(s), see data/README.md
    paper_stats: tuple[PaperStats, ...] = ()
    papers: tuple[str, ...] = ()  # course papers that use this version
    preprocessing: str = ""  # what load_dataset does on top of the file
    titles_file: str | None = None  # optional file with item titles
    verify_by_stats: bool = False  # no sha256 known: check a download by its statistics
    notes: str = ""

    @property
    def main_file(self) -> FileSpec:
        """The first required file (the one that holds the interactions)."""
        return next(f for f in self.files if f.required)

    @property
    def required_files(self) -> tuple[FileSpec, ...]:
        """The files the dataset cannot be loaded without, in order."""
        return tuple(f for f in self.files if f.required)

    def file(self, filename: str) -> FileSpec:
        """The :class:`FileSpec` called ``filename``."""
        for f in self.files:
            if f.filename == filename:
                return f
        raise UnknownNameError(f"file of dataset {self.name}", filename, [f.filename for f in self.files])


def _s3rec(name: str, key: str, title: str, sha256: str, size: int, stats: FileStats, paper: PaperStats,
           licence: str, origin: str) -> DatasetSpec:
    fn = f"{name}.txt"
    return DatasetSpec(
        name=key,
        title=title,
        folder=name,
        files=(
            FileSpec(
                fn,
                (f"{_S3REC}/{fn}", f"{_ICLREC}/{fn}"),
                sha256,
                size,
                note=f"RUCAIBox/CIKM2020-S3Rec data/{fn} (byte-identical copy in salesforce/ICLRec). {origin}",
            ),
        ),
        format=USER_LINES,
        licence=licence,
        file_stats=stats,
        paper_stats=(paper,),
        papers=("FPARec", "S3-Rec", "ICLRec"),
        preprocessing="none: the file is already a 5-core with contiguous 1-based ids (S3-Rec preprocessing).",
    )


DATASETS: dict[str, DatasetSpec] = {}


def _register(spec: DatasetSpec) -> None:
    DATASETS[spec.name] = spec


_register(
    DatasetSpec(
        name="ml-1m",
        title="MovieLens 1M (SASRec version)",
        folder="ml-1m",
        files=(
            FileSpec(
                "ml-1m.txt",
                (
                    f"{_SASREC}/ml-1m.txt",
                    "https://raw.githubusercontent.com/kang205/SASRec/master/data/ml-1m.txt",
                ),
                None,
                None,
                note=(
                    "sha256 unknown: the public original (kang205/SASRec data/ml-1m.txt, about 9.05 MB) could not "
                    "be checksummed here; the course's development copy is a faithful reconstruction with a "
                    "different sha256 (data/README.md). A download is verified by the original's git blob id, "
                    "which its repositories' trees publish, and by its statistics (6,040 users / 3,416 items / "
                    "999,611 interactions)."
                ),
                git_blob="9ab8e3edb8742f8d8cc4911e3dee25e82a6fcc24",
            ),
            FileSpec(
                "ml-1m_item_map.tsv",
                (),
                "807919bd60ea708dbf5a583446a4e4581d6d83e01741001e9fc2e6236d1fe8ef",
                167_837,
                required=False,
                note=(
                    "optional titles: columns item_id, MovieID, id_certain, title, genres. Built for the course "
                    "from movies.dat and the id reconstruction (ml-1m/SOURCE.md); not published anywhere, so it "
                    "has no download URL."
                ),
            ),
        ),
        format=PAIRS,
        licence=_MOVIELENS_LICENCE,
        file_stats=FileStats(6_040, 3_416, 999_611, 165.50, 18),
        paper_stats=(
            PaperStats("FPARec, Table 2", 6_040, 3_416, "1.00M", 165.50),
            PaperStats("LOCKER, Table 2", 6_040, 3_416, "1,000,000", 165.56, "LOCKER rounds interactions"),
            PaperStats("SASRec, dataset statistics table", 6_040, 3_416, "1.0M", None),
        ),
        papers=("SASRec", "FPARec/PARec", "LOCKER"),
        preprocessing=(
            "none: SASRec already kept movies with >= 5 ratings and numbered items by first appearance "
            "(ids contiguous from 1); lines are grouped by user in chronological order."
        ),
        titles_file="ml-1m_item_map.tsv",
        verify_by_stats=True,
        notes=(
            "LightSANs uses another ML-1M variant (rating >= 3; 3,629 items / 836,478 actions) that needs the raw "
            "ratings.dat and is not registered."
        ),
    )
)

_register(
    DatasetSpec(
        name="ml-100k",
        title="MovieLens 100K (GroupLens u.data)",
        folder="ml-100k",
        files=(
            FileSpec(
                "u.data",
                (_ML100K_ZIP,),
                "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
                1_979_173,
                note=(
                    "member ml-100k/u.data of the official GroupLens zip; the zip's own sha256 is unknown here, so "
                    "the extracted member is verified instead. Mirror: deipss/BERT4Rec-VAE-Pytorch."
                ),
                archive_member="ml-100k/u.data",
                archive_filename="ml-100k.zip",
                archive_sha256=None,
                mirrors=(f"{_ML100K_MIRROR}/u.data",),
            ),
            FileSpec(
                "u.item",
                (_ML100K_ZIP,),
                "553841ebc7de3a0fd0d6b62a204ea30c1e651aacfb2814c7a6584ac52f2c5701",
                236_344,
                required=False,
                note="optional titles: `|` separated, ISO-8859-1; member ml-100k/u.item of the GroupLens zip.",
                archive_member="ml-100k/u.item",
                archive_filename="ml-100k.zip",
                archive_sha256=None,
                mirrors=(f"{_ML100K_MIRROR}/u.item",),
            ),
        ),
        format=MOVIELENS,
        licence=_MOVIELENS_LICENCE,
        file_stats=FileStats(943, 1_682, 100_000, 106.04, 20),
        paper_stats=(),
        papers=(),
        preprocessing=(
            "all ratings as implicit feedback; each user's interactions sorted by timestamp with a stable sort "
            "(ties keep file order); iterative 5-core on users and items; item ids remapped to 1..N in order of "
            "first appearance scanning users in ascending id order; users numbered 1..U in ascending id order."
        ),
        titles_file="u.item",
        notes="Not used by the course papers; a small real dataset for tests and quick runs.",
    )
)

_register(
    _s3rec(
        "Beauty", "beauty", "Amazon Beauty (S3-Rec preprocessing)",
        "226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8", 1_090_094,
        FileStats(22_363, 12_101, 198_502, 8.88, 5),
        PaperStats("FPARec, Table 2", 22_363, 12_101, "0.20M", 8.88),
        _AMAZON_LICENCE, "Amazon review data 2014, category Beauty.",
    )
)
_register(
    _s3rec(
        "Sports_and_Outdoors", "sports", "Amazon Sports and Outdoors (S3-Rec preprocessing)",
        "2a095e0648872beb9982408958290f5d655db5be2911c3756b5446de9f0b8de2", 1_707_483,
        FileStats(35_598, 18_357, 296_337, 8.32, 5),
        PaperStats("FPARec, Table 2", 35_598, 18_357, "0.30M", 8.32),
        _AMAZON_LICENCE, "Amazon review data 2014, category Sports_and_Outdoors.",
    )
)
_register(
    _s3rec(
        "Toys_and_Games", "toys", "Amazon Toys and Games (S3-Rec preprocessing)",
        "176c680c688d497598c4a89a03b402c0fe78d795e5db335c2e78dd5f2d778a3f", 922_166,
        FileStats(19_412, 11_924, 167_597, 8.63, 5),
        PaperStats("FPARec, Table 2", 19_412, 11_924, "0.17M", 8.63),
        _AMAZON_LICENCE, "Amazon review data 2014, category Toys_and_Games.",
    )
)
_register(
    _s3rec(
        "Yelp", "yelp", "Yelp (S3-Rec preprocessing)",
        "724b219106b81dd2349027da997334ddb6da9fe2f152ad6e0d97a93170f7caed", 1_814_224,
        FileStats(30_431, 20_033, 316_354, 10.40, 5),
        PaperStats("FPARec, Table 2", 30_431, 20_033, "0.32M", 10.40),
        _YELP_LICENCE, "Yelp open dataset, transactions after 2019-01-01; 7,102 users repeat a business.",
    )
)

_register(
    DatasetSpec(
        name="video",
        title="Amazon Video Games (SASRec version; RKSA 'Games')",
        folder="Video",
        files=(
            FileSpec(
                "Video.txt",
                (
                    f"{_SASREC}/Video.txt",
                    "https://raw.githubusercontent.com/pmixer/SASRec.pytorch/HEAD/python/data/Video.txt",
                ),
                "b7376fe24430743f411dc7f567285657b2adb3f74361cc7ba0aee94f3024b651",
                3_187_124,
                note="kang205/SASRec data/Video.txt (same git blob in pmixer/SASRec.pytorch python/data/Video.txt).",
            ),
        ),
        format=PAIRS,
        licence=_AMAZON_LICENCE,
        file_stats=FileStats(31_013, 23_715, 287_107, 9.26, 1),
        paper_stats=(
            PaperStats("SASRec, dataset statistics table (Games)", 31_013, 23_715, "0.3M", 9.3),
            PaperStats("RKSA, Table 1 (Games)", 31_013, 23_715, "0.3M", 9.3),
        ),
        papers=("SASRec", "RKSA"),
        preprocessing=(
            "none. Not a strict 5-core: SASRec filtered users/items with < 5 reviews in one pass, so some users "
            "have fewer than 5 actions (min 1)."
        ),
    )
)

_LOCKER_FILES = (
    ("train.json", "ad266007f2a4ec626988f4deb4bfbb63eb3e8b5a179322ab3bc29ebf6667ef84", 2_281_164, True,
     "{uid: [sid, ...]} chronological training items, 0-based ids"),
    ("val.json", "4a71de39219bb5dd31ce6fa6370595fa209d7fc432f7c30aab40f350048c2c27", 706_982, True,
     "{uid: [sid]} validation item"),
    ("test.json", "2e2abbccf896966845cd42415a3cff8341c4056cdcafff8c10db3b151fdd1dd0", 708_533, True,
     "{uid: [sid]} test item"),
    ("umap.json", "034a4448e85233030c30d1c4a2db48c2372cff79b8532bb3ad0133244017886f", 984_316, False,
     "optional: raw Amazon reviewerID -> uid"),
    ("smap.json", "bc008f045bb4661433e2deeea7ac69fe89591162c12c880ff5a52bcea0dd0d32", 1_134_272, False,
     "optional: raw ASIN -> sid"),
)

_register(
    DatasetSpec(
        name="beauty-locker",
        title="Amazon Beauty (LOCKER / BERT4Rec-VAE preprocessing)",
        folder="Beauty_LOCKER",
        files=tuple(
            FileSpec(fn, (f"{_LOCKER}/{fn}",), sha, size, note=f"AaronHeee/LOCKER data/Beauty/{fn}: {what}",
                     required=req)
            for fn, sha, size, req, what in _LOCKER_FILES
        ),
        format=LOCKER_JSON,
        licence=_AMAZON_LICENCE,
        file_stats=FileStats(40_226, 54_542, 353_962, 8.80, 5),
        paper_stats=(PaperStats("LOCKER, Table 2 (Beauty)", 40_226, 54_542, "353,962", 8.80),),
        papers=("LOCKER",),
        preprocessing=(
            "sequence = train + val + test per user (users in ascending uid order); every id shifted by +1 "
            "because LOCKER's ids are 0-based. No item-frequency filter (LOCKER applied none)."
        ),
        notes="Not the SASRec Beauty (52,024 users / 57,289 items) that RKSA uses; that file is not registered.",
    )
)


def dataset_names() -> list[str]:
    """Registered dataset names, in registry order."""
    return list(DATASETS)


def dataset_titles() -> dict[str, str]:
    """``{name: title}`` of every registered dataset without the title's bracketed provenance, e.g. ``"ml-1m":
    "MovieLens 1M"``: the words a user may type for it."""
    return {name: spec.title.split(" (")[0] for name, spec in DATASETS.items()}


def get_spec(name: str | DatasetSpec) -> DatasetSpec:
    """The :class:`DatasetSpec` for ``name`` (case-insensitive)."""
    if isinstance(name, DatasetSpec):
        return name
    key = str(name).strip().lower()
    if key == "synthetic":     # the CLI's --dataset synthetic is generated, not a file to load
        raise UnknownNameError("dataset", str(name), DATASETS, dataset_titles(),
                               hint="the synthetic data is generated, not loaded: "
                                    "tutorial_lib.data.make_synthetic() makes it")
    if key not in DATASETS:
        raise UnknownNameError("dataset", str(name), DATASETS, dataset_titles())
    return DATASETS[key]
