"""Checks dnnfs._wire (the native path's control-channel codec) against
native/wire, from the JSON its TestWriteFrames writes: every golden frame
decodes to the Go message's fields and re-encodes to the same bytes, every
malformed frame is refused with the sentinel Go returned, every message Go's
Append refuses is refused too; then round trips of its own.
tests/python/wire_test.go runs it:

    python3 test_dnnfs_native_wire.py frames.json -v
    (or DNNFS_WIRE_FRAMES=frames.json python3 -m unittest -v test_dnnfs_native_wire)
"""

import json
import os
import random
import re
import sys
import unittest

from dnnfs import _wire as w

# tests/python checks the installed package is tested, not the source tree.
if os.environ.get("DNNFS_EXPECT_PREFIX"):
    assert w.__file__.startswith(os.environ["DNNFS_EXPECT_PREFIX"]), w.__file__

if __name__ == "__main__" and len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
    os.environ["DNNFS_WIRE_FRAMES"] = sys.argv.pop(1)
with open(os.environ["DNNFS_WIRE_FRAMES"]) as f:
    FRAMES = json.load(f)

CLASSES = {c.__name__: c for c in (w.Hello, w.HelloReply, w.Lease, w.Grant, w.Commit,
                                   w.CommitReply, w.Release, w.ReleaseReply, w.ErrorReply)}


def snake(name):
    """Go's field name as the Python dataclass spells it (FileOff -> file_off)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def from_go(msg):
    """The Python message equal to a Go message as encoding/json wrote it."""
    fields = {snake(k): v for k, v in msg["fields"].items()}
    if msg["type"] == "Grant":
        fields["extents"] = [w.Extent(**{snake(k): v for k, v in e.items()})
                             for e in fields["extents"] or []]
    return CLASSES[msg["type"]](**fields)


def kind_of(fn, *args):
    try:
        fn(*args)
    except w.WireError as e:
        return e.kind
    return None


class Golden(unittest.TestCase):
    def test_frames(self):
        self.assertEqual(len(FRAMES["golden"]), len(CLASSES), "one golden frame per type")
        seen = set()
        for g in FRAMES["golden"]:
            with self.subTest(g["name"]):
                frame = bytes.fromhex(g["frame"])
                want = from_go(g["msg"])
                seen.add(type(want))
                # A reader's way: the header alone, then exactly its body.
                h = w.decode_header(frame[:w.HEADER_SIZE])
                gh = g["header"]
                self.assertEqual(h, w.Header(gh["Version"], gh["Type"], gh["ID"], gh["BodyLen"]))
                self.assertEqual(w.decode_body(h, frame[w.HEADER_SIZE:w.HEADER_SIZE + h.body_len]), want)
                self.assertEqual(w.decode(frame), (h, want))
                self.assertEqual(w.encode(g["id"], want).hex(), frame.hex())
                self.assertEqual(w.encode_header(h), frame[:w.HEADER_SIZE])
        self.assertEqual(seen, set(CLASSES.values()))


class Refusals(unittest.TestCase):
    def test_sentinels(self):
        # One WireError kind per Go sentinel, and no more.
        self.assertEqual(sorted(e.kind for e in w.ERRORS), FRAMES["sentinels"])
        for e in w.ERRORS:
            self.assertTrue(issubclass(e, w.WireError))
            self.assertEqual(e.kind, "Err" + e.__name__)

    def test_malformed(self):
        self.assertGreater(len(FRAMES["malformed"]), 0)
        for c in FRAMES["malformed"]:
            with self.subTest(c["name"]):
                self.assertEqual(kind_of(w.decode, bytes.fromhex(c["frame"])), c["kind"], c["frame"])

    def test_header_refusals_before_the_body(self):
        # What a header can tell is refused with only the header read.
        for c in FRAMES["malformed"]:
            if c["kind"] in ("ErrMagic", "ErrVersion", "ErrType", "ErrTooLarge"):
                frame = bytes.fromhex(c["frame"])
                k = kind_of(w.decode_header, frame[:w.HEADER_SIZE])
                if k is not None:  # a HelloReply's body version is the body's
                    self.assertEqual(k, c["kind"], c["name"])

    def test_encoder_refuses(self):
        self.assertGreater(len(FRAMES["refused"]), 0)
        for c in FRAMES["refused"]:
            m = from_go(c["msg"])
            with self.subTest(repr(m)):
                self.assertEqual(kind_of(w.encode, 1, m), c["kind"])
        # Go's case of text that is not UTF-8, which JSON cannot carry.
        self.assertEqual(kind_of(w.encode, 1, w.ErrorReply(1, "\udcff")), "ErrText")
        self.assertEqual(kind_of(w.encode, 1, w.ErrorReply(1, "x" * (w.MAX_TEXT + 1))), "ErrText")
        self.assertEqual(kind_of(w.encode, 1, w.Grant(1, extents=[
            w.Extent(i, i, 1) for i in range(w.MAX_EXTENTS + 1)])), "ErrExtentCount")

    def test_errno_before_text(self):
        # Go checks errno before the text's UTF-8.
        frame = w.encode(5, w.ErrorReply(9, "ab"))
        bad = frame[:w.HEADER_SIZE] + b"\0\0\0\0" + frame[w.HEADER_SIZE + 4:-1] + b"\xff"
        self.assertEqual(kind_of(w.decode, bad), "ErrErrno")
        self.assertEqual(kind_of(w.decode, bad[:w.HEADER_SIZE] + frame[w.HEADER_SIZE:-1] + b"\xff"), "ErrText")


class RoundTrip(unittest.TestCase):
    def check(self, rid, m):
        b = w.encode(rid, m)
        h, got = w.decode(b)
        self.assertEqual(got, m)
        self.assertEqual((h.type, h.id, h.body_len), (m.TYPE, rid, len(b) - w.HEADER_SIZE))
        self.assertEqual(w.encode(rid, got), b)

    def test_golden_messages(self):
        for g in FRAMES["golden"]:
            self.check(0xFFFFFFFF, from_go(g["msg"]))

    def test_random(self):
        r = random.Random(1)
        # At most 2^62-1, so an offset plus a length below 2^62 stays valid.
        u64 = lambda: r.getrandbits(r.choice((8, 32, 62)))  # noqa: E731
        for _ in range(500):
            off = u64()
            self.check(r.getrandbits(32), w.Lease(off, r.randint(1, w.MAX_OFFSET - off),
                                                  r.choice((0, w.LEASE_EXTEND)), w.MODE_WRITE))
            self.check(1, w.Lease(off, 1, 0, w.MODE_READ))
            self.check(2, w.HelloReply(u64(), 1 << r.randint(0, 31), r.randint(0, 3), 1))
            self.check(3, w.Commit(u64() + 1, u64(), 0))
            self.check(3, w.Commit(u64() + 1, 0, w.COMMIT_KEEP_SIZE))
            self.check(3, w.CommitReply(u64()))
            self.check(4, w.Release(u64() + 1))
            self.check(5, w.ErrorReply(r.randint(1, 0xFFFFFFFF), "é€" * r.randint(0, 170)))
            exts, pos = [], r.getrandbits(20)
            for _ in range(r.randint(0, 40)):
                n = r.randint(1, 1 << 22)
                exts.append(w.Extent(pos, u64(), n, r.randint(0, 1)))
                pos += n + r.choice((0, 4096))
            self.check(6, w.Grant(u64() + 1, u64(), r.randint(0, 1), exts))
        self.check(7, w.Hello(1, 0xFFFF))
        self.check(7, w.ReleaseReply())

    def test_max_grant(self):
        g = w.Grant(1, 0, 0, [w.Extent(i << 21, i << 21, 1 << 21) for i in range(w.MAX_EXTENTS)])
        self.assertLessEqual(len(w.encode(1, g)), w.HEADER_SIZE + w.MAX_BODY)
        self.check(1, g)

    def test_fds(self):
        self.assertEqual([w.fds(m) for m in (w.Lease(), w.Grant(flags=w.GRANT_POOL_FD), w.Grant(), w.Hello())],
                         [1, 1, 0, 0])


if __name__ == "__main__":
    unittest.main()
