#!/usr/bin/env python3
"""An EmbeddingBag forward pass on dnnfs embedding tables.

    /usr/bin/python3 example_embeddingbag.py MOUNTDIR [--rows N] [--dim D] [--dtypes f32,f16,bf16]

For each dtype, makes a table under MOUNTDIR/example-emb/ (setxattr
user.dnnfs.table on an empty file), fills it with random rows through plain
os.pwrite (row i at byte i * dim * itemsize), builds random bags and looks
them up through the table's request file with dnnfs.Table: pooled 'sum',
'mean' and per-sample-weighted 'sum' (torch.nn.EmbeddingBag semantics,
empty bags included), 'gather', and a batch of requests in flight with
submit()/next(). Each result is compared with a NumPy reference and, if
PyTorch is installed, with torch.nn.functional.embedding_bag; the maximum
absolute errors are printed, and "OK" or "MISMATCH" per check.

Needs NumPy (Debian: apt-get install python3-numpy; run with
/usr/bin/python3); PyTorch (python3-torch) is optional. dnnfs.py itself
needs neither. The mount needs an SSD tier for tables.

Exits 0 only if every check is OK ("all lookups OK" on the last line).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dnnfs  # noqa: E402

import numpy as np  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

NP_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def make_table(path, rows, dim, dtype, rng):
    """Create the table and fill it; return its values as float32 (what
    the table holds, after rounding to its dtype)."""
    if os.path.lexists(path):
        os.unlink(path)
    dnnfs.create_table(path, rows, dim, dtype)
    info = dnnfs.table_info(path)
    assert (info["rows"], info["dim"], info["dtype"]) == (rows, dim, dtype), info
    w32 = rng.standard_normal((rows, dim), dtype=np.float32)
    if dtype == "f32":
        stored = w32
    elif dtype == "f16":
        stored = w32.astype(np.float16)
    else:  # bf16: the upper half of each float32, rounded to nearest even
        bits = w32.view(np.uint32).astype(np.uint64)
        stored = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    raw = memoryview(np.ascontiguousarray(stored)).cast("B")
    fd = os.open(path, os.O_RDWR)
    try:
        off = 0
        while off < len(raw):
            off += os.pwrite(fd, raw[off:off + dnnfs.CHUNK], off)
        os.fsync(fd)
        # Plain pread sees the rows where they were written.
        row_bytes = dim * stored.itemsize
        for i in (0, rows // 2, rows - 1):
            got = os.pread(fd, row_bytes, i * row_bytes)
            assert got == raw[i * row_bytes:(i + 1) * row_bytes], "pread of row %d differs" % i
    finally:
        os.close(fd)
    if dtype == "bf16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored.astype(np.float32)


def random_bags(rng, rows, bags, max_bag):
    sizes = rng.integers(0, max_bag + 1, size=bags)  # some bags empty
    indices = rng.integers(0, rows, size=int(sizes.sum()), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return indices, offsets, sizes


def reference(weight, indices, offsets, mode, psw=None):
    """NumPy EmbeddingBag in float64, and the sum of |terms| per bag (for
    the rounding tolerance)."""
    dim = weight.shape[1]
    out = np.zeros((len(offsets), dim))
    mag = np.zeros((len(offsets), dim))
    ends = list(offsets[1:]) + [len(indices)]
    for j, (a, b) in enumerate(zip(offsets, ends)):
        rows = weight[indices[a:b]].astype(np.float64)
        if psw is not None:
            rows = rows * psw[a:b, None].astype(np.float64)
        out[j] = rows.sum(axis=0)
        mag[j] = np.abs(rows).sum(axis=0)
        if mode == "mean" and b > a:
            out[j] /= b - a
            mag[j] /= b - a
    return out, mag


def torch_reference(weight, indices, offsets, mode, psw=None):
    if torch is None:
        return None
    return F.embedding_bag(torch.from_numpy(indices), torch.from_numpy(weight), torch.from_numpy(offsets), mode=mode,
                           per_sample_weights=None if psw is None else torch.from_numpy(psw)).numpy()


def check(name, got, want, mag, max_bag, tref=None):
    """Compare got with the float64 reference within float32 rounding of
    a sum of up to max_bag terms."""
    tol = 2.0 * max(max_bag, 1) * np.finfo(np.float32).eps * mag + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    ok = got.dtype == np.float32 and got.shape == want.shape and bool((err <= tol).all())
    line = "  %-13s %s: max abs error vs numpy %.3g" % (name, "x".join(map(str, got.shape)), err.max() if err.size else 0.0)
    if tref is not None:
        terr = np.abs(got.astype(np.float64) - tref.astype(np.float64))
        ok = ok and bool((terr <= 2 * tol).all())
        line += ", vs torch %.3g" % (terr.max() if terr.size else 0.0)
    print(line + ": " + ("OK" if ok else "MISMATCH"))
    return ok


def run(d, dtype, args, rng):
    path = os.path.join(d, "table-%s.emb" % dtype)
    t0 = time.monotonic()
    weight = make_table(path, args.rows, args.dim, dtype, rng)
    size = os.stat(path).st_size
    print("table %s: %d rows x %d %s (%.1f MiB), filled by pwrite in %.2f s"
          % (path, args.rows, args.dim, dtype, size / 2 ** 20, time.monotonic() - t0))
    results = []
    indices, offsets, _ = random_bags(rng, args.rows, args.bags, args.max_bag)
    psw = rng.standard_normal(len(indices)).astype(np.float32)
    with dnnfs.Table(path) as t:
        assert (t.rows, t.dim, t.dtype) == (args.rows, args.dim, dtype)
        for mode, w in (("sum", None), ("mean", None), ("sum", psw)):
            # Indices as torch tensors when PyTorch is there, NumPy arrays otherwise.
            idx_in = torch.from_numpy(indices) if torch is not None else indices
            off_in = torch.from_numpy(offsets) if torch is not None else offsets
            t1 = time.monotonic()
            got = t.lookup(idx_in, off_in, mode=mode, weights=w)
            dt = time.monotonic() - t1
            want, mag = reference(weight, indices, offsets, mode, w)
            name = mode + (" weighted" if w is not None else "")
            results.append(check(name, got, want, mag, args.max_bag, torch_reference(weight, indices, offsets, mode, w)))
            print("  %-13s %d indices in %d bags in %.1f ms" % ("", len(indices), len(offsets), dt * 1e3))

        # Gather: the rows themselves, converted to float32 exactly.
        gi = rng.integers(0, args.rows, size=257, dtype=np.int64)
        got = t.lookup(gi, mode="gather")
        ok = got.shape == (len(gi), args.dim) and np.array_equal(got, weight[gi])
        if torch is not None:
            ok = ok and np.array_equal(got, F.embedding(torch.from_numpy(gi), torch.from_numpy(weight)).numpy())
        print("  %-13s %s: %s" % ("gather", "x".join(map(str, got.shape)), "exact: OK" if ok else "MISMATCH"))
        results.append(ok)

        # Many requests in flight: submit them all, collect in completion order.
        batches = {}
        for _ in range(args.in_flight):
            bi, bo, _ = random_bags(rng, args.rows, 32, args.max_bag)
            mode = "mean" if rng.random() < 0.5 else "sum"
            batches[t.submit(bi, bo, mode=mode)] = (bi, bo, mode)
        worst, ok = 0.0, True
        while batches:
            tag, got = t.next()
            bi, bo, mode = batches.pop(tag)
            want, mag = reference(weight, bi, bo, mode)
            err = np.abs(got - want)
            worst = max(worst, float(err.max()) if err.size else 0.0)
            ok = ok and bool((err <= 2.0 * max(args.max_bag, 1) * np.finfo(np.float32).eps * mag + 1e-6).all())
        print("  %-13s %d requests in flight: max abs error %.3g: %s"
              % ("submit/next", args.in_flight, worst, "OK" if ok else "MISMATCH"))
        results.append(ok)

    # The convenience function: open, look up, close.
    got = dnnfs.lookup(path, indices[:10].tolist(), [0, 4], "mean")
    want, mag = reference(weight, indices[:10], np.array([0, 4]), "mean")
    results.append(check("lookup()", got, want, mag, 10))
    if not args.keep:
        os.unlink(path)
    return all(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mountdir", help="a directory on a dnnfs mount with an SSD tier")
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--bags", type=int, default=512, help="bags per pooled lookup")
    ap.add_argument("--max-bag", type=int, default=40, help="largest bag (bags of 0 .. this many indices)")
    ap.add_argument("--in-flight", type=int, default=16, help="requests kept in flight with submit/next")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the tables")
    args = ap.parse_args()
    d = os.path.join(args.mountdir, "example-emb")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    print("numpy %s, torch %s" % (np.__version__, torch.__version__ if torch is not None else "not installed (reference skipped)"))
    ok = True
    for dtype in args.dtypes.split(","):
        ok = run(d, dtype.strip(), args, rng) and ok
    print("all lookups OK" if ok else "MISMATCH in some lookup")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
