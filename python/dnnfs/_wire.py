"""The native path's control-channel codec, in Python with struct alone.

A mirror of native/wire (its doc.go has the byte tables): same frames,
same refusals. Each refusal raises a WireError subclass named after the Go
sentinel (ErrShort -> Short, kind "ErrShort"), so a client can tell them
apart and a test can compare them with Go's. It does no I/O: the caller
reads HEADER_SIZE bytes (socket.recv_fds for a Lease or a Grant's
descriptor), checks them with decode_header, reads body_len bytes and
decodes them with decode_body.
"""

import struct
from dataclasses import dataclass, field
from typing import List

MAGIC = 0x574E4E44  # "DNNW" little-endian
MIN_VERSION = 1
MAX_VERSION = 1
VERSION = MAX_VERSION
# Hello and HelloReply carry version 1 in every version, so any client can
# negotiate with any daemon.
HELLO_VERSION = 1

HEADER_SIZE = 16
MAX_BODY = 64 << 10
MAX_OFFSET = (1 << 63) - 1  # off_t is signed

TYPE_HELLO = 0x0001
TYPE_LEASE = 0x0002
TYPE_COMMIT = 0x0003
TYPE_RELEASE = 0x0004
TYPE_HELLO_REPLY = 0x8001
TYPE_GRANT = 0x8002
TYPE_COMMIT_REPLY = 0x8003
TYPE_RELEASE_REPLY = 0x8004
TYPE_ERROR = 0xFFFF

HELLO_SIZE = 4
HELLO_REPLY_SIZE = 18
LEASE_SIZE = 21
GRANT_SIZE = 24
EXTENT_SIZE = 32
COMMIT_SIZE = 20
COMMIT_REPLY_SIZE = 8
RELEASE_SIZE = 8
RELEASE_REPLY_SIZE = 0
ERROR_SIZE = 6
MAX_EXTENTS = (MAX_BODY - GRANT_SIZE) // EXTENT_SIZE
MAX_TEXT = 1024

HELLO_DAX = 1 << 0
HELLO_WRITES = 1 << 1
LEASE_EXTEND = 1 << 0
GRANT_POOL_FD = 1 << 0
EXTENT_FRESH = 1 << 0
COMMIT_KEEP_SIZE = 1 << 0

_HELLO_FLAGS = HELLO_DAX | HELLO_WRITES
_LEASE_FLAGS = LEASE_EXTEND
_GRANT_FLAGS = GRANT_POOL_FD
_EXTENT_FLAGS = EXTENT_FRESH
_COMMIT_FLAGS = COMMIT_KEEP_SIZE

MODE_READ = 1
MODE_WRITE = 2

_HEADER = struct.Struct("<IHHII")
_HELLO = struct.Struct("<HH")
_HELLO_REPLY = struct.Struct("<QIIH")
_LEASE = struct.Struct("<QQIB")
_GRANT = struct.Struct("<QQII")
_EXTENT = struct.Struct("<QQQII")
_COMMIT = struct.Struct("<QQI")
_U64 = struct.Struct("<Q")
_ERROR = struct.Struct("<IH")


class WireError(ValueError):
    """A frame or message that breaks a rule of the format; kind is the
    name of native/wire's sentinel for the same rule."""

    kind = "WireError"
    message = "wire: malformed"

    def __init__(self, message=None):
        super().__init__(message or self.message)


def _err(kind, message):
    return type(kind[3:], (WireError,), {"kind": kind, "message": message, "__doc__": message})


# One per sentinel of native/wire/errors.go, in its order.
Short = _err("ErrShort", "wire: short frame")
Magic = _err("ErrMagic", "wire: bad magic")
Version = _err("ErrVersion", "wire: unknown protocol version")
VersionRange = _err("ErrVersionRange", "wire: bad version range")
Type = _err("ErrType", "wire: unknown message type")
TooLarge = _err("ErrTooLarge", "wire: body too large")
BodyLength = _err("ErrBodyLength", "wire: body length does not fit the message type")
ExtentCount = _err("ErrExtentCount", "wire: extent count does not fit the body")
Trailing = _err("ErrTrailing", "wire: trailing bytes after the frame")
ZeroLength = _err("ErrZeroLength", "wire: zero length")
Overflow = _err("ErrOverflow", "wire: offset plus length overflows")
Mode = _err("ErrMode", "wire: unknown lease mode")
Flags = _err("ErrFlags", "wire: unknown or contradictory flags")
Reserved = _err("ErrReserved", "wire: reserved field not zero")
NoLease = _err("ErrNoLease", "wire: lease id 0")
ExtentOrder = _err("ErrExtentOrder", "wire: extents out of order or overlapping")
BlockSize = _err("ErrBlockSize", "wire: block size not a power of two")
Errno = _err("ErrErrno", "wire: error reply with errno 0")
Text = _err("ErrText", "wire: bad error text")

ERRORS = (Short, Magic, Version, VersionRange, Type, TooLarge, BodyLength, ExtentCount,
          Trailing, ZeroLength, Overflow, Mode, Flags, Reserved, NoLease, ExtentOrder,
          BlockSize, Errno, Text)


@dataclass
class Header:
    version: int
    type: int
    id: int
    body_len: int


def _check_range(off, n):
    if n == 0:
        raise ZeroLength()
    if off > MAX_OFFSET or n > MAX_OFFSET - off:
        raise Overflow()


@dataclass
class Hello:
    min_version: int = 0
    max_version: int = 0
    TYPE = TYPE_HELLO

    def _check(self):
        if self.min_version == 0 or self.min_version > self.max_version:
            raise VersionRange()

    def _body(self):
        return _HELLO.pack(self.min_version, self.max_version)

    @classmethod
    def _decode(cls, b):
        return cls(*_HELLO.unpack(b))


@dataclass
class HelloReply:
    pool_size: int = 0
    block_size: int = 0
    flags: int = 0
    version: int = 0
    TYPE = TYPE_HELLO_REPLY

    def _check(self):
        if not MIN_VERSION <= self.version <= MAX_VERSION:
            raise Version()
        if self.block_size == 0 or self.block_size & (self.block_size - 1):
            raise BlockSize()
        if self.flags & ~_HELLO_FLAGS:
            raise Flags()

    def _body(self):
        return _HELLO_REPLY.pack(self.pool_size, self.block_size, self.flags, self.version)

    @classmethod
    def _decode(cls, b):
        return cls(*_HELLO_REPLY.unpack(b))


@dataclass
class Lease:
    offset: int = 0
    length: int = 0
    flags: int = 0
    mode: int = 0
    TYPE = TYPE_LEASE

    def _check(self):
        if self.mode not in (MODE_READ, MODE_WRITE):
            raise Mode()
        if self.flags & ~_LEASE_FLAGS or (self.flags & LEASE_EXTEND and self.mode != MODE_WRITE):
            raise Flags()
        _check_range(self.offset, self.length)

    def _body(self):
        return _LEASE.pack(self.offset, self.length, self.flags, self.mode)

    @classmethod
    def _decode(cls, b):
        return cls(*_LEASE.unpack(b))


@dataclass
class Extent:
    file_off: int = 0
    pool_off: int = 0
    length: int = 0
    flags: int = 0


@dataclass
class Grant:
    lease: int = 0
    size: int = 0
    flags: int = 0
    extents: List[Extent] = field(default_factory=list)
    TYPE = TYPE_GRANT

    def _check(self):
        if self.lease == 0:
            raise NoLease()
        if self.flags & ~_GRANT_FLAGS:
            raise Flags()
        if len(self.extents) > MAX_EXTENTS:
            raise ExtentCount()
        end = 0
        for i, e in enumerate(self.extents):
            _check_range(e.file_off, e.length)
            _check_range(e.pool_off, e.length)
            if e.flags & ~_EXTENT_FLAGS:
                raise Flags()
            if i > 0 and e.file_off < end:
                raise ExtentOrder()
            end = e.file_off + e.length

    def _body(self):
        parts = [_GRANT.pack(self.lease, self.size, self.flags, len(self.extents))]
        parts += [_EXTENT.pack(e.file_off, e.pool_off, e.length, e.flags, 0) for e in self.extents]
        return b"".join(parts)

    @classmethod
    def _decode(cls, b):
        lease, size, flags, n = _GRANT.unpack_from(b)
        # The count is checked against the body before anything is sized by it.
        rest = len(b) - GRANT_SIZE
        if n * EXTENT_SIZE != rest:
            raise ExtentCount()
        extents = []
        for i in range(n):
            f, p, length, ef, reserved = _EXTENT.unpack_from(b, GRANT_SIZE + i * EXTENT_SIZE)
            if reserved:
                raise Reserved()
            extents.append(Extent(f, p, length, ef))
        return cls(lease, size, flags, extents)


@dataclass
class Commit:
    lease: int = 0
    size: int = 0
    flags: int = 0
    TYPE = TYPE_COMMIT

    def _check(self):
        if self.lease == 0:
            raise NoLease()
        if self.flags & ~_COMMIT_FLAGS or (self.flags & COMMIT_KEEP_SIZE and self.size != 0):
            raise Flags()
        if self.size > MAX_OFFSET:
            raise Overflow()

    def _body(self):
        return _COMMIT.pack(self.lease, self.size, self.flags)

    @classmethod
    def _decode(cls, b):
        return cls(*_COMMIT.unpack(b))


@dataclass
class CommitReply:
    size: int = 0
    TYPE = TYPE_COMMIT_REPLY

    def _check(self):
        if self.size > MAX_OFFSET:
            raise Overflow()

    def _body(self):
        return _U64.pack(self.size)

    @classmethod
    def _decode(cls, b):
        return cls(*_U64.unpack(b))


@dataclass
class Release:
    lease: int = 0
    TYPE = TYPE_RELEASE

    def _check(self):
        if self.lease == 0:
            raise NoLease()

    def _body(self):
        return _U64.pack(self.lease)

    @classmethod
    def _decode(cls, b):
        return cls(*_U64.unpack(b))


@dataclass
class ReleaseReply:
    TYPE = TYPE_RELEASE_REPLY

    def _check(self):
        pass

    def _body(self):
        return b""

    @classmethod
    def _decode(cls, b):
        return cls()


@dataclass
class ErrorReply:
    errno: int = 0
    text: str = ""
    TYPE = TYPE_ERROR

    def _check(self):
        if self.errno == 0 or self.errno > 0xFFFFFFFF:
            raise Errno()
        try:
            n = len(self.text.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates: not UTF-8 on the wire
            raise Text() from None
        if n > MAX_TEXT:
            raise Text()

    def _body(self):
        t = self.text.encode("utf-8")
        return _ERROR.pack(self.errno, len(t)) + t

    @classmethod
    def _decode(cls, b):
        errno, n = _ERROR.unpack_from(b)
        if n > MAX_TEXT:
            raise Text()
        if ERROR_SIZE + n != len(b):
            raise BodyLength()
        # Bad UTF-8 survives as lone surrogates for _check to refuse, after
        # errno, in the order Go checks them.
        return cls(errno, b[ERROR_SIZE:].decode("utf-8", "surrogateescape"))


_TYPES = {c.TYPE: c for c in (Hello, HelloReply, Lease, Grant, Commit, CommitReply,
                             Release, ReleaseReply, ErrorReply)}
_FIXED = {TYPE_HELLO: HELLO_SIZE, TYPE_HELLO_REPLY: HELLO_REPLY_SIZE, TYPE_LEASE: LEASE_SIZE,
          TYPE_COMMIT: COMMIT_SIZE, TYPE_COMMIT_REPLY: COMMIT_REPLY_SIZE,
          TYPE_RELEASE: RELEASE_SIZE, TYPE_RELEASE_REPLY: RELEASE_REPLY_SIZE}


def is_reply(t):
    return bool(t & 0x8000)


def _check_header(h):
    # Same order as Go's Header.check: version, type, size, then fit.
    hello = h.type in (TYPE_HELLO, TYPE_HELLO_REPLY)
    if (hello and h.version != HELLO_VERSION) or (
            not hello and not MIN_VERSION <= h.version <= MAX_VERSION):
        raise Version()
    if h.type not in _TYPES:
        raise Type()
    if h.body_len > MAX_BODY:
        raise TooLarge()
    n = h.body_len
    if h.type == TYPE_GRANT:
        ok = n >= GRANT_SIZE and (n - GRANT_SIZE) % EXTENT_SIZE == 0
    elif h.type == TYPE_ERROR:
        ok = n >= ERROR_SIZE and n - ERROR_SIZE <= MAX_TEXT
    else:
        ok = n == _FIXED[h.type]
    if not ok:
        raise BodyLength()


def decode_header(b):
    """Decode and check the first HEADER_SIZE bytes of b; afterwards
    reading body_len bytes is safe (at most MAX_BODY, fits the type)."""
    if len(b) < HEADER_SIZE:
        raise Short()
    magic, version, typ, rid, n = _HEADER.unpack_from(b)
    if magic != MAGIC:
        raise Magic()
    h = Header(version, typ, rid, n)
    _check_header(h)
    return h


def decode_body(h, body):
    """Decode the body of a frame whose header decode_header accepted;
    body must be exactly h.body_len bytes."""
    _check_header(h)
    return _decode_body(h, body)


def _decode_body(h, body):
    # decode_body for a header already checked.
    if len(body) < h.body_len:
        raise Short()
    if len(body) > h.body_len:
        raise Trailing()
    m = _TYPES[h.type]._decode(bytes(body))
    m._check()
    return m


def decode(b):
    """Decode b, which must hold exactly one frame: (Header, message)."""
    h = decode_header(b)
    # decode_header checked h: do not check it again.
    return h, _decode_body(h, b[HEADER_SIZE:])


def encode(rid, m):
    """The frame of message m with request id rid, checked by the decoder's
    rules first so a peer never receives a frame it must refuse."""
    if type(m) not in _TYPES.values():
        raise TypeError("not a wire message: %r" % (m,))
    m._check()
    body = m._body()
    if len(body) > MAX_BODY:
        raise TooLarge()
    version = HELLO_VERSION if m.TYPE in (TYPE_HELLO, TYPE_HELLO_REPLY) else VERSION
    return _HEADER.pack(MAGIC, version, m.TYPE, rid, len(body)) + body


def encode_header(h):
    return _HEADER.pack(MAGIC, h.version, h.type, h.id, h.body_len)


def fds(m):
    """How many descriptors travel with m's frame (SCM_RIGHTS, with its
    first byte): a Lease's file, a Grant's pool with GRANT_POOL_FD."""
    if isinstance(m, Lease):
        return 1
    if isinstance(m, Grant) and m.flags & GRANT_POOL_FD:
        return 1
    return 0

