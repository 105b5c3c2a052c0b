"""Unit tests of dnnfs.py's embedding lookups that need no mount: the wire
format against hand-built bytes (the same bytes as client/lookup_test.go),
f16/bf16 conversions, request validation, and Table against a fake request
file. Every test runs with NumPy (if importable) and without it.

    cd python && python3 -m unittest -v test_dnnfs_wire
"""

import errno
import os
import random
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dnnfs  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

# tag 0x0102030405060708, sum, f16, indices [3 0 7], offsets [0 2],
# weights [1 0.5 -2], written out from the spec (embedding/wire/doc.go).
GOLDEN_REQUEST = bytes.fromhex(
    "444e4c51" "0100" "01" "02"  # magic "DNLQ", version 1, mode sum, dtype f16
    "0807060504030201"  # tag
    "01000000" "00000000"  # flags: weights; reserved
    "0300000000000000" "0200000000000000"  # n = 3, b = 2
    "6400000000000000"  # total = 48 + 24 + 16 + 12 = 100
    "0300000000000000" "0000000000000000" "0700000000000000"  # indices
    "0000000000000000" "0200000000000000"  # offsets
    "0000803f" "0000003f" "000000c0"  # weights 1, 0.5, -2
)
# tag 0x0102030405060708, status 0, 2 rows of dim 2 in f16: [1 -2] [65504 2^-24].
GOLDEN_RESULT = bytes.fromhex(
    "444e4c52" "00000000"  # magic "DNLR", status 0
    "0807060504030201"  # tag
    "0800000000000000"  # payload bytes
    "02000000" "02" "000000"  # count 2, dtype f16, reserved
    "003c" "00c0" "ff7b" "0100"  # 1, -2, 65504, 2^-24
)


def result(tag, status, count, dtype, payload=b""):
    return struct.pack("<IIQQIB3x", 0x524C4E44, status, tag, len(payload), count, dtype) + payload


def as_lists(v):
    return v.tolist() if hasattr(v, "tolist") else v


class Base(unittest.TestCase):
    """Runs with NumPy unless use_numpy is False."""

    use_numpy = True

    def setUp(self):
        self.saved = dnnfs._np_mod
        if self.use_numpy:
            if np is None:
                self.skipTest("NumPy is not importable")
            dnnfs._np_mod = np
        else:
            dnnfs._np_mod = False

    def tearDown(self):
        dnnfs._np_mod = self.saved


class WireTests(Base):
    def test_golden_request(self):
        got = dnnfs.encode_lookup(0x0102030405060708, "sum", "f16", [3, 0, 7], [0, 2], [1, 0.5, -2])
        self.assertEqual(got.hex(), GOLDEN_REQUEST.hex())
        got = dnnfs.encode_lookup(0x0102030405060708, dnnfs.SUM, dnnfs.F16, (3, 0, 7), (0, 2), (1.0, 0.5, -2.0))
        self.assertEqual(got, GOLDEN_REQUEST)

    def test_golden_request_numpy_inputs(self):
        if np is None:
            self.skipTest("NumPy is not importable")
        # NumPy arrays work without dnnfs using NumPy too (through tolist).
        for idt in (np.int64, np.int32, np.uint16):
            got = dnnfs.encode_lookup(0x0102030405060708, "sum", "f16", np.array([3, 0, 7], dtype=idt),
                                      np.array([0, 2], dtype=idt), np.array([1, 0.5, -2], dtype=np.float64))
            self.assertEqual(got, GOLDEN_REQUEST, idt)

    def test_golden_request_torch_inputs(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not importable")
        got = dnnfs.encode_lookup(0x0102030405060708, "sum", "f16", torch.tensor([3, 0, 7]), torch.tensor([0, 2]),
                                  torch.tensor([1, 0.5, -2], requires_grad=True))
        self.assertEqual(got, GOLDEN_REQUEST)

    def test_shapes(self):
        for mode, idx, off, w, total, flags, n, b in [
            ("gather", [1, 2, 3], None, None, 48 + 24, 0, 3, 0),
            ("gather", [], None, None, 48, 0, 0, 0),
            ("sum", [1, 2, 3], [0, 1, 1], None, 48 + 24 + 24, 0, 3, 3),
            ("sum", [1, 2], [0], [2, 3], 48 + 16 + 8 + 8, 1, 2, 1),
            ("mean", [9], [0, 1], None, 48 + 8 + 16, 0, 1, 2),
            ("mean", [], [0, 0], None, 48 + 16, 0, 0, 2),
            ("sum", [], None, None, 48, 0, 0, 0),
        ]:
            req = dnnfs.encode_lookup(77, mode, "bf16", idx, off, w)
            head = struct.unpack_from("<IHBBQIIQQQ", req)
            self.assertEqual(head, (0x514C4E44, 1, dnnfs._MODES[mode], 3, 77, flags, 0, n, b, total), (mode, idx, off))
            self.assertEqual(len(req), total)
            body = struct.unpack_from("<%dq" % (n + b), req, 48)
            self.assertEqual(list(body), list(idx) + list(off or []))
            if w is not None:
                self.assertEqual(list(struct.unpack_from("<%df" % n, req, 48 + 8 * (n + b))), w)

    def test_invalid(self):
        for mode, dtype, idx, off, w, field in [
            ("mean", "f32", [1], [0], [1], "weights"),
            ("gather", "f32", [1], None, [1], "weights"),
            ("sum", "f32", [1, 2], [0], [1], "weights"),
            ("sum", "f32", [1, 2], [1], None, "offsets"),
            ("sum", "f32", [1, 2, 3], [0, 2, 1], None, "offsets"),
            ("mean", "f32", [1, 2], [0, 3], None, "offsets"),
            ("gather", "f32", [1], [0], None, "offsets"),
            ("sum", "f32", [1], None, None, "offsets"),
            ("gather", "f32", [0, -1], None, None, "indices"),
            ("gather", "f32", [1.5], None, None, "indices"),
            ("gather", "f32", [[1, 2]], None, None, "indices"),
            ("max", "f32", [], None, None, "mode"),
            (3, "f32", [], None, None, "mode"),
            ("gather", "f64", [], None, None, "dtype"),
            ("gather", 4, [], None, None, "dtype"),
        ]:
            with self.assertRaises(dnnfs.RequestError, msg=(mode, idx, off, w)) as cm:
                dnnfs.encode_lookup(1, mode, dtype, idx, off, w)
            self.assertIn(field, str(cm.exception))
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIsInstance(cm.exception, ValueError)
        # Empty bags and offsets equal to n are fine.
        dnnfs.encode_lookup(1, "sum", "f32", [4, 5], [0, 0, 2, 2])

    def test_golden_result(self):
        r = dnnfs.decode_result(GOLDEN_RESULT)
        self.assertEqual((r.tag, r.status, r.count, r.dtype, bytes(r.payload)),
                         (0x0102030405060708, 0, 2, dnnfs.F16, GOLDEN_RESULT[32:]))
        v = r.values(2)
        if self.use_numpy:
            self.assertEqual(v.dtype, np.float32)
            self.assertEqual(v.shape, (2, 2))
        self.assertEqual(as_lists(v), [[1.0, -2.0], [65504.0, 2.0 ** -24]])

    def test_decode(self):
        f32 = struct.pack("<3f", 1.5, -0.25, 3e38)
        r = dnnfs.decode_result(bytearray(result(9, 0, 1, 1, f32)))
        self.assertEqual(as_lists(r.values(3)), [list(struct.unpack("<3f", f32))])
        bf = bytes([0x80, 0x3F, 0x00, 0xC0, 0x49, 0x40, 0x80, 0xFF])
        self.assertEqual(as_lists(dnnfs.decode_result(result(10, 0, 2, 3, bf)).values(2)),
                         [[1.0, -2.0], [3.140625, float("-inf")]])
        r = dnnfs.decode_result(result(11, errno.EIO, 0, 0))
        self.assertEqual((r.tag, r.status, len(r.payload)), (11, errno.EIO, 0))
        self.assertEqual(as_lists(dnnfs.decode_result(result(12, 0, 0, 2)).values(5)), [] if not self.use_numpy else [])
        good = result(1, 0, 2, 1, bytes(16))
        for name, b in [
            ("short header", good[:31]),
            ("bad magic", b"DNLQ" + good[4:]),
            ("payload cut", good[:-1]),
            ("bytes after", good + b"\0"),
            ("dtype 0", result(1, 0, 2, 0, bytes(16))),
            ("dtype 4", result(1, 0, 2, 4, bytes(16))),
            ("half a value", result(1, 0, 1, 1, bytes(6))),
            ("rows unequal", result(1, 0, 3, 1, bytes(16))),
            ("count 0 with payload", result(1, 0, 0, 1, bytes(4))),
            ("error with payload", result(1, errno.EIO, 1, 1, bytes(4))),
        ]:
            with self.assertRaises(dnnfs.ProtocolError, msg=name):
                dnnfs.decode_result(b)

    def test_f16(self):
        cases = [(0x3C00, 1.0), (0xC000, -2.0), (0x7BFF, 65504.0), (0xFBFF, -65504.0),
                 (0x0001, 2.0 ** -24), (0x03FF, 1023 * 2.0 ** -24), (0x8001, -(2.0 ** -24)), (0x0400, 2.0 ** -14),
                 (0x3555, 0.333251953125), (0x4248, 3.140625), (0x0000, 0.0),
                 (0x7C00, float("inf")), (0xFC00, float("-inf"))]
        payload = struct.pack("<%dH" % len(cases), *[h for h, _ in cases])
        got = as_lists(dnnfs.to_float32(payload, "f16", 1, len(cases)))[0]
        self.assertEqual(got, [v for _, v in cases])
        neg0, nan = as_lists(dnnfs.to_float32(struct.pack("<2H", 0x8000, 0x7E00), "f16", 2, 1))
        self.assertEqual(neg0[0], 0.0)
        self.assertEqual(str(neg0[0]), "-0.0")
        self.assertNotEqual(nan[0], nan[0])

    def test_bf16(self):
        cases = [(0x3F80, 1.0), (0xC000, -2.0), (0x4049, 3.140625), (0x3F00, 0.5),
                 (0x0080, 2.0 ** -126), (0x0001, 2.0 ** -133), (0x7F80, float("inf"))]
        payload = struct.pack("<%dH" % len(cases), *[h for h, _ in cases])
        got = as_lists(dnnfs.to_float32(payload, dnnfs.BF16, len(cases), 1))
        self.assertEqual(got, [[v] for _, v in cases])

    def test_table_xattr(self):
        info = dnnfs._parse_table_xattr("t", b"rows=1000,dim=64,dtype=bf16,shard_rows=256,shards=4\n")
        self.assertEqual(info, {"rows": 1000, "dim": 64, "dtype": "bf16", "shard_rows": 256, "shards": 4})
        for bad in [b"", b"rows=10,dim=4", b"rows=0,dim=4,dtype=f32", b"rows=10,dim=x,dtype=f32",
                    b"rows=10,dim=4,dtype=f64", b"rows=10;dim=4"]:
            with self.assertRaises(dnnfs.DnnfsError, msg=bad):
                dnnfs._parse_table_xattr("t", bad)


class WireTestsNoNumpy(WireTests):
    use_numpy = False


class ConversionCrossCheck(unittest.TestCase):
    """NumPy's conversions against struct's, for every half and many bf16."""

    def setUp(self):
        if np is None:
            self.skipTest("NumPy is not importable")
        self.saved = dnnfs._np_mod

    def tearDown(self):
        dnnfs._np_mod = self.saved

    def test_every_half(self):
        payload = struct.pack("<65536H", *range(65536))
        for dtype in ("f16", "bf16"):
            dnnfs._np_mod = np
            a = dnnfs.to_float32(payload, dtype, 256, 256).ravel()
            dnnfs._np_mod = False
            b = np.array(dnnfs.to_float32(payload, dtype, 256, 256), dtype=np.float32).ravel()
            same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
            if not same.all():
                self.fail("%s: first difference at %#06x" % (dtype, int(np.flatnonzero(~same)[0])))
        dnnfs._np_mod = np
        ref = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
        a = dnnfs.to_float32(payload, "f16", 65536, 1).ravel()
        self.assertTrue(((a.view(np.uint32) == ref.view(np.uint32)) | np.isnan(ref)).all())


# ---------------------------------------------------------------------
# A fake request file: the behaviour the spec describes, requests
# completing in random order after random delays.

class FakeServer:
    def __init__(self, rows, dim, dtype, seed, max_inflight=4096):
        self.rows, self.dim, self.dtype = rows, dim, dnnfs._dtype(dtype)
        self.max_inflight = max_inflight
        self.fail = lambda idx: False
        self.hold = None
        rng = random.Random(seed)
        fmt = {1: "f", 2: "e", 3: "f"}[self.dtype]
        vals = [rng.gauss(0, 1) for _ in range(rows * dim)]
        if self.dtype == 3:
            self.data = struct.pack("<%dH" % len(vals), *[struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in vals])
            bits = [h << 16 for h in struct.unpack("<%dH" % len(vals), self.data)]
            self.values = list(struct.unpack("<%df" % len(vals), struct.pack("<%dI" % len(vals), *bits)))
        else:
            self.data = struct.pack("<%d%s" % (len(vals), fmt), *vals)
            self.values = list(struct.unpack("<%d%s" % (len(vals), fmt), self.data))
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.inflight, self.results, self.drain = 0, [], {}
        self.writes = self.continued = self.flushes = self.eofs = 0
        self.waiting = 0  # reads blocked for a result right now
        self.closed = False

    def parse(self, b):
        magic, ver, mode, dtype, tag, flags, res, n, nb, total = struct.unpack_from("<IHBBQIIQQQ", b)
        weighted = flags & 1
        want = 48 + 8 * n + 8 * nb + (4 * n if weighted else 0)
        if (magic, ver, res) != (0x514C4E44, 1, 0) or mode > 2 or dtype != self.dtype or flags & ~1 or \
                total != want or len(b) != want or (weighted and mode != 1) or (mode == 0 and nb) or (mode and n and not nb):
            raise ValueError("bad request")
        idx = list(struct.unpack_from("<%dq" % n, b, 48))
        off = list(struct.unpack_from("<%dq" % nb, b, 48 + 8 * n))
        w = list(struct.unpack_from("<%df" % n, b, 48 + 8 * (n + nb))) if weighted else None
        if any(not 0 <= i < self.rows for i in idx) or (off and off[0]) or any(o > n for o in off) or \
                any(b < a for a, b in zip(off, off[1:])):
            raise ValueError("bad request")
        return tag, mode, idx, off, w

    def compute(self, tag, mode, idx, off, w):
        if self.fail(idx):
            return result(tag, errno.EIO, 0, 0)
        dim, size = self.dim, dnnfs._DTYPE_SIZES[self.dtype]
        if mode == 0:
            return result(tag, 0, len(idx), self.dtype, b"".join(self.data[i * dim * size:(i + 1) * dim * size] for i in idx))
        out = []
        for j, a in enumerate(off):
            b = off[j + 1] if j + 1 < len(off) else len(idx)
            acc = [0.0] * dim
            for k in range(a, b):
                wt = w[k] if w is not None else 1.0
                for c in range(dim):
                    acc[c] += wt * self.values[idx[k] * dim + c]
            if mode == 2 and b > a:
                acc = [x / (b - a) for x in acc]
            out += acc
        return result(tag, 0, len(off), 1, struct.pack("<%df" % len(out), *out))

    def write(self, b):
        try:
            req = self.parse(b)
        except (ValueError, struct.error):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        with self.lock:
            if self.closed:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            if self.inflight >= self.max_inflight:
                raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            self.inflight += 1
            self.writes += 1
        delay = random.random() * 0.002

        def complete():
            if self.hold is not None:
                self.hold.wait()
            time.sleep(delay)
            res = self.compute(*req)
            with self.cond:
                self.results.append(res)
                self.inflight -= 1
                self.cond.notify_all()

        threading.Thread(target=complete, daemon=True).start()
        return len(b)

    def read(self, mv):
        tid = threading.get_ident()
        with self.cond:
            if tid in self.drain:
                res = self.drain.pop(tid)
                self.continued += 1
            else:
                # Wait like a pipe; EOF if the file is closed meanwhile.
                flushes = self.flushes
                while not self.results:
                    if self.closed:
                        raise OSError(errno.EBADF, os.strerror(errno.EBADF))
                    if self.flushes != flushes:
                        self.eofs += 1
                        return 0
                    self.waiting += 1
                    self.cond.wait()
                    self.waiting -= 1
                res = self.results.pop(0)
            k = min(len(mv), len(res))
            mv[:k] = res[:k]
            if k < len(res):
                self.drain[tid] = res[k:]
            return k

    def flush(self):
        with self.cond:
            self.flushes += 1
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def expect(self, idx, off, mode, w):
        dim = self.dim
        if mode == "gather":
            return [[self.values[i * dim + c] for c in range(dim)] for i in idx]
        off = [0] if off is None else off
        out = []
        for j, a in enumerate(off):
            b = off[j + 1] if j + 1 < len(off) else len(idx)
            acc = [0.0] * dim
            for k in range(a, b):
                for c in range(dim):
                    acc[c] += (w[k] if w is not None else 1.0) * self.values[idx[k] * dim + c]
            if mode == "mean" and b > a:
                acc = [x / (b - a) for x in acc]
            out.append(acc)
        return out


class FakeTable(dnnfs.Table):
    def __init__(self, srv):
        self.srv = srv
        self._setup("/fake/t", {"rows": srv.rows, "dim": srv.dim, "dtype": dnnfs._DTYPE_NAMES[srv.dtype]}, -1)

    def _sys_write(self, buf):
        return self.srv.write(bytes(buf))

    def _sys_read(self, mv):
        return self.srv.read(mv)

    def _sys_close(self):
        self.srv.close()

    def _sys_wake(self):
        self.srv.flush()


def random_request(rng, rows):
    mode = rng.choice(["gather", "sum", "mean"])
    idx = [rng.randrange(rows) for _ in range(rng.randrange(20))]
    off = w = None
    if mode != "gather" and rng.random() < 0.8:
        off = [0]
        for _ in range(rng.randrange(5)):
            off.append(rng.randint(off[-1], len(idx)))
    if mode == "sum" and rng.random() < 0.5:
        w = [struct.unpack("<f", struct.pack("<f", rng.gauss(0, 1)))[0] for _ in idx]
    return idx, off, mode, w


class TableTests(Base):
    def check_close(self, got, want, what):
        got = as_lists(got)
        self.assertEqual(len(got), len(want), what)
        for g, w in zip(got, want):
            self.assertEqual(len(g), len(w), what)
            for a, b in zip(g, w):
                self.assertLessEqual(abs(a - b), 1e-4 * (1 + abs(b)), what)

    def test_concurrent(self):
        for dtype in ("f32", "f16", "bf16"):
            srv = FakeServer(300, 5, dtype, seed=len(dtype), max_inflight=6)
            srv.fail = lambda idx: bool(idx) and idx[0] == 299
            t = FakeTable(srv)
            errors = []

            def lookups(seed):
                rng = random.Random(seed)
                try:
                    for k in range(25):
                        idx, off, mode, w = random_request(rng, 300)
                        if k % 8 == 7 and idx:
                            idx[0] = 299
                        if idx and idx[0] == 299:
                            with self.assertRaises(dnnfs.LookupFailedError) as cm:
                                t.lookup(idx, off, mode, w)
                            self.assertEqual(cm.exception.errno, errno.EIO)
                            continue
                        got = t.lookup(idx, off, mode, w)
                        if self.use_numpy:
                            self.assertEqual(got.dtype, np.float32)
                            self.assertEqual(got.shape, (len(idx) if mode == "gather" else len(off or [0]), 5))
                        self.check_close(got, srv.expect(idx, off, mode, w), (mode, idx, off, w))
                except BaseException as e:  # noqa: B902 - reported by the main thread
                    errors.append(e)

            def batches():
                rng = random.Random(99)
                try:
                    for _ in range(10):
                        sent = {}
                        while len(sent) < 5:
                            req = random_request(rng, 299)
                            try:
                                sent[t.submit(*req)] = req
                            except OSError as e:
                                if e.errno != errno.EAGAIN:
                                    raise
                                if not sent:
                                    time.sleep(0.0005)
                                    continue
                                break
                        for _ in range(len(sent)):
                            tag, got = t.next()
                            self.check_close(got, srv.expect(*sent.pop(tag)), tag)
                    with self.assertRaises(dnnfs.NothingInFlightError):
                        t.next()
                except BaseException as e:  # noqa: B902
                    errors.append(e)

            threads = [threading.Thread(target=lookups, args=(i,)) for i in range(8)] + [threading.Thread(target=batches)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            t.close()
            if errors:
                raise errors[0]
            self.assertEqual(srv.drain, {}, "a result's rest was not read by the thread that read its start")
            self.assertGreater(srv.continued, 0, "the continuation path was not exercised")

    def test_invalid(self):
        srv = FakeServer(10, 3, "f32", seed=1)
        with FakeTable(srv) as t:
            for idx, off, mode, w in [([10], None, "gather", None), ([-1], [0], "sum", None),
                                      ([1], None, "mean", [1.0]), ([1, 2], [1], "sum", None), ([1], [0], "gather", None)]:
                with self.assertRaises(dnnfs.RequestError):
                    t.lookup(idx, off, mode, w)
            self.assertEqual(srv.writes, 0)
            t._dt = dnnfs.F16  # a request the fake refuses (dtype mismatch): EINVAL from the write
            with self.assertRaises(OSError) as cm:
                t.lookup([1], None, "gather")
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            t._dt = dnnfs.F32
            self.check_close(t.lookup([2, 2], mode="mean"), srv.expect([2], None, "gather", None), "after EINVAL")
            with self.assertRaises(dnnfs.NothingInFlightError):
                t.next()

    def test_bad_result(self):
        srv = FakeServer(10, 3, "f16", seed=2)
        real = srv.compute
        srv.compute = lambda *req: real(*req)[:24] + struct.pack("<I", 5) + real(*req)[28:]  # wrong count
        with FakeTable(srv) as t:
            with self.assertRaises(dnnfs.ProtocolError):
                t.lookup([1, 2], [0, 1], "mean")
            srv.compute = real
            self.check_close(t.lookup([4], None, "gather"), srv.expect([4], None, "gather", None), "after")
            srv.compute = lambda *req: b"X" + real(*req)[1:]  # a broken frame breaks the table
            with self.assertRaises(dnnfs.ProtocolError):
                t.lookup([1], None, "gather")
            with self.assertRaises(dnnfs.ProtocolError):
                t.lookup([1], None, "gather")

    def test_close(self):
        srv = FakeServer(10, 3, "f32", seed=3)
        srv.hold = threading.Event()
        t = FakeTable(srv)
        errs = []

        def wait_lookup():
            try:
                t.lookup([1])
            except BaseException as e:  # noqa: B902
                errs.append(e)

        threads = [threading.Thread(target=wait_lookup) for _ in range(3)]
        for th in threads:
            th.start()
        t.submit([1], mode="gather")
        deadline = time.monotonic() + 10
        while srv.writes < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        # Completions stay held: close() wakes the reading thread (EOF)
        # rather than waiting for one.
        t.close()
        for th in threads:
            th.join(10)
        self.assertEqual(len(errs), 3)
        for e in errs:
            self.assertIsInstance(e, dnnfs.TableClosedError)
        with self.assertRaises(dnnfs.TableClosedError):
            t.next()
        with self.assertRaises(dnnfs.TableClosedError):
            t.lookup([1])
        t.close()
        srv.hold.set()

    def test_close_drops_ready(self):
        srv = FakeServer(10, 3, "f32", seed=5)
        t = FakeTable(srv)
        t.submit([1], mode="gather")
        deadline = time.monotonic() + 10
        while not srv.results and time.monotonic() < deadline:
            time.sleep(0.001)
        t.lookup([2], mode="gather")  # reads the submitted request's result first
        self.assertEqual(t.pending(), 1)
        self.assertEqual(len(t._ready), 1)
        t.close()
        with self.assertRaises(dnnfs.TableClosedError):
            t.next()

    def test_spurious_eof(self):
        # A close() of another descriptor of the handle (a forked child
        # exiting, say) makes a waiting read return 0 bytes: read again.
        srv = FakeServer(10, 3, "bf16", seed=4)
        srv.hold = threading.Event()
        t = FakeTable(srv)
        errs = []

        def one(i):
            try:
                self.check_close(t.lookup([i, 9], mode="mean"), srv.expect([i, 9], None, "mean", None), i)
            except BaseException as e:  # noqa: B902
                errs.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for th in threads:
            th.start()
        deadline = time.monotonic() + 10
        while srv.writes < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        flushed = 0
        while (flushed < 3 or srv.eofs == 0) and time.monotonic() < deadline:
            # Flush only with a read blocked, so it sees the EOF (a
            # fixed sleep missed it on a loaded machine), and until one
            # read did: a flush can still land between two reads.
            while srv.waiting == 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            srv.flush()
            flushed += 1
            time.sleep(0.001)
        srv.hold.set()
        for th in threads:
            th.join(10)
        t.close()
        if errs:
            raise errs[0]
        self.assertGreater(srv.eofs, 0, "no read returned EOF: the test did not test")


class TableTestsNoNumpy(TableTests):
    use_numpy = False


if __name__ == "__main__":
    unittest.main()
