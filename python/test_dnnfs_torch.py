"""Checks of dnnfs.torch against a real dnnfs mount, run by tests/python
(Go) with the Python of a venv the package was pip-installed into.

    python test_dnnfs_torch.py check MNT          # save/load equality, formats, errors
    python test_dnnfs_torch.py kill-python MNT    # SIGKILL a save mid-way, resume it
    python test_dnnfs_torch.py child-save PATH    # save big_object() (killed by the caller)
    python test_dnnfs_torch.py resume PATH        # resume the interrupted save, check it

Each prints "OK <what>" lines and exits non-zero on the first failure.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time

import dnnfs
import dnnfs.torch
import torch


def fail(msg):
    print("FAIL " + msg, flush=True)
    sys.exit(1)


def same(a, b, where):
    """Deep equality of what torch.load returned: tensors by dtype, shape,
    values and bits (NaNs included), the rest by ==."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            fail("%s: tensor vs %r" % (where, type(b)))
        if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
            fail("%s: %s%s vs %s%s" % (where, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
        x, y = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
        if x.numel() and x.view(torch.uint8).ne(y.view(torch.uint8)).any():
            fail("%s: values differ" % where)
        return
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            fail("%s: keys differ" % where)
        for k in a:
            same(a[k], b[k], "%s[%r]" % (where, k))
        return
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            fail("%s: %r vs %r" % (where, type(a), type(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, i))
        return
    if a != b:
        fail("%s: %r != %r" % (where, a, b))


def objects():
    torch.manual_seed(7)
    g = torch.Generator().manual_seed(7)
    dtypes = {}
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
               torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64):
        base = torch.randn(1000, 33, generator=g) * 100
        if dt == torch.bool:
            t = base > 0
        elif dt == torch.complex64:
            t = torch.complex(base, -base)
        else:
            t = base.to(dt)
        dtypes[str(dt)] = t
    dtypes["nan"] = torch.tensor([float("nan"), float("inf"), -0.0])
    dtypes["empty"] = torch.zeros(0, 5)
    dtypes["scalar"] = torch.tensor(3.5)
    dtypes["big"] = torch.randn(3 << 20, generator=g)  # 12 MiB: written from tensor memory
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(150)], torch.nn.LayerNorm(64))
    shared = torch.arange(100.0)
    return {
        "dtypes": dtypes,
        "state_dict": model.state_dict(),  # 302 tensors
        "views": {"whole": shared, "slice": shared[10:20], "strided": shared[::3], "t": torch.randn(8, 9, generator=g).t()},
        "object": {"epoch": 12, "lr": 0.001, "name": "ckpt", "history": [1.5, 2.5], "nested": ({"a": None}, b"\x00\x01")},
        "plain": ["no", "tensors", 1, 2.0],
    }


def check(mnt):
    root = os.path.join(mnt, "torchcheck")
    for d in ("dnnfs", "plain"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for name, obj in objects().items():
        mine = os.path.join(root, "dnnfs", name + ".pt")
        plain = os.path.join(root, "plain", name + ".pt")
        st = dnnfs.torch.save(obj, mine, threads=4)
        if st["bytes"] != os.stat(mine).st_size or st["resumed"]:
            fail("%s: save stats %r" % (name, st))
        torch.save(obj, plain)
        if dnnfs.session(mine) is not None:
            fail("%s: the session is still open after save" % name)
        with open(mine, "rb") as f, open(plain, "rb") as g:
            if f.read() != g.read():  # same object, same file name: torch.save's bytes
                fail("%s: dnnfs.torch.save wrote other bytes than torch.save" % name)
        same(obj, torch.load(mine), name + " (torch.load of dnnfs.torch.save)")
        same(obj, dnnfs.torch.load(plain, threads=3), name + " (dnnfs.torch.load of torch.save)")
        same(obj, dnnfs.torch.load(mine, map_location="cpu"), name + " (dnnfs.torch.load)")
        print("OK %s: %d bytes, identical to torch.save, loads equal both ways" % (name, st["size"]), flush=True)

    # map_location is passed through.
    got = dnnfs.torch.load(os.path.join(root, "dnnfs", "dtypes.pt"), map_location=lambda s, loc: s)
    same(objects()["dtypes"], got, "map_location")
    # A file saved in torch's legacy (pre-zip) format loads too.
    legacy = os.path.join(root, "plain", "legacy.pt")
    torch.save(objects()["views"], legacy, _use_new_zipfile_serialization=False)
    same(objects()["views"], dnnfs.torch.load(legacy), "legacy format")
    print("OK map_location, legacy format", flush=True)

    # Saving something else over a file replaces it (no stale session, no
    # leftover bytes), and saving the same again rewrites it.
    p = os.path.join(root, "dnnfs", "replace.pt")
    dnnfs.torch.save(objects()["state_dict"], p)
    dnnfs.torch.save({"small": torch.ones(3)}, p)
    same({"small": torch.ones(3)}, torch.load(p), "replaced")
    print("OK a save over a bigger file", flush=True)

    # Errors name the path.
    missing = os.path.join(root, "no", "such", "dir", "x.pt")
    for what, call in (("save", lambda: dnnfs.torch.save({"a": torch.ones(1)}, missing)),
                       ("load", lambda: dnnfs.torch.load(missing)),
                       ("dnnfs.load", lambda: dnnfs.load(missing))):
        try:
            call()
        except OSError as e:
            if missing not in str(e):
                fail("%s error does not name the path: %s" % (what, e))
        else:
            fail("%s of a missing path did not fail" % what)
    off = "/dev/shm/dnnfs-torch-not-a-mount-%d.pt" % os.getpid()
    try:
        dnnfs.torch.save({"a": torch.ones(1)}, off)
    except dnnfs.NotDnnfsError as e:
        if off not in str(e) or ": 3" in str(e).replace(off, ""):
            fail("NotDnnfsError should name the path, not a descriptor: %s" % e)
    else:
        fail("dnnfs.torch.save off a dnnfs mount did not fail")
    finally:
        if os.path.exists(off):
            fail("a failed save off a mount left %s behind" % off)
    print("OK errors name the path", flush=True)


def big_object():
    """128 MiB, the same in every process: the interrupted save and its resume."""
    g = torch.Generator().manual_seed(15)
    obj = {"layer%02d" % i: torch.randn(2 << 20, generator=g) for i in range(16)}
    obj["meta"] = {"step": 1500, "note": "resumed"}
    return obj


def child_save(path):
    print("saving", flush=True)
    dnnfs.torch.save(big_object(), path, threads=4)
    print("saved (not interrupted)", flush=True)


def progress(path):
    """(bytes durable by the tails, size) of path's open write session, or
    None. A save records what it saves (dnnfs.XATTR_SOURCE) before it
    starts the session; None without it too (the save would start over)."""
    try:
        s = dnnfs.session(path)
        os.getxattr(path, dnnfs.XATTR_SOURCE)
    except (OSError, dnnfs.DnnfsError):
        return None
    if s is None or s.get("mode") != "write":
        return None
    return sum(g["tail"] - g["start"] for g in s["segments"]), s["size"]


def resume(path):
    try:
        dnnfs.torch.load(path)
    except dnnfs.IncompleteError as e:
        print("OK the interrupted file is refused: %s" % e, flush=True)
    else:
        fail("dnnfs.torch.load of an interrupted save did not raise IncompleteError")
    obj = big_object()
    st = dnnfs.torch.save(obj, path, threads=2)  # the interrupted save's 4 threads are resumed
    if not st["resumed"] or st["skipped"] == 0 or st["bytes"] + st["skipped"] != st["size"]:
        fail("the save did not resume: %r" % st)
    print("OK resumed: %d bytes kept, %d written" % (st["skipped"], st["bytes"]), flush=True)
    same(obj, torch.load(path), "torch.load after the resume")
    same(obj, dnnfs.torch.load(path), "dnnfs.torch.load after the resume")
    print("OK the resumed save loads equal", flush=True)


def kill_python(mnt):
    path = os.path.join(mnt, "killed.pt")
    for attempt in range(5):
        if os.path.exists(path):
            os.unlink(path)
        child = subprocess.Popen([sys.executable, __file__, "child-save", path], stdout=subprocess.PIPE, text=True)
        child.stdout.readline()  # "saving": the object is being built
        seen = None
        while child.poll() is None:
            p = progress(path)
            if p is not None and 0 < p[0] < p[1]:
                seen = p
                child.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        child.wait()
        if seen is None:
            print("attempt %d: the save finished before it could be killed; again" % attempt, flush=True)
            continue
        print("OK killed the saving process with %d of %d bytes durable" % seen, flush=True)
        resume(path)
        return
    fail("no attempt caught the save in progress")


def main():
    cmd, arg = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(dnnfs.__file__))
    print("dnnfs from %s, torch %s" % (here, torch.__version__), flush=True)
    if os.environ.get("DNNFS_EXPECT_PREFIX") and not here.startswith(os.environ["DNNFS_EXPECT_PREFIX"]):
        fail("dnnfs imported from %s, not from the installed package under %s" % (here, os.environ["DNNFS_EXPECT_PREFIX"]))
    {"check": check, "kill-python": kill_python, "child-save": child_save, "resume": resume}[cmd](arg)


if __name__ == "__main__":
    main()
