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

The Go package ``github.com/dnnfs/dnnfs/client`` does the same.
"""

import errno
import json
import os
import threading
import time

__all__ = [
    "save", "load", "session", "abandon",
    "DnnfsError", "NotDnnfsError", "SessionConflictError", "IncompleteError", "SegmentError",
    "XATTR_SESSION", "XATTR_SOURCE", "CHUNK", "DEFAULT_THREADS",
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
        super().__init__("%s: segment %d: %s at offset %d: %s" % (path, segment, op, offset, cause))
        self.path, self.segment, self.offset, self.op, self.cause = path, segment, offset, op, cause


def _session_fd(fd, path):
    try:
        raw = os.getxattr(fd, XATTR_SESSION)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise DnnfsError("%s: reading %s: %s" % (path, XATTR_SESSION, e)) from e
    return json.loads(raw)


def _check_dnnfs(fd, path):
    try:
        os.getxattr(fd, _XATTR_LOCKS)
    except OSError as e:
        raise NotDnnfsError("%s: not on a dnnfs mount (reading %s: %s)" % (path, _XATTR_LOCKS, e)) from e


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
        raise DnnfsError("%s: starting a %s session (setxattr %s=%r): %s" % (path, mode, XATTR_SESSION, value, e)) from e
    s = _session_fd(fd, path)
    if s is None or s["mode"] != mode or s["size"] != size or s["threads"] != threads:
        raise DnnfsError("%s: the %s session just started is not there (got %r)" % (path, mode, s))
    return s


def _remove_session(fd, path):
    try:
        os.removexattr(fd, XATTR_SESSION)
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise DnnfsError("%s: abandoning a stale session: %s" % (path, e)) from e


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
    size = mv.nbytes
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
            _write_all(fd, mv, 0, size)
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
                    raise DnnfsError("%s: recording the source in %s: %s" % (path, XATTR_SOURCE, e)) from e
            s = _start(fd, path, n, size, "write")
        elif s["mode"] == "write" and s["size"] == size and s["threads"] == n:
            stats["resumed"] = True
        else:
            raise _conflict(path, s, "write", n, size)

        def work(off, length):
            _write_all(fd, mv, off, length)

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
