"""The FUSE file system: serves ``SRC`` read-only as ``MNT/node0 .. MNT/node{K-1}`` through the storage model.

Every read the kernel sends is charged to one shared ``StorageModel`` at
its arrival time (``time.monotonic``) and answered when the model says it
completes, so concurrent readers really queue for the emulated targets.
Requests are served by libfuse3's multithreaded loop (up to ``max_threads``
at once). Each node view is its own set of FUSE inodes, hence its own page
cache (``keep_cache``: warm data stays until evicted through that view).
The kernel's request size is the mount's ``max_read`` and its readahead
the bdi's ``read_ahead_kb``, both set from the profile.

Data path of a read: where the kernel can splice and a reply fits in one
pipe (``read_size`` up to 1008 KiB with the default 1 MiB
``/proc/sys/fs/pipe-max-size``), the daemon hands libfuse the source file
descriptor (``read_buf``) and libfuse splices the source's page-cache pages
into ``/dev/fuse``: one kernel copy, no bytes through Python. Otherwise it
``preadv``s into libfuse's own buffer (one extra copy, still no bytes
object). Either way the model is charged and waited for first.

``MNT/.pfs-stats`` is a virtual file: its JSON holds the profile, the kernel
settings in force and the model's counters.

Needs the ``mfusepy`` package and libfuse3 (Debian: ``fuse3``); imported
only by the mount daemon.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import os
import re
import stat
import sys
import threading
import time
import zlib

import mfusepy

from lmdbio.errors import LmdbioError
from .model import Profile, StorageModel

__all__ = ["PfsOperations", "serve", "STATS_NAME", "mount_entry"]

STATS_NAME = ".pfs-stats"
#: Worker threads of the FUSE loop: enough for every rank of a sweep to have a read in flight.
MAX_THREADS = 64
# libfuse3 (fuse_common.h, fuse_lowlevel.c)
FUSE_CAP_SPLICE_WRITE = 1 << 7
FUSE_BUF_IS_FD = 1 << 1
FUSE_BUF_FD_SEEK = 1 << 2
#: A spliced reply needs a pipe of (header pages + 2) pages + header + data bytes (libfuse's
#: fuse_send_data_iov); a larger reply makes libfuse fall back to a malloc'd copy.
_SPLICE_EXTRA_PAGES = 3
_OUT_HEADER = 16


def splice_limit() -> int:
    """The largest read reply libfuse can splice here (0: none): bounded by the pipe size limit.

    Without CAP_SYS_RESOURCE a pipe cannot grow past ``/proc/sys/fs/pipe-max-size``
    (default 1 MiB), so a 1 MiB request does not fit, 1008 KiB does.
    """
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            pipe_max = int(f.read())
    except (OSError, ValueError):
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    return max(0, (pipe_max - _SPLICE_EXTRA_PAGES * page - _OUT_HEADER) // page * page)


def unescape_mount_path(text: str) -> str:
    """A path as /proc/mounts writes it (space as ``\\040``, ...) back to the path."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_entry(mnt: str) -> dict | None:
    """The /proc/self/mountinfo entry of ``mnt`` as ``{'dev': 'MAJ:MIN', 'fstype': ...}``, or None."""
    mnt = os.path.realpath(mnt)
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        parts = line.split()
        sep = parts.index("-")
        point = unescape_mount_path(parts[4])
        if point == mnt:
            found = {"dev": parts[2], "fstype": parts[sep + 1], "source": parts[sep + 2]}
    return found


class _Handle:
    __slots__ = ("node", "fd", "file", "rel", "data")

    def __init__(self, node, fd, file, rel, data=None):
        self.node, self.fd, self.file, self.rel, self.data = node, fd, file, rel, data


class PfsOperations(mfusepy.Operations):
    """Read-only pass-through of ``src`` as ``nodes`` node views, timed by the storage model."""

    use_ns = True

    def __init__(self, src: str, profile: Profile, nodes: int, mnt: str):
        self.src = os.path.realpath(src)
        self.mnt = os.path.realpath(mnt)
        self.profile = profile
        self.nodes = nodes
        self.model = StorageModel(profile, nodes)
        self._handles: dict[int, _Handle] = {}
        self._fh = itertools.count(1)
        self._stat_lock = threading.Lock()
        self.kernel = {"max_read": profile.read_size, "read_ahead_kb": None,
                       "read_ahead_kb_wanted": profile.readahead // 1024, "bdi": None,
                       "splice": False}
        #: serve reads by splicing from the source fd (decided here, confirmed at FUSE init)
        self.use_splice = 0 < profile.read_size <= splice_limit()
        self.ready = False
        self.served = {"eio": 0, "open": 0, "inflight_max": 0}
        self._inflight = 0
        self.started = time.time()

    # -- paths ------------------------------------------------------------
    def _split(self, path: str):
        """``/nodeK/rel`` -> (K, rel); ``/`` -> (None, ''); ``/.pfs-stats`` -> ('stats', '')."""
        parts = path.strip("/").split("/", 1)
        if parts == [""]:
            return None, ""
        head = parts[0]
        if head == STATS_NAME and len(parts) == 1:
            return "stats", ""
        if head.startswith("node") and head[4:].isdigit():
            k = int(head[4:])
            if 0 <= k < self.nodes and head == f"node{k}":
                return k, parts[1] if len(parts) > 1 else ""
        raise mfusepy.FuseOSError(errno.ENOENT)

    def _src(self, rel: str) -> str:
        return os.path.join(self.src, rel) if rel else self.src

    @staticmethod
    def _attrs(st: os.stat_result, **over) -> dict:
        d = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")}
        d.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        d["st_mode"] &= ~0o222  # read-only
        d.update(over)
        return d

    # -- metadata -----------------------------------------------------------
    def getattr(self, path, fh=None):
        node, rel = self._split(path)
        if node == "stats":
            st = os.stat(self.src)
            return self._attrs(st, st_mode=stat.S_IFREG | 0o444, st_nlink=1, st_size=0)
        try:
            st = os.stat(self._src(rel))
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None
        if node is None:
            return self._attrs(st, st_nlink=2 + self.nodes)
        return self._attrs(st)

    def readdir(self, path, fh):
        node, rel = self._split(path)
        if node is None:
            return [".", "..", STATS_NAME] + [f"node{k}" for k in range(self.nodes)]
        if node == "stats":
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        try:
            return [".", ".."] + sorted(os.listdir(self._src(rel)))
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

    def statfs(self, path):
        v = os.statvfs(self.src)
        return {k: getattr(v, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                            "f_files", "f_ffree", "f_favail", "f_namemax")}

    def access(self, path, amode):
        if amode & os.W_OK:
            raise mfusepy.FuseOSError(errno.EROFS)
        self._split(path)
        return 0

    # -- files ----------------------------------------------------------------
    def open(self, path, fi):
        if fi.flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise mfusepy.FuseOSError(errno.EROFS)
        node, rel = self._split(path)
        fh = next(self._fh)
        if node == "stats":
            self._handles[fh] = _Handle(None, -1, 0, "", self.stats_bytes())
            fi.direct_io = 1  # fresh contents on every open, size not known in advance
        elif node is None:
            raise mfusepy.FuseOSError(errno.EISDIR)
        else:
            try:
                fd = os.open(self._src(rel), os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None
            # file number: where its striping starts (stable across runs)
            self._handles[fh] = _Handle(node, fd, zlib.crc32(rel.encode()), rel)
            fi.keep_cache = 1  # warm pages stay in this node view's page cache
            with self._stat_lock:
                self.served["open"] += 1
        fi.fh = fh
        return 0

    def release(self, path, fi):
        h = self._handles.pop(fi.fh, None)
        if h is not None and h.fd >= 0:
            os.close(h.fd)
        return 0

    def read(self, path, size, offset, fh):
        # registers the read callback; _PfsFUSE.read serves it through read_into
        raise mfusepy.FuseOSError(errno.EIO)

    def read_buf(self, path, bufpp, size, offset, fh):
        # registers the read_buf callback (libfuse then prefers it over read); _PfsFUSE.read_buf
        # serves it. serve() removes it (instance attribute None) when splicing does not fit.
        raise mfusepy.FuseOSError(errno.EIO)

    def _charge(self, size: int, offset: int, fh: int):
        """Charge a read to the model: ``(handle, bytes, completion time)``; EIO past the end."""
        t0 = time.monotonic()
        h = self._handles.get(fh)
        if h is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        if h.data is not None:  # the stats file: no cost
            return h, len(h.data[offset:offset + size]), t0
        fsize = os.fstat(h.fd).st_size
        if size and offset >= fsize:
            # the kernel believes the file is longer than it is (truncated under us)
            with self._stat_lock:
                self.served["eio"] += 1
            raise mfusepy.FuseOSError(errno.EIO)
        n = min(size, fsize - offset)
        return h, n, self.model.submit(h.node, fh, offset, n, t0, file=h.file)

    def _wait(self, done: float) -> None:
        with self._stat_lock:
            self._inflight += 1
            self.served["inflight_max"] = max(self.served["inflight_max"], self._inflight)
        try:
            delay = done - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        finally:
            with self._stat_lock:
                self._inflight -= 1

    def read_into(self, addr: int, size: int, offset: int, fh: int) -> int:
        """Serve one kernel read into libfuse's buffer at ``addr``; return the byte count."""
        h, n, done = self._charge(size, offset, fh)
        if h.data is not None:
            ctypes.memmove(addr, h.data[offset:offset + n], n)
            return n
        buf = (ctypes.c_char * n).from_address(addr)
        got = os.preadv(h.fd, [memoryview(buf).cast("B")], offset) if n else 0
        self._wait(done)
        return got

    # -- stats ----------------------------------------------------------------
    def stats(self) -> dict:
        with self._stat_lock:
            served = dict(self.served)
        counters = self.model.counters()
        return {"ready": self.ready, "pid": os.getpid(), "src": self.src, "mnt": self.mnt,
                "nodes": self.nodes, "started": self.started, "profile": self.profile.as_dict(),
                "kernel": dict(self.kernel), "served": served,
                "total": counters["total"], "counters": counters}

    def stats_bytes(self) -> bytes:
        return (json.dumps(self.stats(), indent=1) + "\n").encode()

    # -- setup ----------------------------------------------------------------
    def init_with_config(self, conn, config):
        if config is not None:
            config.kernel_cache = 1
            config.entry_timeout = 3600.0
            config.attr_timeout = 3600.0
            config.negative_timeout = 1.0
        if conn is not None:
            # async readahead requests in flight at once (the kernel default is 12)
            conn.max_read = self.profile.read_size  # must equal the max_read mount option
            if self.use_splice and conn.capable & FUSE_CAP_SPLICE_WRITE:
                # not FUSE_CAP_SPLICE_MOVE: that would steal the pages out of the source's page cache
                conn.want |= FUSE_CAP_SPLICE_WRITE
                self.kernel["splice"] = True
            conn.max_background = MAX_THREADS
            conn.congestion_threshold = MAX_THREADS * 3 // 4
            if self.profile.readahead < conn.max_readahead:
                conn.max_readahead = self.profile.readahead

    def apply_kernel_settings(self, timeout: float = 30.0) -> None:
        """Wait for the mount to appear, then set the bdi readahead from the profile (root only)."""
        deadline = time.monotonic() + timeout
        entry = None
        while time.monotonic() < deadline:
            entry = mount_entry(self.mnt)
            if entry and entry["fstype"].startswith("fuse"):
                break
            time.sleep(0.01)
        else:
            return
        bdi = f"/sys/class/bdi/{entry['dev']}/read_ahead_kb"
        self.kernel["bdi"] = entry["dev"]
        try:
            with open(bdi, "w") as f:
                f.write(str(self.profile.readahead // 1024))
        except OSError as exc:
            print(f"lmdbio pfs: warning: cannot set readahead ({bdi}: {exc.strerror}); "
                  "the kernel default is in force", file=sys.stderr)
        try:
            with open(bdi) as f:
                self.kernel["read_ahead_kb"] = int(f.read())
        except OSError:
            pass
        self.ready = True
        print(f"lmdbio pfs: serving {self.src} as {self.mnt}/node0..node{self.nodes - 1} through "
              f"'{self.profile.name}' (time_scale {self.profile.time_scale}); stop with Ctrl-C, "
              f"SIGTERM or 'lmdbio pfs umount {self.mnt}'", file=sys.stderr, flush=True)


class _FuseBuf(ctypes.Structure):
    """libfuse3's ``struct fuse_buf``."""
    _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p),
                ("fd", ctypes.c_int), ("pos", ctypes.c_int64)]


class _FuseBufvec(ctypes.Structure):
    """libfuse3's ``struct fuse_bufvec`` with its one inline ``fuse_buf`` (mfusepy declares a pointer)."""
    _fields_ = [("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t),
                ("buf", _FuseBuf * 1)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_BUFVEC_SIZE = ctypes.sizeof(_FuseBufvec)


class _PfsFUSE(mfusepy.FUSE):
    """mfusepy's FUSE with reads that move no bytes through Python.

    ``read_buf`` (used when the reply fits a pipe) answers with the source
    fd and offset; libfuse splices the pages to the kernel. ``read`` (the
    fallback) ``preadv``s straight into libfuse's buffer.
    """

    def read(self, path, buf, size, offset, fip):
        addr = ctypes.cast(buf, ctypes.c_void_p).value
        return self.operations.read_into(addr, size, offset, fip.contents.fh)

    def read_buf(self, path, bufpp, size, offset, fip):
        ops = self.operations
        h, n, done = ops._charge(size, offset, fip.contents.fh)
        # libfuse frees the bufvec (and a memory buffer in it) with free()
        ptr = _libc.malloc(_BUFVEC_SIZE)
        if not ptr:
            return -errno.ENOMEM
        bv = _FuseBufvec.from_address(ptr)
        bv.count, bv.idx, bv.off = 1, 0, 0
        b = bv.buf[0]
        b.size = n
        if h.data is not None:  # the stats file: a memory buffer
            mem = _libc.malloc(max(n, 1))
            if not mem:
                _libc.free(ctypes.c_void_p(ptr))
                return -errno.ENOMEM
            ctypes.memmove(mem, h.data[offset:offset + n], n)
            b.flags, b.mem, b.fd, b.pos = 0, mem, -1, 0
        else:
            ops._wait(done)
            b.flags, b.mem, b.fd, b.pos = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK, None, h.fd, offset
        ctypes.cast(bufpp, ctypes.POINTER(ctypes.c_void_p))[0] = ptr
        return 0


def serve(src: str, mnt: str, profile: Profile, nodes: int, exit_with_parent: bool = False) -> None:
    """Mount and serve until unmounted or signalled (SIGINT/SIGTERM/SIGHUP unmount cleanly)."""
    if exit_with_parent:
        # die (cleanly: libfuse unmounts on SIGTERM) when the process that mounted us dies
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, 15, 0, 0, 0)
        if os.getppid() == 1:
            return
    ops = PfsOperations(src, profile, nodes, mnt)
    if not ops.use_splice:
        ops.read_buf = None  # mfusepy then registers read only
    threading.Thread(target=ops.apply_kernel_settings, daemon=True, name="pfs-settings").start()
    try:
        _PfsFUSE(ops, mnt, foreground=True, raw_fi=True, ro=True, fsname=f"lmdbio-pfs:{profile.name}",
                 subtype="lmdbio-pfs", max_read=profile.read_size, max_threads=MAX_THREADS,
                 max_idle_threads=MAX_THREADS, default_permissions=True)
    except RuntimeError as exc:
        # libfuse's fuse_main returns 8 when its loop ends on a signal (SIGINT/SIGTERM/SIGHUP):
        # after a ready mount that is the normal way to stop
        if not ops.ready:
            raise LmdbioError(f"cannot mount {mnt} (libfuse status {exc}); see the messages above") from None
    print(f"lmdbio pfs: {mnt} unmounted", file=sys.stderr, flush=True)
