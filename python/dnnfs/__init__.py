"""Segmented, resumable saves and loads of parameter files on dnnfs.

dnnfs tracks a "session" on a file (the ``user.dnnfs.session`` virtual
xattr): the file is split into one segment per thread, each thread writes
(or reads) only its own segment, in order, and the file system persists
each segment's progress (its *tail*) as it goes. If the job, the daemon or
the machine dies, the session stays open with the persisted tails, and the
data before each tail is durable. Calling :func:`save` again with the same
size and thread count resumes it: only ``[tail, end)`` of each unfinished
segment is written.

Standard library only (``os.pwrite``/``os.preadv``, ``os.setxattr``,
``json``, ``threading``); the threads release the GIL in the system calls,
so they run in parallel::

    import dnnfs
    stats = dnnfs.save("/mnt/dnnfs/ckpt/w.bin", buf, threads=4)
    data = dnnfs.load("/mnt/dnnfs/ckpt/w.bin", threads=4)

Embedding tables (the SSD tier) are read with batched lookups through a
table's request file: :class:`Table` sends gather / sum / mean requests
(torch.nn.EmbeddingBag style bags) and returns float32 rows, as NumPy
arrays when NumPy is importable, else as lists::

    t = dnnfs.Table("/mnt/dnnfs/emb/user.tbl")
    pooled = t.lookup(indices, offsets, mode="sum")   # (bags, dim) float32
    tag = t.submit(indices, offsets, mode="mean")     # many in flight...
    tag, rows = t.next()                              # ...in completion order

The Go package ``github.com/dnnfs/dnnfs/client`` does the same.
"""

import collections
import errno
import json
import operator
import os
import struct
import threading
import time

__all__ = [
    "save", "load", "session", "abandon",
    "DnnfsError", "NotDnnfsError", "SessionConflictError", "IncompleteError", "SegmentError",
    "XATTR_SESSION", "XATTR_SOURCE", "CHUNK", "DEFAULT_THREADS",
    "Table", "lookup", "create_table", "table_info", "encode_lookup", "decode_result", "to_float32", "Result",
    "RequestError", "LookupFailedError", "ProtocolError", "NothingInFlightError", "TableClosedError",
    "XATTR_TABLE", "LOOKUP_SUFFIX", "GATHER", "SUM", "MEAN", "F32", "F16", "BF16",
]

#: Set ``threads=N,size=BYTES[,mode=write|read]`` to start a session, read it
#: for its JSON state, remove it to abandon the session.
XATTR_SESSION = "user.dnnfs.session"
#: Virtual xattr present on every file of a dnnfs mount.
_XATTR_LOCKS = "user.dnnfs.locks"
#: Ordinary xattr where ``save(..., source=...)`` records what is being
#: saved, so that a save of something else does not resume its session.
XATTR_SOURCE = "user.dnnfs-save.source"
#: Bytes per pwrite/pread (the mount's max_write).
CHUNK = (1 << 20) - 4096
DEFAULT_THREADS = 4
_MAX_THREADS = 1024
_SEG_ALIGN = 4096  # a session needs one 4 KiB block per thread at least
_CLOSE_WAIT = 5.0  # seconds; read progress is recorded just after the reply


class DnnfsError(Exception):
    """Base class of this module's errors."""


class NotDnnfsError(DnnfsError):
    """The file is not on a dnnfs mount."""


class SessionConflictError(DnnfsError):
    """The file has an open session this call cannot resume."""


class IncompleteError(DnnfsError):
    """load() of a file whose write session is unfinished."""


class SegmentError(DnnfsError):
    """A failure inside one segment: ``path``, ``segment``, ``offset``,
    ``op`` ('write', 'read', ...) and the underlying ``cause``."""

    def __init__(self, path, segment, offset, op, cause):
        super().__init__("%s: segment %d: %s at offset %d: %s" % (path, segment, op, offset, _why(cause)))
        self.path, self.segment, self.offset, self.op, self.cause = path, segment, offset, op, cause


def _why(e):
    """The reason of ``e`` for a message that names the path itself: an
    OSError's errno and text without the descriptor number Python appends
    to errors of calls given one (os.getxattr(fd, ...) fails with
    "No data available: 3")."""
    if isinstance(e, OSError) and e.errno and e.strerror:
        return "[Errno %d] %s" % (e.errno, e.strerror)
    return str(e)


class _naming:
    """Re-raise an OSError of a descriptor-based call (no file name, or
    the descriptor number as its file name) with ``path`` as its file name,
    so that the error says which file failed (``with _naming(path): ...``)."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, typ, e, tb):
        if (isinstance(e, OSError) and not isinstance(e, DnnfsError) and e.errno
                and (e.filename is None or isinstance(e.filename, int))):
            raise type(e)(e.errno, e.strerror, self.path) from e
        return False


def _session_fd(fd, path):
    try:
        raw = os.getxattr(fd, XATTR_SESSION)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise DnnfsError("%s: reading %s: %s" % (path, XATTR_SESSION, _why(e))) from e
    return json.loads(raw)


def _check_dnnfs(fd, path):
    try:
        os.getxattr(fd, _XATTR_LOCKS)
    except OSError as e:
        raise NotDnnfsError("%s: not on a dnnfs mount (reading %s: %s)" % (path, _XATTR_LOCKS, _why(e))) from e


def session(path):
    """Return the open session of ``path`` as a dict, or None.

    The dict is the file system's JSON: ``threads``, ``size``, ``mode``
    ('write' or 'read'), ``done`` and ``segments``, a list of
    ``{index, start, length, tail, done, pid}`` where ``tail`` is the resume
    offset: ``[start, tail)`` of the segment is done and durable.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        _check_dnnfs(fd, path)
        return _session_fd(fd, path)
    finally:
        _close(fd)


def abandon(path):
    """Drop the open session of ``path`` (the data stays as it is).
    Raises OSError(ENODATA) if none is open."""
    os.removexattr(path, XATTR_SESSION)


def _threads_for(threads, size):
    if threads is None or threads == 0:
        threads = DEFAULT_THREADS
    if threads < 0:
        raise ValueError("threads=%d: want 0 (default) or more" % threads)
    return min(threads, _MAX_THREADS, size // _SEG_ALIGN)


def _start(fd, path, threads, size, mode):
    value = "threads=%d,size=%d,mode=%s" % (threads, size, mode)
    try:
        os.setxattr(fd, XATTR_SESSION, value.encode())
    except OSError as e:
        raise DnnfsError("%s: starting a %s session (setxattr %s=%r): %s" % (path, mode, XATTR_SESSION, value, _why(e))) from e
    s = _session_fd(fd, path)
    if s is None or s["mode"] != mode or s["size"] != size or s["threads"] != threads:
        raise DnnfsError("%s: the %s session just started is not there (got %r)" % (path, mode, s))
    return s


def _remove_session(fd, path):
    try:
        os.removexattr(fd, XATTR_SESSION)
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise DnnfsError("%s: abandoning a stale session: %s" % (path, _why(e))) from e


def _remaining(s):
    return sum(g["start"] + g["length"] - g["tail"] for g in s["segments"])


def _conflict(path, s, mode, threads, size):
    return SessionConflictError(
        "%s: a %s session (threads=%d, size=%d, %d bytes left) is open, this %s wants threads=%d, size=%d; "
        "call again with the same threads and size to resume it, or abandon it (setfattr -x %s FILE)"
        % (path, s["mode"], s["threads"], s["size"], _remaining(s), mode, threads, size, XATTR_SESSION))


def _run_segments(path, segments, work, op):
    """Run work(offset, length) over [tail, end) of every unfinished segment,
    one thread per segment, CHUNK bytes at a time, in order. Returns
    (bytes done, bytes skipped); raises the first SegmentError."""
    skipped = 0
    todo = []
    for g in segments:
        end = g["start"] + g["length"]
        tail = end if g.get("done") else g["tail"]
        skipped += tail - g["start"]
        if tail < end:
            todo.append((g["index"], tail, end))
    stop = threading.Event()
    errors = []
    done = [0] * len(todo)

    def run(k, index, off, end):
        try:
            while off < end and not stop.is_set():
                n = min(CHUNK, end - off)
                work(off, n)
                off += n
                done[k] += n
        except BaseException as e:  # noqa: B902 - reported to the caller
            errors.append(SegmentError(path, index, off, op, e))
            stop.set()

    threads = [threading.Thread(target=run, args=(k,) + t, name="dnnfs-seg-%d" % t[0]) for k, t in enumerate(todo)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        errors[0].bytes_done = sum(done)
        raise errors[0]
    return sum(done), skipped


def _wait_closed(fd, path, what):
    deadline = time.monotonic() + _CLOSE_WAIT
    delay = 0.001
    while True:
        s = _session_fd(fd, path)
        if s is None:
            return
        if time.monotonic() > deadline:
            open_segs = ["segment %d [%d, %d) at tail %d" % (g["index"], g["start"], g["start"] + g["length"], g["tail"])
                         for g in s["segments"] if not g["done"]]
            raise DnnfsError("%s: every byte was %s but the %s session is still open: %s unfinished"
                             % (path, what, s["mode"], ", ".join(open_segs)))
        time.sleep(delay)
        delay = min(2 * delay, 0.1)


def _as_bytes_view(data):
    mv = memoryview(data)
    if not mv.c_contiguous:  # e.g. a strided NumPy view: save a C-order copy
        mv = memoryview(mv.tobytes())
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def save(path, data, threads=DEFAULT_THREADS, source=None):
    """Write ``data`` (bytes, bytearray, memoryview, a NumPy array or any
    object with the buffer protocol) to ``path`` from ``threads`` threads,
    one segment each, through a write session, then fsync.

    ``path`` is created if missing (never truncated first: an interrupted
    save's data is what a resume keeps). If ``path`` has an open write
    session of the same size and thread count — an interrupted save — it is
    resumed: each unfinished segment is written from its persisted tail.
    ``source`` (optional str) names what is being saved; it is stored on the
    file, and an open session whose stored source differs is abandoned
    instead of resumed. Files under 4 KiB are written without a session.

    Returns a dict: ``size``, ``threads``, ``bytes`` (written now),
    ``skipped`` (already done by the interrupted save), ``resumed``,
    ``seconds``. Raises SegmentError naming the segment and offset of a
    failure, SessionConflictError, NotDnnfsError, or DnnfsError when the
    session did not close after every byte was written.
    """
    t0 = time.monotonic()
    mv = _as_bytes_view(data)

    def write_range(fd, off, length):
        _write_all(fd, mv, off, length)

    with _naming(path):
        return _save_ranges(path, mv.nbytes, write_range, threads, source, t0)


def _save_ranges(path, size, write_range, threads, source, t0):
    """save() of ``size`` bytes that write_range(fd, offset, length) writes
    (called from one thread per segment, in order within a segment)."""
    n = _threads_for(threads, size)
    created = False
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        created = True
    try:
        try:
            _check_dnnfs(fd, path)
        except NotDnnfsError:
            if created:
                os.unlink(path)  # leave nothing behind outside dnnfs
            raise
        s = _session_fd(fd, path)
        if s is not None and source is not None and s["mode"] == "write":
            try:
                stored = os.getxattr(fd, XATTR_SOURCE).decode()
            except OSError:
                stored = None
            if stored != source:
                _remove_session(fd, path)
                s = None
        if s is not None and s["mode"] == "write" and os.fstat(fd).st_size != s["size"]:
            # Truncated while the session was open (open(O_TRUNC) by another
            # writer, say): its tails count data that is gone.
            _remove_session(fd, path)
            s = None
        stats = {"size": size, "threads": max(n, 1), "bytes": 0, "skipped": 0, "resumed": False}
        if n == 0:  # under one block: one small write, no session
            if s is not None:
                raise _conflict(path, s, "write", 0, size)
            os.ftruncate(fd, size)
            write_range(fd, 0, size)
            os.fsync(fd)
            stats.update(bytes=size, seconds=time.monotonic() - t0)
            return stats
        if s is None:
            try:
                if source is None:
                    os.removexattr(fd, XATTR_SOURCE)
                else:
                    os.setxattr(fd, XATTR_SOURCE, source.encode())
            except OSError as e:
                if e.errno != errno.ENODATA:
                    raise DnnfsError("%s: recording the source in %s: %s" % (path, XATTR_SOURCE, _why(e))) from e
            s = _start(fd, path, n, size, "write")
        elif s["mode"] == "write" and s["size"] == size and s["threads"] == n:
            stats["resumed"] = True
        else:
            raise _conflict(path, s, "write", n, size)

        def work(off, length):
            write_range(fd, off, length)

        stats["bytes"], stats["skipped"] = _run_segments(path, s["segments"], work, "write")
        os.fsync(fd)
        _wait_closed(fd, path, "written")
        stats["seconds"] = time.monotonic() - t0
        return stats
    finally:
        _close(fd)


def _close(fd):
    # A close error (a dead mount, say) must not hide the error being
    # raised; success was already decided by fsync and the session state.
    try:
        os.close(fd)
    except OSError:
        pass


def _write_all(fd, mv, off, length):
    end = off + length
    while off < end:
        k = os.pwrite(fd, mv[off:end], off)
        if k <= 0:
            raise OSError(errno.EIO, "pwrite wrote %d bytes" % k)
        off += k


def _read_all(fd, mv, off, length):
    end = off + length
    while off < end:
        k = os.preadv(fd, [mv[off:end]], off)
        if k <= 0:
            raise OSError(errno.EIO, "unexpected end of file at offset %d" % off)
        off += k


# Read sessions this process is filling, by (path, inode, size, threads):
# the buffer they fill. Only those are resumed, and only into that buffer,
# because only there do the bytes before the tails already sit.
_loads = {}
_loads_lock = threading.Lock()


def load(path, threads=DEFAULT_THREADS, out=None, stats=None):
    """Read the whole file at ``path`` from ``threads`` threads, one segment
    each, through a read session, and return it as a bytearray (or in
    ``out``).

    ``out``, if given, is a writable buffer (bytearray, NumPy array, ...) of
    at least the file's size; it is filled and returned. If a load of the
    same file into the same ``out`` was interrupted in this process (e.g.
    the daemon restarted), only what it had not read is read: each
    unfinished segment from its tail. An open read session of another
    process or buffer is stale and is restarted. A file whose write session
    is unfinished is refused (IncompleteError). ``stats``, if a dict, gets
    ``size``, ``threads``, ``bytes``, ``skipped``, ``resumed``, ``seconds``.
    """
    with _naming(path):
        return _load(path, threads, out, stats)


def _load(path, threads, out, stats):
    t0 = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    try:
        _check_dnnfs(fd, path)
        st = os.fstat(fd)
        size = st.st_size
        n = _threads_for(threads, size)
        buf = out if out is not None else bytearray(size)
        mv = memoryview(buf)
        if mv.readonly or not mv.c_contiguous or mv.nbytes < size:
            raise ValueError("out: need a writable C-contiguous buffer of at least %d bytes" % size)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if mv.nbytes < size:
            raise ValueError("out: need a writable buffer of at least %d bytes" % size)
        s = _session_fd(fd, path)
        if s is not None and s["mode"] == "write":
            raise IncompleteError("%s: the file has an unfinished write session: its contents are incomplete "
                                  "(%d of %d bytes left to write; resume the save, or abandon it)"
                                  % (path, _remaining(s), s["size"]))
        info = {"size": size, "threads": max(n, 1), "bytes": 0, "skipped": 0, "resumed": False}

        def work(off, length):
            _read_all(fd, mv, off, length)

        if n == 0:
            if s is not None:
                raise _conflict(path, s, "read", 0, size)
            info["bytes"], _ = _run_segments(path, [{"index": 0, "start": 0, "length": size, "tail": 0}], work, "read")
        else:
            key = (os.path.realpath(path), st.st_ino, size, n)
            with _loads_lock:
                mine = out is not None and _loads.get(key) is out
            if s is not None and not mine:
                _remove_session(fd, path)
                s = None
            elif s is not None and (s["size"] != size or s["threads"] != n):
                raise _conflict(path, s, "read", n, size)
            elif s is not None:
                info["resumed"] = True
            tracked = True
            if s is None:
                try:
                    s = _start(fd, path, n, size, "read")
                except DnnfsError as e:
                    cause = e.__cause__
                    if not (isinstance(cause, OSError) and cause.errno in (errno.EACCES, errno.EPERM, errno.EROFS)):
                        raise
                    # No permission to set the xattr: load untracked.
                    tracked = False
                    s = {"segments": _split(size, n)}
            if tracked and out is not None:
                with _loads_lock:
                    _loads[key] = out
            info["bytes"], info["skipped"] = _run_segments(path, s["segments"], work, "read")
            if tracked:
                _wait_closed(fd, path, "read")
                with _loads_lock:
                    _loads.pop(key, None)
        info["seconds"] = time.monotonic() - t0
        if stats is not None:
            stats.update(info)
        return buf
    finally:
        _close(fd)


def _split(size, threads):
    seg = size // threads // _SEG_ALIGN * _SEG_ALIGN
    out = []
    for i in range(threads):
        start = i * seg
        length = size - start if i == threads - 1 else seg
        out.append({"index": i, "start": start, "length": length, "tail": start, "done": False})
    return out


# ---------------------------------------------------------------------
# Embedding tables: batched lookups through a table's request file.
#
# A table T (an empty file made a table with setxattr user.dnnfs.table)
# has a request file T.lookup: one write() is one whole request, one
# read() returns the next completed result whole, in completion order,
# matched to its request by tag. The wire format is specified in the
# package doc of the Go package embedding/wire (embedding/wire/doc.go).

#: Set ``rows=R,dim=D,dtype=f32|f16|bf16`` on an empty file to make it a
#: table; read it back for the shape (plus shard_rows, shards, ...).
XATTR_TABLE = "user.dnnfs.table"
#: A table's request file is its path + LOOKUP_SUFFIX.
LOOKUP_SUFFIX = ".lookup"

GATHER, SUM, MEAN = 0, 1, 2
F32, F16, BF16 = 1, 2, 3

_MODES = {"gather": GATHER, "sum": SUM, "mean": MEAN}
_MODE_NAMES = {v: k for k, v in _MODES.items()}
_DTYPES = {"f32": F32, "float32": F32, "fp32": F32, "f16": F16, "float16": F16, "fp16": F16, "half": F16,
           "bf16": BF16, "bfloat16": BF16}
_DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16"}
_DTYPE_SIZES = {F32: 4, F16: 2, BF16: 2}

_REQ_MAGIC = 0x514C4E44  # "DNLQ"
_RES_MAGIC = 0x524C4E44  # "DNLR"
_REQ_VERSION = 1
_FLAG_WEIGHTS = 1
# magic, version, mode, dtype, tag, flags, reserved, n, b, total bytes
_REQ_HEAD = struct.Struct("<IHBBQIIQQQ")
# magic, status, tag, payload bytes, count, payload dtype, 3 reserved
_RES_HEAD = struct.Struct("<IIQQIB3x")
_INT64_MAX = (1 << 63) - 1

# NumPy, imported on first use: None = not tried yet, False = not there.
_np_mod = None


def _numpy():
    global _np_mod
    if _np_mod is None:
        try:
            import numpy
            _np_mod = numpy
        except ImportError:
            _np_mod = False
    return _np_mod or None


class RequestError(DnnfsError, ValueError):
    """A request this module refuses to send (the file system would fail
    its write with EINVAL): ``errno`` is errno.EINVAL."""

    errno = errno.EINVAL


class LookupFailedError(DnnfsError, OSError):
    """The file system failed a request (a non-zero result status):
    ``errno`` (errno.EIO: a device failed) and ``tag``."""

    def __init__(self, err, tag, path=""):
        super().__init__(err, "%slookup %d failed: %s" % (path + ": " if path else "", tag, os.strerror(err)))
        self.tag = tag


class ProtocolError(DnnfsError):
    """A result that does not follow the wire format or does not fit its
    request."""


class NothingInFlightError(DnnfsError):
    """Table.next() with no submitted request left to return."""


class TableClosedError(DnnfsError, ValueError):
    """The Table was closed."""


class Result(collections.namedtuple("Result", "tag status count dtype payload")):
    """One decoded result: ``tag``, ``status`` (0 or an errno), ``count``
    (rows for gather, bags for sum and mean), ``dtype`` of the payload
    (the table's for gather, F32 for sum and mean) and ``payload`` (count
    rows of dim little-endian values)."""

    __slots__ = ()

    def values(self, dim):
        """The payload as float32: see :func:`to_float32`."""
        return to_float32(self.payload, self.dtype, self.count, dim)


def _mode(mode):
    if isinstance(mode, str):
        m = _MODES.get(mode.lower())
        if m is None:
            raise RequestError("mode %r: want 'gather', 'sum' or 'mean'" % mode)
        return m
    try:
        m = operator.index(mode)
    except TypeError:
        m = None
    if m not in _MODE_NAMES:
        raise RequestError("mode %r: want 'gather', 'sum' or 'mean' (0, 1, 2)" % (mode,))
    return m


def _dtype(dtype):
    if isinstance(dtype, str):
        d = _DTYPES.get(dtype.lower())
        if d is None:
            raise RequestError("dtype %r: want 'f32', 'f16' or 'bf16'" % dtype)
        return d
    try:
        d = operator.index(dtype)
    except TypeError:
        d = None
    if d not in _DTYPE_NAMES:
        raise RequestError("dtype %r: want 'f32', 'f16' or 'bf16' (1, 2, 3)" % (dtype,))
    return d


def _tensor_to_host(x):
    # A torch tensor (on any device) without importing torch.
    if hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy"):
        return x.detach().cpu()
    return x


def _ints(x, what):
    """indices or offsets as a little-endian int64 NumPy array, or a list
    of ints without NumPy."""
    x = _tensor_to_host(x)
    np = _numpy()
    if np is not None:
        a = np.asarray(x)
        if a.ndim != 1:
            raise RequestError("%s: want a 1-D sequence of integers, got shape %s" % (what, a.shape))
        if a.size == 0:
            return np.zeros(0, dtype="<i8")
        if a.dtype.kind not in "iu":
            raise RequestError("%s: want integers, got %s" % (what, a.dtype))
        if a.dtype.kind == "u" and a.dtype.itemsize == 8 and int(a.max()) > _INT64_MAX:
            raise RequestError("%s: %d does not fit int64" % (what, int(a.max())))
        return a.astype("<i8", copy=False)
    if hasattr(x, "tolist"):
        x = x.tolist()
    try:
        out = [operator.index(v) for v in x]
    except TypeError as e:
        raise RequestError("%s: want a 1-D sequence of integers (%s)" % (what, e)) from None
    for i, v in enumerate(out):
        if not -_INT64_MAX - 1 <= v <= _INT64_MAX:
            raise RequestError("%s[%d] = %d does not fit int64" % (what, i, v))
    return out


def _floats(x, what):
    x = _tensor_to_host(x)
    np = _numpy()
    if np is not None:
        a = np.asarray(x)
        if a.ndim != 1:
            raise RequestError("%s: want a 1-D sequence of numbers, got shape %s" % (what, a.shape))
        return a.astype("<f4")
    if hasattr(x, "tolist"):
        x = x.tolist()
    return [float(v) for v in x]


def _first(cond_array):
    return int(_numpy().flatnonzero(cond_array)[0])


def _check(mode, idx, off, w, rows=None):
    """Validate converted arguments like the file system does."""
    n, b = len(idx), len(off)
    if mode == GATHER and b:
        raise RequestError("offsets: %d offsets with mode gather (want none)" % b)
    if mode != GATHER and b == 0 and n:
        raise RequestError("offsets: none with %d indices: mode %s pools bags (use offsets [0] for one bag)"
                           % (n, _MODE_NAMES[mode]))
    if w is not None and mode != SUM:
        raise RequestError("weights: per-sample weights need mode 'sum', not %r" % _MODE_NAMES[mode])
    if w is not None and len(w) != n:
        raise RequestError("weights: %d weights for %d indices" % (len(w), n))
    np = _numpy()
    if np is not None and not isinstance(idx, list):
        if n and (idx < 0).any():
            i = _first(idx < 0)
            raise RequestError("indices: indices[%d] = %d is negative" % (i, idx[i]))
        if rows is not None and n and (idx >= rows).any():
            i = _first(idx >= rows)
            raise RequestError("indices: indices[%d] = %d out of range [0, %d)" % (i, idx[i], rows))
        if b:
            if off[0] != 0:
                raise RequestError("offsets: offsets[0] = %d, want 0" % off[0])
            if (off > n).any():
                j = _first(off > n)
                raise RequestError("offsets: offsets[%d] = %d > %d indices" % (j, off[j], n))
            d = off[1:] < off[:-1]
            if d.any():
                j = _first(d) + 1
                raise RequestError("offsets: offsets[%d] = %d < offsets[%d] = %d (must not decrease)"
                                   % (j, off[j], j - 1, off[j - 1]))
        return
    for i, v in enumerate(idx):
        if v < 0:
            raise RequestError("indices: indices[%d] = %d is negative" % (i, v))
        if rows is not None and v >= rows:
            raise RequestError("indices: indices[%d] = %d out of range [0, %d)" % (i, v, rows))
    for j, v in enumerate(off):
        if j == 0 and v != 0:
            raise RequestError("offsets: offsets[0] = %d, want 0" % v)
        if v > n:
            raise RequestError("offsets: offsets[%d] = %d > %d indices" % (j, v, n))
        if j and v < off[j - 1]:
            raise RequestError("offsets: offsets[%d] = %d < offsets[%d] = %d (must not decrease)" % (j, v, j - 1, off[j - 1]))


def _pack(fmt, values):
    if isinstance(values, list):
        return struct.pack("<%d%s" % (len(values), fmt), *values)
    return values.tobytes()


def _encode(tag, mode, dtype, idx, off, w):
    n, b = len(idx), len(off)
    flags, total = 0, _REQ_HEAD.size + 8 * n + 8 * b
    if w is not None:
        flags |= _FLAG_WEIGHTS
        total += 4 * n
    parts = [_REQ_HEAD.pack(_REQ_MAGIC, _REQ_VERSION, mode, dtype, tag, flags, 0, n, b, total),
             _pack("q", idx), _pack("q", off)]
    if w is not None:
        parts.append(_pack("f", w))
    out = b"".join(parts)
    assert len(out) == total
    return out


def encode_lookup(tag, mode, dtype, indices, offsets=None, weights=None):
    """Build one request (bytes). ``mode``: 'gather', 'sum' or 'mean' (or
    GATHER, SUM, MEAN); ``dtype``: the dtype the caller expects the table
    to have, 'f32', 'f16' or 'bf16' (or F32, F16, BF16). ``indices``
    (row numbers, >= 0) and ``offsets`` (bag starts as in
    torch.nn.EmbeddingBag: offsets[0] = 0, not decreasing, <= len(indices);
    none for gather; at least one for sum and mean when there are indices)
    may be lists, NumPy arrays or torch tensors. ``weights``, per-sample
    weights (one per index), need mode 'sum'. Raises RequestError."""
    mode, dtype = _mode(mode), _dtype(dtype)
    if not 0 <= operator.index(tag) <= (1 << 64) - 1:
        raise RequestError("tag %d: want an unsigned 64-bit integer" % tag)
    idx = _ints(indices, "indices")
    off = _ints(offsets if offsets is not None else [], "offsets")
    w = _floats(weights, "weights") if weights is not None else None
    _check(mode, idx, off, w)
    return _encode(tag, mode, dtype, idx, off, w)


def decode_result(buf):
    """Decode one whole result (header and payload, nothing after) into a
    :class:`Result`; the payload is a memoryview of ``buf``. A non-zero
    status is not an error here. Raises ProtocolError."""
    mv = memoryview(buf).cast("B")
    if len(mv) < _RES_HEAD.size:
        raise ProtocolError("result: %d bytes, shorter than the %d-byte header" % (len(mv), _RES_HEAD.size))
    magic, status, tag, plen, count, dtype = _RES_HEAD.unpack_from(mv)
    if magic != _RES_MAGIC:
        raise ProtocolError("result: magic %#x, want %#x (\"DNLR\")" % (magic, _RES_MAGIC))
    if plen != len(mv) - _RES_HEAD.size:
        raise ProtocolError("result %d: header says %d payload bytes, %d follow" % (tag, plen, len(mv) - _RES_HEAD.size))
    r = Result(tag, status, count, dtype, mv[_RES_HEAD.size:])
    if status:
        if plen:
            raise ProtocolError("result %d: status %d with %d payload bytes (want none)" % (tag, status, plen))
        return r
    size = _DTYPE_SIZES.get(dtype)
    if size is None:
        raise ProtocolError("result %d: payload dtype %d, want 1 f32, 2 f16 or 3 bf16" % (tag, dtype))
    if plen % size:
        raise ProtocolError("result %d: %d payload bytes are not whole %s values" % (tag, plen, _DTYPE_NAMES[dtype]))
    if (count == 0 and plen) or (count and plen // size % count):
        raise ProtocolError("result %d: %d %s values do not make %d equal rows" % (tag, plen // size, _DTYPE_NAMES[dtype], count))
    return r


def to_float32(payload, dtype, count, dim):
    """Convert ``count`` rows of ``dim`` little-endian values of ``dtype``
    (F32, F16, BF16 or their names) to float32: a NumPy array of shape
    (count, dim) when NumPy is importable, else a list of lists of floats.
    f16 uses struct's 'e' format; bf16 is the upper half of a float32."""
    dtype = _dtype(dtype)
    size = _DTYPE_SIZES[dtype]
    mv = memoryview(payload).cast("B")
    if len(mv) != count * dim * size:
        raise ProtocolError("payload of %d bytes, want %d rows of %d %s values" % (len(mv), count, dim, _DTYPE_NAMES[dtype]))
    np = _numpy()
    if np is not None:
        if dtype == F32:
            a = np.frombuffer(mv, dtype="<f4").astype(np.float32, copy=False)
        elif dtype == F16:
            a = np.frombuffer(mv, dtype="<f2").astype(np.float32)
        else:
            a = (np.frombuffer(mv, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        return a.reshape(count, dim)
    if dtype == F32:
        flat = struct.unpack("<%df" % (count * dim), mv)
    elif dtype == F16:
        flat = struct.unpack("<%de" % (count * dim), mv)
    else:
        halves = struct.unpack("<%dH" % (count * dim), mv)
        flat = struct.unpack("<%df" % len(halves), struct.pack("<%dI" % len(halves), *[h << 16 for h in halves]))
    return [list(flat[i * dim:(i + 1) * dim]) for i in range(count)]


def _parse_table_xattr(path, raw):
    value = raw.decode() if isinstance(raw, (bytes, bytearray)) else raw
    value = value.rstrip("\x00 \t\r\n")
    info = {}
    for kv in value.split(","):
        k, sep, v = kv.strip().partition("=")
        if not sep:
            raise DnnfsError("%s: %s %r: %r is not key=value" % (path, XATTR_TABLE, value, kv))
        info[k] = int(v) if v.isdigit() else v
    try:
        info["dtype"] = _DTYPE_NAMES[_dtype(info["dtype"])]
        if not (isinstance(info["rows"], int) and isinstance(info["dim"], int) and info["rows"] > 0 and info["dim"] > 0):
            raise ValueError("rows and dim must be positive integers")
    except (KeyError, ValueError) as e:
        raise DnnfsError("%s: %s %r: want rows=R,dim=D,dtype=f32|f16|bf16 (%s)" % (path, XATTR_TABLE, value, e)) from None
    return info


def table_info(path):
    """The shape of the table at ``path``, from its user.dnnfs.table xattr:
    a dict with ``rows``, ``dim``, ``dtype`` ('f32', 'f16' or 'bf16') and
    the other keys the file system reports (``shard_rows``, ``shards``...)."""
    try:
        raw = os.getxattr(path, XATTR_TABLE)
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise DnnfsError("%s: reading %s: %s" % (path, XATTR_TABLE, e)) from e
        try:
            os.getxattr(path, _XATTR_LOCKS)
        except OSError as e2:
            raise NotDnnfsError("%s: not on a dnnfs mount (reading %s: %s)" % (path, _XATTR_LOCKS, e2)) from e2
        raise DnnfsError("%s: not an embedding table (no %s; make one with setfattr -n %s -v "
                         "'rows=R,dim=D,dtype=f32' on an empty file)" % (path, XATTR_TABLE, XATTR_TABLE)) from e
    return _parse_table_xattr(path, raw)


def create_table(path, rows, dim, dtype="f32"):
    """Make the file at ``path`` (created if missing; it must be empty) a
    table of ``rows`` rows of ``dim`` values of ``dtype``. Row i is then at
    byte i * dim * itemsize of the file: fill it with os.pwrite."""
    value = "rows=%d,dim=%d,dtype=%s" % (rows, dim, _DTYPE_NAMES[_dtype(dtype)])
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            os.setxattr(fd, XATTR_TABLE, value.encode())
        except OSError as e:
            raise DnnfsError("%s: setxattr %s=%r: %s" % (path, XATTR_TABLE, value, _why(e))) from e
    finally:
        _close(fd)


class _Pending:
    __slots__ = ("count", "dtype", "size", "sync", "written")

    def __init__(self, count, dtype, size, sync):
        self.count, self.dtype, self.size, self.sync, self.written = count, dtype, size, sync, False


class Table:
    """An open embedding table: its shape (``rows``, ``dim``, ``dtype``,
    ``info``) and its request file, ``path + '.lookup'``.

    Safe to share between threads: each :meth:`lookup` waits for its own
    result (whichever thread is reading hands results to their owners),
    and :meth:`submit` / :meth:`next` keep many requests in flight. Results
    of lookup() never come out of next() and the other way round. Use it
    as a context manager or call :meth:`close`.
    """

    def __init__(self, path):
        info = table_info(path)
        fd = os.open(path + LOOKUP_SUFFIX, os.O_RDWR | os.O_CLOEXEC)
        self._setup(path, info, fd)

    def _setup(self, path, info, fd):
        self.path = path
        self.info = info
        self.rows, self.dim, self.dtype = info["rows"], info["dim"], info["dtype"]
        self._dt = _dtype(self.dtype)
        self._lpath = path + LOOKUP_SUFFIX
        self._fd = fd
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._next_tag = 1
        self._pending = {}  # tag -> _Pending, requests not yet answered
        self._sizes = collections.Counter()  # expected result sizes of _pending
        self._inflight = 0  # pending requests whose write returned
        self._async = 0  # submitted requests next() has not returned yet
        self._ready = collections.deque()  # (Result, exception) of submitted requests, completion order
        self._done = {}  # tag -> (Result, exception) of lookup() requests
        self._reading = False
        self._answered = 0  # results delivered so far
        self._writing = 0  # submits between registering and counting their request
        self._eofs = 0  # reads in a row that returned 0 bytes
        self._users = 0  # threads in a system call on the descriptor
        self._err = None  # sticky (class, message, cause): closed or broken
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<dnnfs.Table %s rows=%d dim=%d dtype=%s>" % (self.path, self.rows, self.dim, self.dtype)

    # System calls, one each (a fake in tests).
    def _sys_write(self, buf):
        return os.write(self._fd, buf)

    def _sys_read(self, mv):
        return os.readv(self._fd, [mv])

    def _sys_close(self):
        os.close(self._fd)

    def _sys_wake(self):
        # A close() of the file makes the reads waiting on it return 0
        # bytes: close a duplicate of the descriptor.
        os.close(os.dup(self._fd))

    def lookup(self, indices, offsets=None, mode="sum", weights=None):
        """Run one request and wait for its result.

        ``mode`` 'gather' returns the rows named by ``indices`` (shape
        (len(indices), dim)); 'sum' and 'mean' pool bags like
        torch.nn.EmbeddingBag: bag j is indices[offsets[j]:offsets[j+1]]
        (the last bag runs to the end; an empty bag pools to zeros), shape
        (len(offsets), dim); ``offsets`` None means one bag of all indices.
        ``weights`` (mode 'sum' only) are per-sample weights. Values are
        float32 (a NumPy array, or a list of lists without NumPy).
        indices, offsets and weights may be lists, NumPy arrays or torch
        tensors. Raises RequestError (invalid request), LookupFailedError
        (the file system failed it: ``errno``), ProtocolError, OSError.
        """
        while True:
            seen = self._answered
            try:
                tag = self._submit(indices, offsets, mode, weights, sync=True)
            except OSError as e:
                if e.errno == errno.EAGAIN and self._wait_answer(seen):
                    continue  # too many in flight on the handle: retry after a result
                raise
            break
        res, exc = self._wait(lambda: self._done.pop(tag, None))
        if exc is not None:
            raise exc
        return res.values(self.dim)

    def submit(self, indices, offsets=None, mode="sum", weights=None):
        """Send one request (arguments as for :meth:`lookup`) without
        waiting; return its tag. :meth:`next` returns its result. A write
        refused for too many requests in flight raises OSError(EAGAIN):
        call next() first."""
        return self._submit(indices, offsets, mode, weights, sync=False)

    def next(self):
        """Wait for the next completed submitted request; return ``(tag,
        values)`` (values as :meth:`lookup` returns them). A failed request
        raises LookupFailedError with its ``tag``. Raises
        NothingInFlightError when no submitted request is left."""

        def ready():
            if self._ready:
                self._async -= 1
                return self._ready.popleft()
            if self._async == 0 and self._err is None:
                raise NothingInFlightError("%s: no submitted request in flight" % self._lpath)
            return None

        res, exc = self._wait(ready)
        if exc is not None:
            raise exc
        return res.tag, res.values(self.dim)

    def pending(self):
        """The number of submitted requests next() has not returned yet."""
        with self._lock:
            return self._async

    def close(self):
        """Close the request file. Calls still waiting raise
        TableClosedError; results still in flight are dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._fail_locked(TableClosedError, "%s: the table was closed" % self._lpath, None, override=True)
            if self._users == 0:
                self._close_fd_locked()
                return
            # Else the last thread in a system call closes it: a read
            # waiting on it must not continue on a reused descriptor.
        # Wake the reading thread (its read returns EOF) so that it stops
        # now, not at the next completion. A wake just before it blocks is
        # missed: try a few times.
        for i in range(50):
            with self._lock:
                if not self._reading or self._fd is None:
                    return
                self._users += 1
            try:
                self._sys_wake()
            except OSError:
                pass
            finally:
                with self._lock:
                    self._unuse_locked()
            time.sleep((i + 1) * 0.0001)

    def _close_fd_locked(self):
        if self._fd is not None:
            try:
                self._sys_close()
            except OSError:
                pass
            self._fd = None

    def _raise_sticky(self):
        cls, msg, cause = self._err
        raise cls(msg) from cause

    def _submit(self, indices, offsets, mode, weights, sync):
        mode = _mode(mode)
        if offsets is None and mode != GATHER:
            offsets = [0]
        idx = _ints(indices, "indices")
        off = _ints(offsets if offsets is not None else [], "offsets")
        w = _floats(weights, "weights") if weights is not None else None
        try:
            _check(mode, idx, off, w, rows=self.rows)
        except RequestError as e:
            raise RequestError("%s: %s" % (self.path, e)) from None
        if mode == GATHER:
            p = _Pending(len(idx), self._dt, 0, sync)
        else:
            p = _Pending(len(off), F32, 0, sync)
        p.size = _RES_HEAD.size + p.count * self.dim * _DTYPE_SIZES[p.dtype]
        with self._lock:
            if self._err is not None:
                self._raise_sticky()
            tag = self._next_tag
            self._next_tag += 1
            self._pending[tag] = p
            self._sizes[p.size] += 1
            if not sync:
                self._async += 1
            self._users += 1
            self._writing += 1
        req = _encode(tag, mode, self._dt, idx, off, w)
        werr = None
        try:
            n = self._sys_write(req)
            if n != len(req):
                werr = OSError(errno.EIO, "short write: %d of %d bytes" % (n, len(req)))
        except OSError as e:
            werr = e
        with self._cond:
            self._unuse_locked()
            self._writing -= 1
            self._cond.notify_all()  # for _wait_answer and next()
            if tag not in self._pending:
                # Answered already (so the write went through), or failed
                # by close() or a broken stream.
                if werr is not None and self._err is not None:
                    self._raise_sticky()
                return tag
            if werr is not None:
                self._forget_locked(tag, p)
                if not sync:
                    self._async -= 1
                raise OSError(werr.errno, "%s: writing lookup request %d (%d bytes): %s"
                              % (self._lpath, tag, len(req), werr.strerror or werr)) from werr
            p.written = True
            self._inflight += 1
        return tag

    def _wait_answer(self, seen):
        """After a write refused with EAGAIN: wait until a result was
        delivered after ``seen``; False if none can come (nothing of ours
        in flight or being written, or the table failed)."""
        with self._cond:
            while self._answered == seen and (self._inflight > 0 or self._writing > 0) and self._err is None:
                if not self._reading and self._inflight > 0:
                    self._read_locked()
                else:
                    self._cond.wait()
            return self._answered != seen and self._err is None

    def _wait(self, take):
        """Wait until take() (called with the lock held) returns an item,
        reading results meanwhile if no other thread is."""
        with self._cond:
            while True:
                item = take()
                if item is not None:
                    return item
                if self._err is not None:
                    self._raise_sticky()
                if not self._reading and self._inflight > 0:
                    self._read_locked()
                else:
                    self._cond.wait()

    def _unuse_locked(self):
        self._users -= 1
        if self._closed and self._users == 0:
            self._close_fd_locked()

    def _forget_locked(self, tag, p):
        del self._pending[tag]
        self._sizes[p.size] -= 1
        if not self._sizes[p.size]:
            del self._sizes[p.size]
        if p.written:
            self._inflight -= 1

    def _fail_locked(self, cls, msg, cause, override=False):
        if self._err is None or override:
            self._err = (cls, msg, cause)
        for tag, p in list(self._pending.items()):
            self._forget_locked(tag, p)
            if p.sync:
                exc = cls(msg)
                exc.__cause__ = cause
                self._done[tag] = (None, exc)
        if override:  # closing: next() fails, whatever had completed
            self._ready.clear()
        self._async = len(self._ready)
        self._cond.notify_all()

    def _read_locked(self):
        # Called with the lock held and no other reader: read one result
        # with the lock released, then deliver it.
        self._reading = True
        self._users += 1
        first = min(self._sizes) if self._sizes else _RES_HEAD.size
        self._lock.release()
        raw = exc = None
        try:
            raw = self._read_result(first)
            if raw is None:
                self._eofs += 1
                if self._eofs > 1 and self._err is None:
                    time.sleep(min(0.001 * 2 ** (self._eofs - 2), 0.1))
        except BaseException as e:  # noqa: B902 - the stream is broken; re-raised below if not an Exception
            exc = e
        finally:
            self._lock.acquire()
            self._reading = False
            self._unuse_locked()
            self._cond.notify_all()
        if raw is None and exc is None:
            # close() woke us, or some other close() of the handle did (a
            # forked child exiting, say): read again, the requests are in
            # flight.
            if self._eofs > _MAX_EOF_READS and self._err is None:
                self._fail_locked(ProtocolError, "%s: %d reads in a row returned 0 bytes with requests in flight"
                                  % (self._lpath, self._eofs), None)
            return
        self._eofs = 0
        if exc is not None:
            if isinstance(exc, _Untouched):
                raise exc.cause  # interrupted before any byte: nothing lost
            if isinstance(exc, ProtocolError):
                self._fail_locked(ProtocolError, str(exc), exc)
            else:
                self._fail_locked(DnnfsError, "%s: reading a result: %s" % (self._lpath, _why(exc)), exc)
            if not isinstance(exc, Exception):
                raise exc
            return
        self._deliver_locked(raw)

    def _read_result(self, first):
        """One whole result. The rest of a result larger than the buffer
        comes on the next read by the same thread (this one)."""
        buf = bytearray(max(first, _RES_HEAD.size))
        try:
            n = self._sys_read(memoryview(buf))
        except BaseException as e:  # noqa: B902
            if isinstance(e, Exception):
                raise
            raise _Untouched(e) from None
        if n == 0:
            return None  # EOF: a close() of the file while the read waited
        if n < _RES_HEAD.size:
            raise ProtocolError("%s: read returned %d bytes, shorter than the %d-byte header" % (self._lpath, n, _RES_HEAD.size))
        magic, _, _, plen, _, _ = _RES_HEAD.unpack_from(buf)
        if magic != _RES_MAGIC:
            raise ProtocolError("%s: result magic %#x, want %#x (\"DNLR\")" % (self._lpath, magic, _RES_MAGIC))
        total = _RES_HEAD.size + plen
        if n > total:
            raise ProtocolError("%s: one read returned %d bytes, the result has %d" % (self._lpath, n, total))
        if total > len(buf):
            whole = bytearray(total)
            whole[:n] = buf[:n]
            buf = whole
        mv = memoryview(buf)
        try:
            while n < total:
                k = self._sys_read(mv[n:total])
                if k == 0:
                    raise ProtocolError("%s: result cut short at %d of %d bytes" % (self._lpath, n, total))
                n += k
        finally:
            mv.release()
        if len(buf) > total:
            del buf[total:]
        return buf

    def _deliver_locked(self, raw):
        (tag,) = struct.unpack_from("<Q", raw, 8)
        p = self._pending.get(tag)
        if p is None:
            return  # a request whose write reported an error after it went through
        self._forget_locked(tag, p)
        self._answered += 1
        res = exc = None
        try:
            res = decode_result(raw)
        except ProtocolError as e:
            exc = ProtocolError("%s: %s" % (self._lpath, e))
        if exc is None and res.status:
            exc = LookupFailedError(res.status, tag, self._lpath)
        elif exc is None and (res.count != p.count or res.dtype != p.dtype or len(res.payload) != p.size - _RES_HEAD.size):
            exc = ProtocolError("%s: result %d: %d rows of dtype %d in %d bytes, want %d %s rows of %d values"
                                % (self._lpath, tag, res.count, res.dtype, len(res.payload), p.count,
                                   _DTYPE_NAMES[p.dtype], self.dim))
        if p.sync:
            self._done[tag] = (res, exc)
        else:
            self._ready.append((res, exc))
        self._cond.notify_all()


# EOF reads in a row tolerated while requests are in flight and the table
# is open (each a close() of another descriptor of the handle, or a bug).
_MAX_EOF_READS = 100


class _Untouched(Exception):
    """A read interrupted (KeyboardInterrupt, say) before it returned a byte."""

    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


def lookup(table_path, indices, offsets=None, mode="sum", weights=None):
    """Open the table at ``table_path``, run one :meth:`Table.lookup` and
    close it."""
    with Table(table_path) as t:
        return t.lookup(indices, offsets, mode, weights)
