"""`lmdbio info|dump|index`: JSON facts, mdb_dump-identical output, files made by mdb_load."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from corrupt_helpers import ensure_mdb_tools, lmdb_items, make_db
from lmdbio.cli import main
from lmdbio.recordindex import build_index
from lmdbio.info import dump


@pytest.fixture(scope="session")
def mdb_tools():
    """Debian's mdb_dump/mdb_load (lmdb-utils), installed with apt-get when root and missing."""
    reason = ensure_mdb_tools()
    if reason:
        pytest.skip(reason)


def shapes(tmp_path, fmt="0.9"):
    r = random.Random(3)
    yield "inline", make_db(tmp_path / f"inline{fmt}", [(b"%06d" % i, r.randbytes(100)) for i in range(2000)], fmt=fmt)
    yield "cifar", make_db(tmp_path / f"cifar{fmt}", [(b"%08d_x.png" % i, r.randbytes(3087)) for i in range(700)],
                           fmt=fmt, commit_every=200)
    yield "mixed", make_db(tmp_path / f"mixed{fmt}", [(r.randbytes(r.randint(1, 300)), r.randbytes(r.choice([0, 5, 2030, 2040, 9000, 200_000])))
                                                     for _ in range(120)], fmt=fmt, commit_every=17,
                           deletes=())
    items = [(b"%05d" % i, r.randbytes(r.randint(0, 6000))) for i in range(900)]
    yield "deletes", make_db(tmp_path / f"del{fmt}", items, fmt=fmt, commit_every=100,
                             deletes=[k for k, _ in items[::4]])


def data_section(text: str) -> str:
    return text[text.index("HEADER=END\n") + len("HEADER=END\n"):]


def parse_dump(text: str) -> list[tuple[bytes, bytes]]:
    lines = data_section(text).splitlines()
    assert lines[-1] == "DATA=END"
    body = lines[:-1]
    return [(bytes.fromhex(body[i][1:]), bytes.fromhex(body[i + 1][1:])) for i in range(0, len(body), 2)]


def our_dump(path) -> str:
    buf = io.StringIO()
    dump(path, buf)
    return buf.getvalue()


def test_dump_equals_mdb_dump_09(tmp_path, mdb_tools):
    for name, path in shapes(tmp_path):
        theirs = subprocess.run(["mdb_dump", str(path)], capture_output=True, check=True).stdout.decode()
        ours = our_dump(path)
        assert data_section(ours) == data_section(theirs), name
        assert ours.startswith("VERSION=3\nformat=bytevalue\ntype=btree\nmapsize=")
        assert "db_pagesize=4096\nHEADER=END\n" in ours


def test_dump_matches_lmdb_10(tmp_path):
    for name, path in shapes(tmp_path, "1.0"):
        assert parse_dump(our_dump(path)) == lmdb_items(path, "1.0"), name


def test_dump_without_lmdb_package(tmp_path):
    path = make_db(tmp_path / "db", [(b"%03d" % i, bytes([i]) * (i * 40)) for i in range(200)])
    code = ("import sys; sys.modules['lmdb'] = None\n"
            "from lmdbio.cli import main\n"
            "sys.exit(main(['dump', sys.argv[1]]))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert parse_dump(out.stdout) == lmdb_items(path)


def _mdb_load(tmp_path: Path, items, name: str, extra=()) -> Path:
    text = "VERSION=3\nformat=bytevalue\ntype=btree\nmapsize=268435456\nHEADER=END\n"
    text += "".join(f" {k.hex()}\n {v.hex()}\n" for k, v in items) + "DATA=END\n"
    src = tmp_path / f"{name}.txt"
    src.write_text(text)
    out = tmp_path / name
    out.mkdir()
    subprocess.run(["mdb_load", *extra, "-f", str(src), str(out)], check=True, capture_output=True)
    return out


def test_files_written_by_mdb_load(tmp_path, mdb_tools):
    r = random.Random(5)
    sets = {
        "small": [(b"%06d" % i, r.randbytes(100)) for i in range(3000)],
        "big": [(b"%06d" % i, r.randbytes(r.choice([3087, 196_623, 1, 2500]))) for i in range(60)],
        "longkeys": [(b"k" * 400 + b"%06d" % i, r.randbytes(r.randint(0, 3000))) for i in range(1500)],
    }
    for name, items in sets.items():
        items = sorted(dict(items).items())
        path = _mdb_load(tmp_path, items, name)
        idx = build_index(path)
        assert idx.keys() == [k for k, _ in items], name
        assert [idx.read(i) for i in range(len(idx))] == [v for _, v in items], name
        theirs = subprocess.run(["mdb_dump", str(path)], capture_output=True, check=True).stdout.decode()
        assert data_section(our_dump(path)) == data_section(theirs), name
    # mdb_load -n: a single data.mdb without a directory.
    items = sorted(dict(sets["big"]).items())
    src = tmp_path / "single.txt"
    src.write_text("VERSION=3\nformat=bytevalue\ntype=btree\nmapsize=268435456\nHEADER=END\n"
                   + "".join(f" {k.hex()}\n {v.hex()}\n" for k, v in items) + "DATA=END\n")
    single = tmp_path / "single.mdb"
    subprocess.run(["mdb_load", "-n", "-f", str(src), str(single)], check=True, capture_output=True)
    idx = build_index(single)
    assert [idx.read(i) for i in range(len(idx))] == [v for _, v in items]


def test_info_and_index_commands(tmp_path, capsys):
    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 3087) for i in range(300)], commit_every=100)
    assert main(["info", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "0.9" and info["page_size"] == 4096 and info["entries"] == 300
    assert info["pages"]["overflow"] == 300 and info["pages"]["leaf"] >= 2 and info["depth"] == 2
    assert info["provenance"] == "missing" and info["txnid"] == 3
    assert info["file_size"] == (path / "data.mdb").stat().st_size
    assert main(["index", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("lmdbio-provenance.npz")
    main(["info", str(path / "data.mdb")])
    assert json.loads(capsys.readouterr().out)["provenance"] == "present"
    subprocess.run([sys.executable, "-c", "import lmdb,sys; e=lmdb.open(sys.argv[1]); "
                    "t=e.begin(write=True); t.delete(b'0001'); t.commit()", str(path)], check=True)
    main(["info", str(path)])
    assert json.loads(capsys.readouterr().out)["provenance"] == "stale"
    path10 = make_db(tmp_path / "db10", [(b"a", b"b")], fmt="1.0")
    main(["info", str(path10)])
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "1.0" and info["page_header_bytes"] == 24


def test_cli_error_is_one_line(tmp_path):
    path = make_db(tmp_path / "db", [(b"%04d" % i, b"v" * 100) for i in range(500)])
    with open(path / "data.mdb", "r+b") as f:
        f.truncate(4096 * 3)
    for cmd in ("info", "dump", "index"):
        out = subprocess.run([sys.executable, "-m", "lmdbio", cmd, str(path)],
                             capture_output=True, text=True)
        assert out.returncode == 1, cmd
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("lmdbio: error: "), out.stderr
        assert "data.mdb" in lines[0] and "truncated" in lines[0]
    out = subprocess.run([sys.executable, "-m", "lmdbio", "info", str(tmp_path / "nothere")],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "does not exist" in out.stderr and "Traceback" not in out.stderr
    # F27: an I/O error from deep inside a read (EIO: /proc/self/mem) names the path it read.
    out = subprocess.run([sys.executable, "-m", "lmdbio", "info", "/proc/self/mem"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.startswith("lmdbio: error: /proc/self/mem: "), out.stderr
