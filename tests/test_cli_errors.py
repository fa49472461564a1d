"""What `lmdbio info|dump` say about paths that are no readable LMDB, and a dump into a closed pipe."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from corrupt_helpers import make_db
from lmdbio import format as fmt
from lmdbio.errors import AccessError, LmdbioError

NOBODY = 65534


def lmdbio_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmdbio", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The single ``lmdbio: error: ...`` line of a failed command (no traceback)."""
    assert out.returncode == 1, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lmdbio: error: "), out.stderr
    return lines[0]


# ------------------------------------------------------------------ F8a: closed pipe

def test_dump_into_closed_pipe_exits_quietly(tmp_path):
    from lmdbio.datasets import make_dataset

    db = make_dataset(tmp_path / "db", "cifar10", 2000, seed=1)
    # `lmdbio dump DB | head -1`: the reader leaves while the dump is still writing.
    proc = subprocess.Popen([sys.executable, "-m", "lmdbio", "dump", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    rc = proc.wait(timeout=120)
    assert first == b"VERSION=3\n"
    assert rc == 0, err
    assert err.strip() == "", err


# ------------------------------------------------------------------ F8b: what the path is

def _block_device(tmp_path: Path) -> Path | None:
    try:
        node = tmp_path / "blk"
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 0))
        return node
    except OSError:
        pass
    for entry in os.scandir("/dev"):
        if stat.S_ISBLK(entry.stat(follow_symlinks=False).st_mode):
            return Path(entry.path)
    return None


def test_db_file_names_what_the_path_is(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "afile").write_bytes(b"x")
    (tmp_path / "mdbdir" / "data.mdb").mkdir(parents=True)
    (tmp_path / "to_null").symlink_to("/dev/null")
    cases = {"/dev/null": "is a character device", tmp_path / "to_null": "is a character device",
             fifo: "is a FIFO", sock_path: "is a socket",
             tmp_path / "dangling": f"is a symbolic link to {tmp_path / 'gone'}, which does not exist",
             tmp_path / "loop": "cannot look it up",
             tmp_path / "afile" / "data.mdb": f"{tmp_path / 'afile'} is a file, not a directory",
             tmp_path / "mdbdir": "data.mdb is a directory, not an LMDB data file"}
    blk = _block_device(tmp_path)
    if blk is not None:
        cases[blk] = "is a block device"
    try:
        for path, says in cases.items():
            with pytest.raises(LmdbioError) as err:
                fmt.db_file(path)
            msg = str(err.value)
            assert says in msg and "pass an LMDB directory or its data.mdb file" in msg, msg
            assert f"{path} does not exist" not in msg, msg
    finally:
        sock.close()
    with pytest.raises(LmdbioError, match="nothing does not exist; pass an LMDB directory"):
        fmt.db_file(tmp_path / "nothing")
    with pytest.raises(LmdbioError, match="is a directory without data.mdb"):
        fmt.db_file(tmp_path)


@pytest.mark.parametrize("cmd", ["info", "dump"])
def test_cli_on_dev_null_says_character_device(cmd):
    line = one_error_line(lmdbio_cli(cmd, "/dev/null"))
    assert "/dev/null is a character device" in line and "does not exist" not in line
    assert "pass an LMDB directory or its data.mdb file" in line


# ------------------------------------------------------------------ unreadable paths

# Root reads everything, so the check drops to `nobody` inside the child, after its imports
# (the interpreter itself may live where nobody may not look).
CHILD = f"""
import os, sys
import lmdbio.cli, lmdbio.format, lmdbio.recordindex, lmdbio.info, lmdbio.provenance
lmdbio.cli.build_parser()
if os.geteuid() == 0:
    os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
if sys.argv[1] == "read_meta":
    try:
        lmdbio.format.read_meta(sys.argv[2])
    except Exception as exc:
        print(type(exc).__name__, isinstance(exc, PermissionError), exc)
    sys.exit(0)
sys.exit(lmdbio.cli.main(sys.argv[1:]))
"""


def as_nobody(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.fixture
def open_dir():
    """A directory everyone may look into (pytest's tmp_path is root's own, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="lmdbio-access-"))
    d.chmod(0o755)
    yield d
    for p in (d, *d.rglob("*")):
        if not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d)


@pytest.mark.parametrize("case", ["file_000", "dir_000", "dir_no_exec"])
def test_unreadable_path_is_an_access_error(open_dir, case):
    db = make_db(open_dir / "db", [(b"%04d" % i, b"v" * 100) for i in range(50)])
    for p in (db, *db.iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if case == "file_000":
        (db / "data.mdb").chmod(0)
        blocked = db / "data.mdb"
    else:
        db.chmod(0 if case == "dir_000" else 0o644)
        blocked = db
    out = as_nobody("read_meta", db)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("AccessError True "), out.stdout
    assert str(blocked) in out.stdout and "permission denied" in out.stdout
    for cmd in ("info", "dump"):
        res = as_nobody(cmd, db)
        line = one_error_line(res)
        assert str(blocked) in line and "permission denied" in line, line
        assert "check that this user may read it" in line, line
        assert res.stdout == "", res.stdout


def test_access_error_is_a_permission_error():
    assert issubclass(AccessError, PermissionError) and issubclass(AccessError, LmdbioError)
