"""``fedretain data get NAME``: a dataset's files from its publisher, checked, unpacked safely.

Nothing else in fedretain downloads: a run reads files already on disk. This module fetches
the files of :data:`SOURCES` into ``ROOT/NAME`` (ROOT: ``--dir``, else :func:`default_root`),
where :func:`fedretain.data.datasets.load_dataset` also looks when a config names no
``data_dir``. For each file:

- the mirrors are tried in order (``--mirror URL`` first), each with a few attempts; a
  download that breaks off continues where it stopped (an HTTP range request on
  ``FILE.part``), from the same mirror or the next;
- the whole file is checked against the SHA-256 (and the size, where the publisher states
  one) shipped here before it takes its name; a file that does not match is deleted and
  fetched afresh once when it was continued from an earlier part, else the next mirror tried;
- an archive (zip or tar) is unpacked into a temporary folder beside its destination, refusing
  any member that would land outside it (absolute paths, ``..``), any link and any special
  file, then moved into place; the archive is deleted once unpacked;
- what is done is recorded in ``ROOT/NAME/.fedretain-data.json`` (file name -> SHA-256), so a
  second ``get`` checks and downloads nothing.

Without network it stops in one line naming each file to place by hand (name, size, SHA-256,
where it comes from).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import stat
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fedretain.errors import ConfigError, DataError, unknown_choice
from fedretain.files import read_json, write_json

MARKER = ".fedretain-data.json"
CHUNK = 1 << 20
ATTEMPTS = 3  # per mirror: a download that breaks off is continued this many times
TIMEOUT = 30.0  # seconds without a byte before a mirror counts as unreachable


@dataclass(frozen=True)
class Remote:
    """One file of a dataset as its publisher serves it."""

    name: str
    size: int | None  # bytes; None where the publisher states none (the SHA-256 still decides)
    sha256: str
    urls: tuple[str, ...]  # the publisher's address first, then mirrors
    unpack: str = ""  # "zip" or "tar": an archive unpacked into the dataset's folder


@dataclass(frozen=True)
class Source:
    """What ``data get`` fetches for a dataset, and what its loader finds afterwards."""

    files: tuple[Remote, ...]
    present: tuple[str, ...]  # paths (relative to the folder) that show the data are there
    origin: str  # the publisher and where the sums were read
    # other layouts the loader reads as well, placed by hand (glob patterns; any one whole
    # counts as there)
    layouts: tuple[tuple[str, ...], ...] = ()


def _mnist_like(base_urls: Sequence[str], sums: dict[str, tuple[int, str]]) -> tuple[Remote, ...]:
    return tuple(
        Remote(name, size, digest, tuple(f"{b.rstrip('/')}/{name}" for b in base_urls))
        for name, (size, digest) in sums.items()
    )


IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)

# The sizes and SHA-256 sums were copied from TensorFlow Datasets' url_checksums/*.txt and the
# Hugging Face datasets' dataset_infos.json (MNIST, Fashion-MNIST, EMNIST, CIFAR: both agree with
# torchvision's and Keras's sha256 where they list them), and for Tiny ImageNet, which no such
# library lists, from projects that check it with hashlib (berenslab/t-simcne and others).
# FEMNIST is TensorFlow Federated's build of LEAF's FEMNIST (NIST SD19 by writer: 3,400 writers,
# 62 classes, each writer's samples split between train and test), whose SHA-256 TFF's own
# loader checks (tensorflow_federated/python/simulation/datasets/emnist.py); TFF states no size.
SOURCES: dict[str, Source] = {
    "mnist": Source(
        _mnist_like(
            (
                "https://ossci-datasets.s3.amazonaws.com/mnist",
                "https://storage.googleapis.com/cvdf-datasets/mnist",
                "http://yann.lecun.com/exdb/mnist",
            ),
            {
                IDX_FILES[0]: (
                    9912422,
                    "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                ),
                IDX_FILES[1]: (
                    28881,
                    "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                ),
                IDX_FILES[2]: (
                    1648877,
                    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                ),
                IDX_FILES[3]: (
                    4542,
                    "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                ),
            },
        ),
        IDX_FILES,
        "Y. LeCun, C. Cortes, C. Burges (yann.lecun.com/exdb/mnist); sums: TFDS, HF datasets",
    ),
    "fashion-mnist": Source(
        _mnist_like(
            (
                "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com",
                "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion",
                "https://storage.googleapis.com/tensorflow/tf-keras-datasets",
            ),
            {
                IDX_FILES[0]: (
                    26421880,
                    "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                ),
                IDX_FILES[1]: (
                    29515,
                    "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                ),
                IDX_FILES[2]: (
                    4422102,
                    "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                ),
                IDX_FILES[3]: (
                    5148,
                    "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
                ),
            },
        ),
        IDX_FILES,
        "Zalando Research (github.com/zalandoresearch/fashion-mnist); sums: TFDS, HF datasets",
    ),
    "emnist": Source(
        (
            Remote(
                "gzip.zip",
                561753746,
                "fb9bb67e33772a9cc0b895e4ecf36d2cf35be8b709693c3564cea2a019fcda8e",
                (
                    "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",
                    "https://www.itl.nist.gov/iaui/vip/cs_links/EMNIST/gzip.zip",
                ),
                "zip",
            ),
        ),
        ("gzip/emnist-balanced-train-images-idx3-ubyte.gz",),
        "NIST (www.nist.gov/itl/products-and-services/emnist-dataset); sum: TFDS",
    ),
    "cifar10": Source(
        (
            Remote(
                "cifar-10-python.tar.gz",
                170498071,
                "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
                "tar",
            ),
        ),
        ("cifar-10-batches-py/test_batch",),
        "A. Krizhevsky (www.cs.toronto.edu/~kriz/cifar.html); sum: HF datasets, TFDS",
    ),
    "cifar100": Source(
        (
            Remote(
                "cifar-100-python.tar.gz",
                169001437,
                "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
                ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
                "tar",
            ),
        ),
        ("cifar-100-python/test",),
        "A. Krizhevsky (www.cs.toronto.edu/~kriz/cifar.html); sum: HF datasets, TFDS",
    ),
    "tiny-imagenet": Source(
        (
            Remote(
                "tiny-imagenet-200.zip",
                248100043,
                "6198c8ae015e2b3e007c7841da39ec069199b9aa3bfa943a462022fe5e43c821",
                ("http://cs231n.stanford.edu/tiny-imagenet-200.zip",),
                "zip",
            ),
        ),
        ("tiny-imagenet-200/wnids.txt",),
        "Stanford CS231n (cs231n.stanford.edu); sum: projects that check it (berenslab/t-simcne)",
    ),
    "femnist": Source(
        (
            Remote(
                "fed_emnist.tar.bz2",
                None,
                "fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
                ("https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2",),
                "tar",
            ),
        ),
        ("fed_emnist_train.h5", "fed_emnist_test.h5"),
        "TensorFlow Federated's build of LEAF's FEMNIST (www.tensorflow.org/federated); "
        "sum: TFF's loader",
        (("train/*.json", "test/*.json"),),  # LEAF's own output
    ),
}


def default_root() -> Path:
    """Where ``data get`` puts datasets without ``--dir``: ``$FEDRETAIN_DATA_HOME``, else
    ``$XDG_DATA_HOME/fedretain/datasets`` (``~/.local/share/fedretain/datasets``)."""
    own = os.environ.get("FEDRETAIN_DATA_HOME")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg).expanduser() / "fedretain" / "datasets"


def fetched_dir(name: str, root: Path | None = None) -> Path:
    """The folder ``data get NAME`` fills (and a config without ``data_dir`` reads)."""
    return (root or default_root()) / name


def source(name: str) -> Source:
    """The :class:`Source` of dataset ``name``, or a ConfigError naming those there are
    (:func:`fedretain.data.datasets.fetch_source` says why another dataset has none)."""
    if name not in SOURCES:
        raise ConfigError(unknown_choice("dataset to get", name, sorted(SOURCES)))
    return SOURCES[name]


def present(name: str, folder: Path) -> bool:
    """Whether ``folder`` holds what :data:`SOURCES` says shows dataset ``name`` is there."""
    src = SOURCES[name]
    return folder.is_dir() and any(
        all(next(folder.glob(p), None) is not None for p in paths)
        for paths in (src.present, *src.layouts)
    )


def present_in(name: str, folder: Path) -> bool:
    """:func:`present` for any dataset name (False for those ``data get`` does not fetch)."""
    return name in SOURCES and present(name, folder)


# ----------------------------------------------------------------------------- downloading


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _attempt(url: str, part: Path, size: int | None) -> None:
    """Bring ``part`` closer to the whole file from ``url``: continue it with a range request
    when it holds the start already. Raises on a broken connection (part kept). Without a
    shipped ``size``, the server's Content-Length says how much is to come."""
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:  # not a prefix of this file
        part.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"User-Agent": "fedretain"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        mode = "ab" if have and response.status == 206 else "wb"  # 200: the server restarts
        start = have if mode == "ab" else 0
        length = response.headers.get("Content-Length", "")
        expect = size if size is not None else (start + int(length) if length.isdigit() else None)
        with open(part, mode) as f:
            while block := response.read(CHUNK):
                f.write(block)
                if size is not None and f.tell() > size:
                    raise DataError(f"{url} sends more than the {size} bytes of this file")
            if expect is not None and f.tell() < expect:  # closed early
                raise ConnectionError(f"the connection closed after {f.tell():,} bytes")


def _whole(part: Path, remote: Remote) -> bool:
    """Whether ``part`` is the whole file: its size (where shipped) and its SHA-256."""
    if not part.is_file() or remote.size not in (None, part.stat().st_size):
        return False
    return _sha256(part) == remote.sha256


def download(
    remote: Remote, dest: Path, mirrors: Sequence[str] = (), log: Callable = print
) -> None:
    """``remote`` into ``dest``, checked; a DataError naming the file to place by hand when
    no mirror gives it."""
    part = dest.with_name(dest.name + ".part")
    urls = [f"{m.rstrip('/')}/{remote.name}" for m in mirrors] + list(remote.urls)
    errors = []
    if _whole(part, remote):  # downloaded whole before a stop between the last byte and here
        os.replace(part, dest)
        log(f"{remote.name}: {part.name} was whole already, SHA-256 checked")
        return
    for url in urls:
        for _ in range(ATTEMPTS):
            before = part.stat().st_size if part.exists() else 0
            try:
                _attempt(url, part, remote.size)
            except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
                reason = getattr(e, "reason", None) or e
                errors.append(f"{url}: {type(e).__name__}: {reason}")
                if getattr(e, "code", None) == 416 and before:  # the part is no prefix of it
                    part.unlink()
                    continue
                grew = part.exists() and part.stat().st_size > before
                if isinstance(e, urllib.error.HTTPError) or not grew:
                    break  # refused, or nothing came: the next mirror
                continue  # broke off after some bytes: continue where it stopped
            got = part.stat().st_size
            if _whole(part, remote):
                os.replace(part, dest)
                log(f"{remote.name}: {got:,} bytes from {url}, SHA-256 checked")
                return
            errors.append(f"{url}: {got:,} bytes that do not match the SHA-256 shipped")
            part.unlink()
            if before:  # continued from an earlier part, which may be what is wrong: afresh
                continue
            break
    size = f"{remote.size:,} bytes, " if remote.size is not None else ""
    raise DataError(
        f"could not get {remote.name} ({'; '.join(errors[-3:])}); place {remote.name} "
        f"({size}SHA-256 {remote.sha256}, from {remote.urls[0]}) in "
        f"{dest.parent} by hand and run this again"
    )


# ----------------------------------------------------------------------------- unpacking


def _member_path(name: str, archive: Path) -> PurePosixPath:
    """A member's path inside the destination, or a DataError for one that leaves it."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise DataError(
            f"{archive.name} holds {name!r}, which would be written outside its folder: "
            "refused (the archive is not the publisher's; delete it and get it again)"
        )
    return path


def _refuse(kind: str, name: str, archive: Path) -> DataError:
    return DataError(
        f"{archive.name} holds {kind} {name!r}: refused (a dataset's archive holds only files "
        "and folders; delete it and get it again)"
    )


def _unpack_zip(archive: Path, into: Path) -> None:
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            path = _member_path(info.filename, archive)
            kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no type recorded (a plain file)
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise _refuse("the link or special file", info.filename, archive)
            if info.is_dir() or not path.parts:
                (into / path).mkdir(parents=True, exist_ok=True)
                continue
            target = into / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)


def _unpack_tar(archive: Path, into: Path) -> None:
    with tarfile.open(archive) as t:
        members = t.getmembers()
        for m in members:
            _member_path(m.name, archive)
            if not (m.isfile() or m.isdir()):
                raise _refuse("the link or special file", m.name, archive)
        t.extractall(into, members=members, filter="data")


def unpack(archive: Path, kind: str, folder: Path) -> None:
    """``archive`` (zip or tar) into ``folder``: each top-level entry it holds replaces the one
    of that name there; nothing else in ``folder`` is touched."""
    tmp = folder / f".unpacking-{archive.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        try:
            (_unpack_zip if kind == "zip" else _unpack_tar)(archive, tmp)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError) as e:
            raise DataError(f"{archive.name} is damaged ({e}); delete it and get it again") from e
        for entry in sorted(tmp.iterdir()):
            target = folder / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            os.replace(entry, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- the command


def get(
    name: str, root: Path | None = None, mirrors: Sequence[str] = (), log: Callable = print
) -> Path:
    """Fetch dataset ``name`` into ``ROOT/NAME`` (see the module's docstring); its folder."""
    src = source(name)
    folder = fetched_dir(name, root)
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER
    done: dict[str, str] = read_json(marker) if marker.is_file() else {}
    for remote in src.files:
        dest = folder / remote.name
        there = present(name, folder) if remote.unpack else dest.is_file()
        if done.get(remote.name) == remote.sha256 and there:
            log(f"{remote.name}: already here")
            continue
        if remote.unpack and there and not dest.is_file():  # unpacked by hand: kept as it is
            log(f"{remote.name}: its files are here already (unpacked by hand: not checked)")
            continue
        if not (dest.is_file() and _sha256(dest) == remote.sha256):
            download(remote, dest, mirrors, log)
        if remote.unpack:
            unpack(dest, remote.unpack, folder)
            dest.unlink()
            log(f"{remote.name}: unpacked into {folder}")
        done[remote.name] = remote.sha256
        write_json(marker, done)
    if not present(name, folder):
        missing = [p for p in src.present if not (folder / p).exists()]
        raise DataError(
            f"{folder} lacks {', '.join(missing)} after getting {name}: the files do not hold "
            "what the loader reads"
        )
    return folder


__all__ = [
    "SOURCES",
    "Remote",
    "Source",
    "default_root",
    "download",
    "fetched_dir",
    "get",
    "present",
    "source",
    "unpack",
]
