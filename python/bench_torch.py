"""Time torch.save/torch.load of a 1 GiB state dict on a dnnfs mount and on
a local directory (tmpfs), plain torch vs dnnfs.torch; medians of ROUNDS
rounds, the variants interleaved in each round (the machine's load moves).

    python3 python/bench_torch.py MNT LOCALDIR [ROUNDS] [GiB] [THREADS]

With DNNFS_PID set to the daemon's pid it also reports the CPU seconds the
daemon spent on each operation (the wall times move with the machine's
load; the CPU seconds much less).
"""

import os
import statistics
import sys
import time

import torch

import dnnfs.torch


PID = os.environ.get("DNNFS_PID")


def daemon_cpu():
    """The daemon's user+system CPU seconds so far (0 without DNNFS_PID)."""
    if not PID:
        return 0.0
    with open("/proc/%s/stat" % PID) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    mnt, local = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    gib = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    n = 16
    per = int(gib * (1 << 30)) // n // 4
    g = torch.Generator().manual_seed(1)
    sd = {"layer%02d.weight" % i: torch.randn(per, generator=g) for i in range(n)}
    variants = [
        ("torch.save  local", lambda p: torch.save(sd, p), "local"),
        ("torch.save  dnnfs", lambda p: torch.save(sd, p), "mnt"),
        ("dnnfs.torch.save dnnfs", lambda p: dnnfs.torch.save(sd, p, threads=threads), "mnt"),
    ]
    loads = [
        ("torch.load  local", lambda p: torch.load(p), "local"),
        ("torch.load  dnnfs", lambda p: torch.load(p), "mnt"),
        ("dnnfs.torch.load dnnfs", lambda p: dnnfs.torch.load(p, threads=threads), "mnt"),
    ]
    times = {name: [] for name, _, _ in variants + loads}
    cpu = {name: [] for name in times}
    dcpu = {name: [] for name in times}

    def timed(name, f, p):
        d0, c0, t = daemon_cpu(), time.process_time(), time.monotonic()
        out = f(p)
        times[name].append(time.monotonic() - t)
        cpu[name].append(time.process_time() - c0)
        dcpu[name].append(daemon_cpu() - d0)
        return out

    for r in range(rounds):
        for (sname, save, where), (lname, load, _) in zip(variants, loads):
            p = os.path.join(mnt if where == "mnt" else local, "bench.pt")
            if os.path.exists(p):
                os.unlink(p)
            timed(sname, save, p)
            x = timed(lname, load, p)
            del x
            os.unlink(p)
        print("round %d: %s" % (r, ", ".join("%s %.2f" % (k, v[-1]) for k, v in times.items())), flush=True)
    size = sum(t.numel() * 4 for t in sd.values())
    print("\n%.2f GiB state dict (%d tensors), %d rounds, threads=%d, medians:" % (size / (1 << 30), n, rounds, threads))
    print("  %-24s %8s %10s %12s %12s" % ("", "wall s", "GiB/s", "python CPU s", "daemon CPU s"))
    for k, v in times.items():
        m = statistics.median(v)
        print("  %-24s %8.2f %10.2f %12.2f %12s" % (k, m, size / (1 << 30) / m, statistics.median(cpu[k]),
                                                 "%.2f" % statistics.median(dcpu[k]) if PID else "-"))


if __name__ == "__main__":
    main()
