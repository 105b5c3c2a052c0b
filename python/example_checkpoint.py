#!/usr/bin/env python3
"""Save and load a training checkpoint on dnnfs with segmented sessions.

    python3 example_checkpoint.py MOUNTDIR [--threads N]

Writes three checkpoints under MOUNTDIR/example-ckpt/ through dnnfs.save,
loads each back through dnnfs.load and checks it is equal:

  1. a NumPy state (weights, embedding table, optimizer moments, step)
     serialised with numpy.savez into memory;
  2. one large NumPy array saved straight from its buffer (no copy) and
     loaded into a preallocated array;
  3. a PyTorch state_dict (model + optimizer) serialised with torch.save
     into io.BytesIO, if PyTorch is installed (skipped otherwise).

Prints one line per checkpoint and exits 0 only if all that ran are equal.
"""

import argparse
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dnnfs  # noqa: E402

import numpy as np  # noqa: E402


def describe(st):
    mbps = st["bytes"] / max(st["seconds"], 1e-9) / 1e6
    return "%d bytes, %d threads, wrote/read %d, skipped %d%s, %.0f MB/s" % (
        st["size"], st["threads"], st["bytes"], st["skipped"], " (resumed)" if st["resumed"] else "", mbps)


def numpy_state(rng):
    return {
        "dense.weight": rng.standard_normal((1024, 1024), dtype=np.float32),
        "dense.bias": rng.standard_normal(1024, dtype=np.float32),
        "embedding": rng.standard_normal((8192, 128), dtype=np.float32),
        "adam.m": rng.standard_normal((1024, 1024), dtype=np.float32),
        "adam.v": np.abs(rng.standard_normal((1024, 1024), dtype=np.float32)),
        "step": np.array(12345, dtype=np.int64),
    }


def check_numpy_savez(d, threads):
    state = numpy_state(np.random.default_rng(1))
    buf = io.BytesIO()
    np.savez(buf, **state)
    path = os.path.join(d, "numpy_state.npz")
    st = dnnfs.save(path, buf.getbuffer(), threads=threads)
    assert dnnfs.session(path) is None, "session still open after save"
    lst = {}
    data = dnnfs.load(path, threads=threads, stats=lst)
    with np.load(io.BytesIO(data)) as z:
        loaded = {k: z[k] for k in z.files}
    ok = loaded.keys() == state.keys() and all(np.array_equal(loaded[k], state[k]) for k in state)
    print("numpy savez checkpoint: save %s; load %s: %s" % (describe(st), describe(lst), "OK" if ok else "MISMATCH"))
    return ok


def check_numpy_raw(d, threads):
    table = np.random.default_rng(2).standard_normal((16384, 256), dtype=np.float32)  # 16 MiB
    path = os.path.join(d, "embedding.f32")
    st = dnnfs.save(path, table, threads=threads)  # straight from the array's buffer
    out = np.empty_like(table)
    lst = {}
    dnnfs.load(path, threads=threads, out=out, stats=lst)
    ok = np.array_equal(out, table)
    print("numpy raw array: save %s; load %s: %s" % (describe(st), describe(lst), "OK" if ok else "MISMATCH"))
    return ok


def check_torch(d, threads):
    try:
        import torch
    except ImportError:
        print("torch checkpoint: SKIPPED (PyTorch not installed: apt-get install python3-torch)")
        return True
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 512)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7}
    buf = io.BytesIO()
    torch.save(state, buf)
    path = os.path.join(d, "torch_state.pt")
    st = dnnfs.save(path, buf.getbuffer(), threads=threads)
    lst = {}
    data = dnnfs.load(path, threads=threads, stats=lst)
    loaded = torch.load(io.BytesIO(data))
    ok = loaded["epoch"] == 7 and loaded["model"].keys() == state["model"].keys()
    ok = ok and all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())
    for pid, s in state["optimizer"]["state"].items():
        ls = loaded["optimizer"]["state"][pid]
        ok = ok and all(torch.equal(ls[k], v) if torch.is_tensor(v) else ls[k] == v for k, v in s.items())
    print("torch checkpoint (torch %s): save %s; load %s: %s"
          % (torch.__version__, describe(st), describe(lst), "OK" if ok else "MISMATCH"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mountdir", help="a directory on a dnnfs mount")
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    d = os.path.join(args.mountdir, "example-ckpt")
    os.makedirs(d, exist_ok=True)
    results = [check_numpy_savez(d, args.threads), check_numpy_raw(d, args.threads), check_torch(d, args.threads)]
    if all(results):
        print("all checkpoints equal")
        return 0
    print("MISMATCH in some checkpoint")
    return 1


if __name__ == "__main__":
    sys.exit(main())
