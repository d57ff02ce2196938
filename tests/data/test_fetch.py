"""``fedretain data get`` against an HTTP server on 127.0.0.1 serving files the tests write,
with the shipped SHA-256 sums replaced by theirs: the files arrive checked and load; a second
get downloads nothing; a corrupt mirror is passed over; a download that breaks off continues
with a range request; hostile archives (a path out, an absolute path, a link out) are refused
with nothing written outside; without network one line names the files to place by hand."""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fedretain.cli import main
from fedretain.data import fetch
from fedretain.data.datasets import fetch_source, load_dataset
from fedretain.errors import ConfigError, DataError
from tests.data.test_data_cifar import write_cifar10
from tests.data.test_data_leaf import make_femnist, make_tff
from tests.data.test_datasets import write_mnist_like


class Server:
    """Files by URL path; ``/broken/NAME`` sends half of NAME's bytes then closes the
    connection (once per file); every request's path and Range header are kept."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []
        self.broken: set[str] = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("Range", "")))
                path = self.path.removeprefix("/broken")
                data = outer.files.get(path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0])
                body = data[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path.startswith("/broken") and path not in outer.broken:
                    outer.broken.add(path)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)  # the rest never comes
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _remote(server: Server, name: str, data: bytes, unpack: str = "", prefix: str = "/d"):
    server.files[f"{prefix}/{name}"] = data
    digest = hashlib.sha256(data).hexdigest()
    return fetch.Remote(name, len(data), digest, (f"{server.url}{prefix}/{name}",), unpack)


def _mnist(server: Server, tmp_path: Path, prefix: str = "/d") -> fetch.Source:
    written = tmp_path / "written"
    write_mnist_like(written)
    files = tuple(
        _remote(server, n, (written / n).read_bytes(), prefix=prefix) for n in fetch.IDX_FILES
    )
    return fetch.Source(files, fetch.IDX_FILES, "test files")


def _archive(
    kind: str, members: dict[str, bytes], links: dict[str, str] | None = None, mode: str = "w:gz"
) -> bytes:
    buf = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buf, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
            for name, target in (links or {}).items():
                info = zipfile.ZipInfo(name)
                info.external_attr = 0o120777 << 16  # a symbolic link
                z.writestr(info, target)
    else:
        with tarfile.open(fileobj=buf, mode=mode) as t:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            for name, target in (links or {}).items():
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, target
                t.addfile(info)
    return buf.getvalue()


def test_get_checks_the_files_prints_the_data_dir_and_they_load(
    server, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(fetch.SOURCES, "mnist", _mnist(server, tmp_path))
    root = tmp_path / "datasets"
    assert main(["data", "get", "mnist", "--dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"data_dir={root / 'mnist'}"
    assert out.count("SHA-256 checked") == 4
    assert len(load_dataset("mnist", root / "mnist").y_train) == 12
    assert sorted(p.name for p in (root / "mnist").iterdir()) == sorted(
        [*fetch.IDX_FILES, fetch.MARKER]
    )
    asked = len(server.requests)
    assert main(["data", "get", "mnist", "--dir", str(root)]) == 0  # idempotent
    assert len(server.requests) == asked and capsys.readouterr().out.count("already here") == 4
    assert main(["data", "list", "--dir", str(root)]) == 0
    listed = dict(ln.split(None, 1) for ln in capsys.readouterr().out.splitlines())
    assert listed["mnist"] == f"present: data_dir={root / 'mnist'}"
    assert listed["digits"] == "no files needed"


def test_the_default_folder_is_read_without_a_data_dir(server, tmp_path, monkeypatch):
    monkeypatch.setitem(fetch.SOURCES, "mnist", _mnist(server, tmp_path))
    monkeypatch.setenv("FEDRETAIN_DATA_HOME", str(tmp_path / "home"))
    with pytest.raises(DataError, match=r"needs data_dir=FOLDER or `fedretain data get mnist`"):
        load_dataset("mnist")
    folder = fetch.get("mnist", log=lambda _: None)
    assert folder == tmp_path / "home" / "mnist"
    assert len(load_dataset("mnist").y_train) == 12


def test_a_corrupt_mirror_is_passed_over_and_a_corrupt_only_file_is_refused(
    server, tmp_path, monkeypatch
):
    src = _mnist(server, tmp_path)
    first = src.files[0]
    server.files["/bad/" + first.name] = b"\0" * first.size  # the right size, other bytes
    bad_first = fetch.Remote(
        first.name, first.size, first.sha256, (f"{server.url}/bad/{first.name}", *first.urls)
    )
    monkeypatch.setitem(
        fetch.SOURCES, "mnist", fetch.Source((bad_first, *src.files[1:]), src.present, "")
    )
    folder = fetch.get("mnist", tmp_path / "r", log=lambda _: None)
    assert len(load_dataset("mnist", folder).y_train) == 12
    only_bad = fetch.Remote(
        first.name, first.size, first.sha256, (f"{server.url}/bad/{first.name}",)
    )
    dest = tmp_path / "other" / first.name
    dest.parent.mkdir()
    with pytest.raises(DataError) as e:
        fetch.download(only_bad, dest, log=lambda _: None)
    assert "do not match the SHA-256 shipped" in str(e.value) and "\n" not in str(e.value)
    assert f"place {first.name} ({first.size:,} bytes, SHA-256 {first.sha256}" in str(e.value)
    assert list(dest.parent.iterdir()) == []  # neither the file nor its .part


def test_a_download_that_breaks_off_continues_where_it_stopped(server, tmp_path, monkeypatch):
    src = _mnist(server, tmp_path, prefix="/d")
    broken = tuple(
        fetch.Remote(r.name, r.size, r.sha256, (f"{server.url}/broken/d/{r.name}",))
        for r in src.files
    )
    monkeypatch.setitem(fetch.SOURCES, "mnist", fetch.Source(broken, src.present, ""))
    folder = fetch.get("mnist", tmp_path / "r", log=lambda _: None)
    assert len(load_dataset("mnist", folder).y_train) == 12
    for r in src.files:  # the whole file asked, then the rest after the half that came
        asked = [rng for path, rng in server.requests if path.endswith(r.name)]
        assert asked == ["", f"bytes={r.size // 2}-"], asked


def test_a_part_left_whole_is_used_and_a_wrong_one_is_fetched_afresh(server, tmp_path):
    data = bytes(range(256)) * 40
    good = _remote(server, "f.bin", data)
    sizeless = fetch.Remote(good.name, None, good.sha256, good.urls)
    dest = tmp_path / "f.bin"
    part = tmp_path / "f.bin.part"
    part.write_bytes(data)  # stopped after the last byte, before the check
    fetch.download(sizeless, dest, log=lambda _: None)
    assert dest.read_bytes() == data and not part.exists() and server.requests == []
    dest.unlink()
    part.write_bytes(b"\0" * len(data))  # whole length, other bytes: no prefix of the file
    fetch.download(sizeless, dest, log=lambda _: None)
    assert dest.read_bytes() == data and not part.exists()
    assert [rng for _, rng in server.requests] == [f"bytes={len(data)}-", ""]


def test_an_archive_is_unpacked_and_deleted_and_loads(server, tmp_path, monkeypatch):
    written = tmp_path / "written"
    write_cifar10(written)
    members = {
        f"cifar-10-batches-py/{p.name}": p.read_bytes()
        for p in sorted((written / "cifar-10-batches-py").iterdir())
    }
    remote = _remote(server, "cifar-10-python.tar.gz", _archive("tar", members), "tar")
    monkeypatch.setitem(
        fetch.SOURCES, "cifar10", fetch.Source((remote,), ("cifar-10-batches-py/test_batch",), "")
    )
    folder = fetch.get("cifar10", tmp_path / "r", log=lambda _: None)
    assert sorted(p.name for p in folder.iterdir()) == [fetch.MARKER, "cifar-10-batches-py"]
    assert len(load_dataset("cifar10", folder).y_train) == 20
    asked = len(server.requests)
    fetch.get("cifar10", tmp_path / "r", log=lambda _: None)
    assert len(server.requests) == asked
    (folder / fetch.MARKER).unlink()  # as if unpacked by hand: kept, not fetched again
    said: list[str] = []
    fetch.get("cifar10", tmp_path / "r", log=said.append)
    assert len(server.requests) == asked and "not checked" in said[0]


def test_femnist_arrives_as_tffs_bz2_archive_without_a_size_and_loads(
    server, tmp_path, monkeypatch
):
    pytest.importorskip("h5py")
    written = tmp_path / "written"
    make_tff(written)
    members = {p.name: p.read_bytes() for p in sorted(written.iterdir())}
    data = _archive("tar", members, mode="w:bz2")
    shipped = fetch.SOURCES["femnist"]
    assert shipped.files[0].size is None and sorted(shipped.present) == sorted(members)
    server.files["/d/fed_emnist.tar.bz2"] = data
    digest = hashlib.sha256(data).hexdigest()
    url = f"{server.url}/broken/d/fed_emnist.tar.bz2"  # breaks off halfway once
    remote = fetch.Remote("fed_emnist.tar.bz2", None, digest, (url,), "tar")
    monkeypatch.setitem(fetch.SOURCES, "femnist", fetch.Source((remote,), shipped.present, ""))
    folder = fetch.get("femnist", tmp_path / "r", log=lambda _: None)
    asked = [rng for path, rng in server.requests if path.endswith("fed_emnist.tar.bz2")]
    assert asked == ["", f"bytes={len(data) // 2}-"]  # the server's length said it was short
    assert sorted(p.name for p in folder.iterdir()) == sorted([fetch.MARKER, *members])
    femnist = load_dataset("femnist", folder)
    assert femnist.y_train.tolist() == [0, 1, 2, 60, 61, 10, 11, 12, 13]
    wrong = fetch.Remote("fed_emnist.tar.bz2", None, "ab" * 32, (f"{server.url}/d/x",), "tar")
    server.files["/d/x"] = data
    with pytest.raises(DataError, match=r"place fed_emnist\.tar\.bz2 \(SHA-256 (ab)+, from"):
        fetch.download(wrong, tmp_path / "fed_emnist.tar.bz2", log=lambda _: None)


def test_leafs_own_json_placed_by_hand_counts_as_femnist_and_is_not_fetched(tmp_path, capsys):
    root = tmp_path / "datasets"
    (root / "femnist" / "train").mkdir(parents=True)  # a folder without its JSON is not data
    assert not fetch.present("femnist", root / "femnist")
    make_femnist(root / "femnist")
    assert main(["data", "list", "--dir", str(root)]) == 0
    listed = dict(ln.split(None, 1) for ln in capsys.readouterr().out.splitlines())
    assert listed["femnist"] == f"present: data_dir={root / 'femnist'}"
    log: list[str] = []
    assert fetch.get("femnist", root, log=log.append) == root / "femnist"  # no request made
    assert log == ["fed_emnist.tar.bz2: its files are here already (unpacked by hand: not checked)"]
    assert load_dataset("femnist", root / "femnist").y_train.tolist()[:3] == [0, 1, 2]


@pytest.mark.parametrize("kind", ["zip", "tar"])
@pytest.mark.parametrize(
    "members, links, refused",
    [
        ({"data/ok": b"1", "../escaped": b"x"}, None, "outside its folder"),
        ({"/abs/escaped": b"x"}, None, "outside its folder"),
        ({"data/ok": b"1"}, {"data/link": "../../escaped"}, "link or special file"),
    ],
    ids=["dot-dot", "absolute", "link-out"],
)
def test_a_hostile_archive_is_refused_with_nothing_written_outside(
    server, tmp_path, monkeypatch, kind, members, links, refused
):
    remote = _remote(server, f"hostile.{kind}", _archive(kind, members, links), kind)
    monkeypatch.setitem(fetch.SOURCES, "cifar10", fetch.Source((remote,), ("data/ok",), ""))
    root = tmp_path / "inside" / "r"
    with pytest.raises(DataError, match=refused):
        fetch.get("cifar10", root, log=lambda _: None)
    assert not list(tmp_path.rglob("escaped")) and not Path("/abs/escaped").exists()
    assert not (root / "cifar10" / "data").exists()  # nothing of it unpacked


def test_without_network_one_line_names_the_files_to_place_by_hand(tmp_path, monkeypatch, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/train-images-idx3-ubyte.gz"
    remote = fetch.Remote("train-images-idx3-ubyte.gz", 10, "ab" * 32, (url,))
    monkeypatch.setitem(fetch.SOURCES, "mnist", fetch.Source((remote,), ("x",), ""))
    assert main(["data", "get", "mnist", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Connection refused" in err
    want = f"place train-images-idx3-ubyte.gz (10 bytes, SHA-256 {'ab' * 32}, from {url}) in "
    assert want + f"{tmp_path / 'mnist'} by hand" in err


def test_datasets_without_a_source_say_how_to_get_them():
    with pytest.raises(ConfigError, match="needs no files"):
        fetch_source("digits")
    with pytest.raises(ConfigError, match="imagefolder by itself; set data_dir=FOLDER"):
        fetch_source("imagefolder")
    with pytest.raises(ConfigError, match="unknown dataset 'nosuch'"):
        fetch_source("nosuch")
    assert fetch_source("cifar10") is fetch.SOURCES["cifar10"]
