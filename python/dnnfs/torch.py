"""torch.save and torch.load through dnnfs sessions.

::

    import dnnfs.torch
    dnnfs.torch.save(model.state_dict(), "/mnt/dnnfs/ckpt/model.pt", threads=4)
    state = dnnfs.torch.load("/mnt/dnnfs/ckpt/model.pt", map_location="cpu")

:func:`save` writes the same zip archive torch.save writes (plain
torch.load reads it; for CPU tensors it is byte for byte what torch.save
of the same object to a file of the same name writes), but lays it out in
memory first and writes it through a segmented write session
(:func:`dnnfs.save`): ``threads`` segments written in parallel, each from
tensor memory straight to the file (no copy of the tensors), in large
writes. If the job, the daemon or the machine dies, calling save() again
with the same object resumes: only what the interrupted save had not
persisted is written. A save of a different object (or of the same
object after a change) starts over.

:func:`load` is torch.load (any torch.save file, zip or legacy) reading
each tensor straight into its memory with ``threads`` reads in flight at
once; it refuses a file whose save was interrupted and not resumed.

Needs PyTorch (tested with Debian 12's python3-torch 1.13).
"""

import bisect
import ctypes
import hashlib
import inspect
import io
import os
import pickle
import struct
import threading
import time
import types
import zlib

import torch as _torch
import torch.serialization as _ser

from . import (DEFAULT_THREADS, XATTR_SOURCE, DnnfsError, IncompleteError, _check_dnnfs, _close, _naming, _remaining,
               _save_ranges, _session_fd)
from . import session as _session

__all__ = ["save", "load", "layout"]

# Zip format constants (APPNOTE.TXT), as torch's PyTorchStreamWriter
# (miniz, streaming) writes them: stored records, data descriptors after
# the data (flag bit 3), UTF-8 names (bit 11), no timestamps, data
# aligned to 64 bytes by an "FB" extra field of 'Z's.
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_EOCD = struct.Struct("<IHHHHIIH")
_EOCD64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_FLAGS = 0x0808
_ALIGN = 64
_U32 = 0xFFFFFFFF
_U16 = 0xFFFF
# Pieces smaller than this are copied into one buffer with their
# neighbours; larger tensor data is written from the tensor's memory.
_SMALL = 64 << 10
# CRC32s are computed in pieces of this size, in parallel, and combined.
_CRC_PIECE = 64 << 20
# torch's file format version, the "version" record torch.save writes.
_FORMAT_VERSION = b"3\n"


def _gf2_times(mat, vec):
    s, i = 0, 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def _gf2_square(mat):
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def crc32_combine(crc1, crc2, len2):
    """The CRC32 of A+B from crc1 = CRC32(A), crc2 = CRC32(B) and len(B)
    (zlib's crc32_combine, which Python's zlib does not export)."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]
    even = _gf2_square(odd)
    odd = _gf2_square(even)
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def _raw_view(ptr, nbytes):
    if nbytes == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")


class _Records:
    """The zip_file torch.serialization._save writes to: it keeps each
    record as a view of the tensor memory instead of copying it."""

    def __init__(self):
        self.records = []  # (name, memoryview)
        self.cpu = {}  # data_ptr -> CPU storage pickled: its memory outlives _save
        self.keep = []

    def write_record(self, name, data, nbytes):
        if isinstance(data, int):  # torch 1.x: a data pointer
            if data in self.cpu:
                mv = _raw_view(data, nbytes)
            else:  # a temporary CPU copy of a GPU storage: freed after this call
                mv = memoryview(ctypes.string_at(data, nbytes)) if nbytes else memoryview(b"")
        elif hasattr(data, "data_ptr"):  # torch 2.x: the storage
            if data.device.type != "cpu":
                data = data.cpu()
            self.keep.append(data)
            mv = _raw_view(data.data_ptr(), nbytes)
        else:
            mv = memoryview(bytes(memoryview(data).cast("B")[:nbytes]))
        self.records.append((name, mv))


def _pickle_module(records):
    """A pickle module whose Pickler notes the storages _save's
    persistent_id saves, so that write_record knows which data pointers
    are CPU storages that stay alive (the others are temporary copies)."""

    class Pickler(pickle.Pickler):
        def __setattr__(self, name, value):
            if name == "persistent_id" and callable(value):
                inner = value

                def value(obj):
                    pid = inner(obj)
                    if pid is not None:
                        s = getattr(obj, "_storage", obj)  # TypedStorage -> UntypedStorage
                        if s.device.type == "cpu" and s.data_ptr():
                            records.cpu[s.data_ptr()] = s
                    return pid
            super().__setattr__(name, value)

    return types.SimpleNamespace(Pickler=Pickler, __name__="pickle")


def _serialize(obj, protocol):
    records = _Records()
    kwargs = {}
    if "_disable_byteorder_record" in inspect.signature(_ser._save).parameters:
        kwargs["_disable_byteorder_record"] = False
    _ser._save(obj, records, _pickle_module(records), protocol, **kwargs)
    records.records.append(("version", memoryview(_FORMAT_VERSION)))
    return records


def _archive_name(path):
    # PyTorchStreamWriter: the file name without directory and extension.
    base = os.path.basename(path)
    dot = base.rfind(".")
    name = base[:dot] if dot >= 0 else base
    return name or "archive"


def _padding(cursor, name_len, size):
    # PyTorchStreamWriter's getPadding: an "FB" extra field that makes the
    # data start at a multiple of 64.
    start = cursor + _LOCAL.size + name_len + 4
    if size >= _U32 or cursor >= _U32:
        start += 4
        if size >= _U32:
            start += 16
        if cursor >= _U32:
            start += 8
    return (-start) % _ALIGN


class Layout:
    """The bytes of a torch.save file as pieces: ``size`` and ``pieces``
    (offset, bytes-like, event or None) in order. The CRC32s of the large
    records are computed by ``threads`` threads in the background (64 MiB
    pieces, combined); a piece that depends on them (a record's data
    descriptor, the central directory) has an event set once it is filled
    in, and write_range waits for it. :meth:`fingerprint` is a hash of the
    central directory (names, sizes and CRCs of every record)."""

    def __init__(self, archive, records, threads):
        prefix = archive + "/"
        self._records = records
        n = len(records)
        self._crc = [None] * n
        self._ready = [threading.Event() for _ in range(n)]
        self._done = threading.Event()
        self._err = None
        self._desc = {}  # record -> its data descriptor, filled in once its CRC is known
        self._central = []  # (full name, size, offset, flags, central extra) per record
        for i, (_, mv) in enumerate(records):
            if mv.nbytes < _SMALL:
                self._crc[i] = zlib.crc32(mv)
                self._ready[i].set()
        pieces = []
        small = bytearray()
        small_at = 0
        cursor = 0

        def emit(b, event=None):
            nonlocal small, small_at, cursor
            if event is None and len(b) < _SMALL:
                if not small:
                    small_at = cursor
                small += b
            else:
                if small:
                    pieces.append((small_at, bytes(small), None))
                    small = bytearray()
                pieces.append((cursor, b, event))
            cursor += len(b)

        central_size = 0
        for i, (name, mv) in enumerate(records):
            full = (prefix + name).encode()
            size = mv.nbytes
            offset = cursor
            big = size >= _U32 or offset >= _U32
            extra = b""
            if big:  # miniz streams: the compressed size is not known yet (0)
                z = (struct.pack("<QQ", size, 0) if size >= _U32 else b"") + \
                    (struct.pack("<Q", offset) if offset >= _U32 else b"")
                extra = struct.pack("<HH", 1, len(z)) + z
            pad = _padding(offset, len(full), size)
            extra += b"FB" + struct.pack("<H", pad) + b"Z" * pad
            # An empty record has no data descriptor, so no flag bit 3.
            flags = _FLAGS if size else _FLAGS & ~0x8
            emit(_LOCAL.pack(0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0, len(full), len(extra)) + full + extra)
            assert cursor % _ALIGN == 0
            emit(mv)
            if size:  # miniz writes no data descriptor after an empty record
                desc = bytearray(24 if big else 16)
                self._desc[i] = (desc, big)
                if self._crc[i] is not None:
                    self._fill_desc(i)
                    emit(bytes(desc))
                else:
                    emit(desc, self._ready[i])
            cz = (struct.pack("<QQ", size, size) if size >= _U32 else b"") + \
                (struct.pack("<Q", offset) if offset >= _U32 else b"")
            cextra = struct.pack("<HH", 1, len(cz)) + cz if cz else b""
            self._central.append((full, size, offset, flags, cextra))
            central_size += _CENTRAL.size + len(full) + len(cextra)
        self._cd_offset = cursor
        self._end = bytearray(central_size + _EOCD64.size + _LOCATOR64.size + _EOCD.size)
        emit(self._end, self._done)
        if small:
            pieces.append((small_at, bytes(small), None))
        self.size = cursor
        self.pieces = pieces
        self.starts = [p[0] for p in pieces]
        self._crc_in_background(max(1, threads))

    def _fill_desc(self, i):
        desc, big = self._desc[i]
        size = self._records[i][1].nbytes
        if big:
            struct.pack_into("<IIQQ", desc, 0, 0x08074B50, self._crc[i], size, size)
        else:
            struct.pack_into("<IIII", desc, 0, 0x08074B50, self._crc[i], size, size)

    def _finish(self):
        central = bytearray()
        for (full, size, offset, flags, cextra), crc in zip(self._central, self._crc):
            central += _CENTRAL.pack(0x02014B50, 0, 0, flags, 0, 0, 0, crc,
                                     min(size, _U32), min(size, _U32), len(full), len(cextra), 0, 0, 0, 0,
                                     min(offset, _U32)) + full + cextra
        n, cd_offset, cd_size = len(self._central), self._cd_offset, len(central)
        end = bytes(central)
        # miniz (zip64 enabled) writes the zip64 end records always.
        end += _EOCD64.pack(0x06064B50, _EOCD64.size - 12, 0x031E, 45, 0, 0, n, n, cd_size, cd_offset)
        end += _LOCATOR64.pack(0x07064B50, 0, cd_offset + cd_size, 1)
        end += _EOCD.pack(0x06054B50, 0, 0, min(n, _U16), min(n, _U16), min(cd_size, _U32), min(cd_offset, _U32), 0)
        assert len(end) == len(self._end)
        self._end[:] = end
        self._fp = hashlib.sha256(end).hexdigest()[:32]

    def _crc_in_background(self, threads):
        tasks = []
        left = {}
        for i, (_, mv) in enumerate(self._records):
            if self._crc[i] is None:
                for off in range(0, mv.nbytes, _CRC_PIECE):
                    tasks.append((i, off, min(off + _CRC_PIECE, mv.nbytes)))
                left[i] = -(-mv.nbytes // _CRC_PIECE)
        parts = {}
        lock = threading.Lock()
        nxt = [0]
        remaining = [len(left)]
        if not left:
            self._finish()
            self._done.set()
            return

        def run():
            try:
                while True:
                    with lock:
                        k = nxt[0]
                        nxt[0] += 1
                        if k >= len(tasks) or self._err is not None:
                            return
                    i, a, b = tasks[k]
                    c = zlib.crc32(self._records[i][1][a:b])
                    with lock:
                        parts[(i, a)] = (c, b - a)
                        left[i] -= 1
                        complete = left[i] == 0
                    if complete:
                        crc = 0
                        for off in range(0, self._records[i][1].nbytes, _CRC_PIECE):
                            c, ln = parts.pop((i, off))
                            crc = c if off == 0 else crc32_combine(crc, c, ln)
                        self._crc[i] = crc
                        self._fill_desc(i)
                        self._ready[i].set()
                        with lock:
                            remaining[0] -= 1
                            last = remaining[0] == 0
                        if last:
                            self._finish()
                            self._done.set()
            except BaseException as e:  # noqa: B902 - raised by the waiters
                self._err = e
                for ev in self._ready:
                    ev.set()
                self._done.set()

        for j in range(min(threads, len(tasks))):
            threading.Thread(target=run, name="dnnfs-crc-%d" % j, daemon=True).start()

    def _wait(self, event):
        event.wait()
        if self._err is not None:
            raise DnnfsError("computing the CRC32s: %s" % self._err) from self._err

    def fingerprint(self):
        """A hash of the central directory; waits for the CRCs."""
        self._wait(self._done)
        return self._fp

    def write_range(self, fd, off, length):
        """pwritev [off, off+length) of the file to fd."""
        end = off + length
        while off < end:
            i = bisect.bisect_right(self.starts, off) - 1
            bufs, total = [], 0
            while i < len(self.pieces) and off + total < end and len(bufs) < 64:
                start, b, event = self.pieces[i]
                if event is not None:
                    self._wait(event)
                mv = memoryview(b)
                a = off + total - start
                take = min(len(mv) - a, end - off - total)
                bufs.append(mv[a:a + take])
                total += take
                i += 1
            k = os.pwritev(fd, bufs, off)
            if k <= 0:
                raise OSError(5, "pwritev wrote %d bytes" % k)
            off += k

    def bytes(self):
        """The whole file (for tests)."""
        out = bytearray(self.size)
        for start, b, event in self.pieces:
            if event is not None:
                self._wait(event)
            out[start:start + len(b)] = b
        return bytes(out)


def layout(obj, path, threads=DEFAULT_THREADS, pickle_protocol=2):
    """The :class:`Layout` save() would write for ``obj`` at ``path``."""
    records = _serialize(obj, pickle_protocol)
    lay = Layout(_archive_name(path), records.records, max(1, threads or DEFAULT_THREADS))
    lay.keep = records  # the tensor memory the pieces point into stays referenced
    return lay


def save(obj, path, threads=DEFAULT_THREADS, pickle_protocol=2):
    """torch.save(obj, path) through a segmented, resumable write session
    of ``threads`` segments (see the module doc). Returns
    :func:`dnnfs.save`'s stats dict (``size``, ``bytes`` written now,
    ``skipped`` by a resume, ``resumed``, ``seconds``). Raises
    dnnfs.SegmentError naming the segment and offset of a failed write,
    dnnfs.NotDnnfsError off a dnnfs mount, OSError naming the path."""
    t0 = time.monotonic()
    lay = layout(obj, path, threads, pickle_protocol)
    # The source names the archive by its CRCs, so they are all known
    # before the session starts. (Saves whose segments waited on CRC
    # threads once ended with segments whose tails never moved: that was
    # the daemon taking a writer thread for the process that had its
    # thread id before -- ids are reused -- not the waiting; fixed there.)
    source = "dnnfs.torch:" + lay.fingerprint()

    # An interrupted save of this very archive resumes with its own
    # thread count, whatever this call asks for.
    try:
        s = _session(path)
        if (s is not None and s["mode"] == "write" and s["size"] == lay.size
                and os.getxattr(path, XATTR_SOURCE).decode() == source):
            threads = s["threads"]
    except (OSError, DnnfsError):
        pass  # no file yet, no session, not on dnnfs (_save_ranges says so)
    with _naming(path):
        return _save_ranges(path, lay.size, lay.write_range, threads, source, t0)


class _File(io.RawIOBase):
    """The file torch.load reads: large reads (torch reads each tensor's
    data with one readinto, straight into the tensor's memory) are split
    among ``threads`` threads, each one preadv of its part, so that that
    many FUSE reads are in flight at once; nothing is copied twice."""

    def __init__(self, fd, size, threads):
        super().__init__()
        self._fd, self._size, self._threads = fd, size, threads
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, off, whence=io.SEEK_SET):
        if whence == io.SEEK_SET:
            self._pos = off
        elif whence == io.SEEK_CUR:
            self._pos += off
        else:
            self._pos = self._size + off
        return self._pos

    def tell(self):
        return self._pos

    def readinto(self, b):
        mv = memoryview(b).cast("B")
        n = max(0, min(len(mv), self._size - self._pos))
        k = min(self._threads, n // _PARALLEL_READ)
        if k <= 1:
            _read_all(self._fd, mv, self._pos, n, 0)
        else:
            part = (n // k + 4095) // 4096 * 4096
            errors = []

            def run(a, z):
                try:
                    _read_all(self._fd, mv, self._pos + a, z - a, a)
                except BaseException as e:  # noqa: B902 - re-raised below
                    errors.append(e)

            ts = [threading.Thread(target=run, args=(a, min(a + part, n)), name="dnnfs-load")
                  for a in range(0, n, part)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            if errors:
                raise errors[0]
        self._pos += n
        return n


# Reads of at least this many bytes per thread are split among threads.
_PARALLEL_READ = 4 << 20


def _read_all(fd, mv, off, n, at):
    """preadv n bytes at file offset off into mv[at:at+n]."""
    done = 0
    while done < n:
        k = os.preadv(fd, [mv[at + done:at + n]], off + done)
        if k <= 0:
            raise OSError(5, "unexpected end of file at offset %d" % (off + done))
        done += k


def load(path, map_location=None, threads=DEFAULT_THREADS, **kwargs):
    """torch.load(path, map_location, **kwargs), each tensor read straight
    into its memory by ``threads`` threads at once. Reads any torch.save
    file. Raises dnnfs.IncompleteError for a file whose save was
    interrupted and not resumed, dnnfs.NotDnnfsError off a dnnfs mount."""
    with _naming(path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check_dnnfs(fd, path)
            s = _session_fd(fd, path)
            if s is not None and s["mode"] == "write":
                raise IncompleteError("%s: the file has an unfinished write session: its contents are incomplete "
                                      "(%d of %d bytes left to write; resume the save, or abandon it)"
                                      % (path, _remaining(s), s["size"]))
            f = _File(fd, os.fstat(fd).st_size, max(1, threads or DEFAULT_THREADS))
            try:
                return _torch.load(f, map_location=map_location, **kwargs)
            except Exception as e:
                if hasattr(e, "add_note"):  # Python 3.11: say which file torch.load failed on
                    e.add_note("dnnfs.torch.load(%r)" % path)
                raise
        finally:
            _close(fd)
