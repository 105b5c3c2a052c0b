#!/usr/bin/python3
"""Plots for docs/BENCHMARKS.md from bench-out/results.json (tests/bench):
every plot goes to the raw directory; the report copies the headline ones to docs/bench/.

usage: plot.py RESULTS.json OUTDIR   -- prints the PNG files it wrote, one a line.
Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

SYSTEMS = ["tmpfs", "loopback", "loopback-plain", "dnnfs-range", "dnnfs-file", "disk", "dnnfs-disk"]
# Series must be told apart in grey print too: besides the colour each has
# its own marker, line style and bar hatching, and the colours differ in
# lightness.
STYLE = {
    "tmpfs": dict(color="#222222", marker="s", linestyle="-", label="tmpfs"),
    "loopback": dict(color="#6baed6", marker="^", linestyle=":", label="go-fuse loopback"),
    "loopback-plain": dict(color="#08519c", marker="<", linestyle=(0, (1, 1)), label="go-fuse loopback, no passthrough"),
    "dnnfs-range": dict(color="#d62728", marker="o", linestyle="-", label="dnnfs --lock=range"),
    "dnnfs-file": dict(color="#fdae6b", marker="D", linestyle="--", label="dnnfs --lock=file"),
    "disk": dict(color="#636363", marker="v", linestyle="-.", label="disk fs (native)"),
    "dnnfs-disk": dict(color="#7f2704", marker="P", linestyle=(0, (5, 1, 1, 1)), label="dnnfs, pool on disk"),
}
HATCH = {"tmpfs": "", "loopback": "..", "loopback-plain": "oo", "dnnfs-range": "//", "dnnfs-file": "xx", "disk": "--", "dnnfs-disk": "\\\\"}


def legend_all(axes):
    """One legend in the first panel naming every series of any panel (a
    peer measured in only some panels, such as loopback-plain, too)."""
    seen = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    axes.flat[0].legend(list(seen.values()), list(seen.keys()), fontsize=8)


def yscale(ax, values):
    """Log axis when the values span more than a decade, else linear from 0."""
    v = [x for x in values if x and x > 0]
    if v and max(v) / min(v) > 10:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: "%g" % y))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
    else:
        ax.set_ylim(bottom=0)


def bars(ax, groups, present, point):
    """Grouped bars: one group per (label, config id), one hatched bar per system."""
    width = 0.8 / max(1, len(present))
    ys_all = []
    for k, s in enumerate(present):
        xs, ys, lo, hi = [], [], [], []
        for i, (_, cid) in enumerate(groups):
            p = point(cid, s)
            if p:
                xs.append(i + (k - (len(present) - 1) / 2) * width)
                ys.append(p[0])
                lo.append(p[1])
                hi.append(p[2])
        if not xs:
            continue
        st = STYLE[s]
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=st["color"], hatch=HATCH[s],
               edgecolor="black", linewidth=0.5, label=st["label"])
        ys_all += ys
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[0] for g in groups], fontsize=8)
    yscale(ax, ys_all)
    ax.grid(alpha=0.3, axis="y")
OPS = [("write", "", "sequential write"), ("randwrite", "", "random write"),
       ("read", "cold", "sequential read, cold"), ("read", "warm", "sequential read, warm"),
       ("randread", "cold", "random read, cold"), ("randread", "warm", "random read, warm")]


def size_name(n):
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return "%d %s" % (n // v, unit)
    return "%d B" % n


def main():
    res = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    res["configs"] = res.get("configs") or []
    summ = {}
    for s in res.get("summary") or []:
        if s["n"] > 0:
            summ[(s["id"], s["system"])] = s
    present = [s for s in SYSTEMS if any(k[1] == s for k in summ)]
    # The disk systems run only the disk-pool workloads (fresh, append).
    shm = [s for s in present if s not in ("disk", "dnnfs-disk")]
    mode = res["params"]["mode"]
    m = res["machine"]
    foot = "%s, %d CPUs, %s; %s mode, median of %d run(s), bars = min..max" % (
        m["cpu"], m["cpus"], m["kernel"], mode, res["params"]["runs"])
    written = []

    def finish(fig, name, rect):
        # every figure: the machine footer, saved under out, listed
        fig.text(0.5, 0.005, foot, ha="center", fontsize=8, color="#666666")
        fig.tight_layout(rect=rect)
        fig.savefig(os.path.join(out, name), dpi=80)
        plt.close(fig)
        written.append(name)

    def point(cid, system):
        s = summ.get((cid, system))
        if not s:
            return None
        return s["median"], s["median"] - s["min"], s["max"] - s["median"]

    def series(ax, xs, ids, system, xvals=None):
        pts = [(x, point(i, system)) for x, i in zip(xs, ids)]
        pts = [(x, p) for x, p in pts if p]
        if not pts:
            return []
        st = dict(STYLE[system])
        ax.errorbar([x for x, _ in pts], [p[0] for _, p in pts],
                    yerr=[[p[1] for _, p in pts], [p[2] for _, p in pts]], capsize=3, **st)
        return [p[0] for _, p in pts]

    fio = [c for c in res["configs"] if c["phase"] == "fio"]
    blocks = sorted({c["bs"] for c in fio})
    shared_jobs = sorted({c["jobs"] for c in fio if c["layout"] == "shared"})
    # Scaling with jobs, one figure per block size (shared-file layout).
    for bs in blocks:
        fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
        for ax, (rw, temp, title) in zip(axes.T.flat, OPS):
            ids = ["fio/shared/j%d/%s/%s%s" % (j, size_name(bs).replace(" ", ""), rw, "/" + temp if temp else "")
                   for j in shared_jobs]
            ys = []
            for s in shm:
                ys += series(ax, shared_jobs, ids, s)
            ax.set_title(title)
            ax.set_xlabel("jobs (threads), one shared file")
            ax.set_ylabel("MiB/s")
            ax.set_xticks(shared_jobs)
            yscale(ax, ys)
            ax.grid(alpha=0.3)
        legend_all(axes)
        fig.suptitle("fio, %s blocks: scaling with jobs" % size_name(bs))
        finish(fig, "fio-jobs-%s.png" % size_name(bs).replace(" ", ""), (0, 0.02, 1, 0.97))
    # Per block size, at the most jobs.
    if blocks and shared_jobs:
        j = shared_jobs[-1]
        fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
        for ax, (rw, temp, title) in zip(axes.T.flat, OPS):
            ids = ["fio/shared/j%d/%s/%s%s" % (j, size_name(bs).replace(" ", ""), rw, "/" + temp if temp else "")
                   for bs in blocks]
            ys = []
            for s in shm:
                ys += series(ax, blocks, ids, s)
            ax.set_title(title)
            ax.set_xscale("log", base=2)
            ax.set_xticks(blocks)
            ax.set_xticklabels([size_name(b) for b in blocks])
            ax.set_xlabel("block size (%d jobs, one shared file)" % j)
            ax.set_ylabel("MiB/s")
            yscale(ax, ys)
            ax.grid(alpha=0.3)
        legend_all(axes)
        fig.suptitle("fio, %d jobs: per block size" % j)
        finish(fig, "fio-blocks-j%d.png" % j, (0, 0.02, 1, 0.97))

    pers = [c for c in res["configs"] if c["phase"] == "personality"]
    names = []
    for c in pers:
        if c["personality"] not in names:
            names.append(c["personality"])
    if names:
        threads = sorted({c["threads"] for c in pers})
        fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4.2), squeeze=False)
        for ax, n in zip(axes[0], names):
            ids = ["personality/%s/t%d" % (n, t) for t in threads]
            ys = []
            for s in shm:
                ys += series(ax, threads, ids, s)
            ax.set_title(n)
            ax.set_xlabel("threads")
            ax.set_ylabel("IOPS")
            ax.set_xticks(threads)
            yscale(ax, ys)
            ax.grid(alpha=0.3)
        legend_all(axes)
        fig.suptitle("Filebench-like personalities (fio)")
        finish(fig, "personalities.png", (0, 0.03, 1, 0.95))

    ck = [c for c in res["configs"] if c["phase"] == "checkpoint"]
    if ck:
        fig, ax = plt.subplots(figsize=(10, 4.2))
        bars(ax, [("%s\n%d thread(s)" % (c["op"], c["threads"]), c["id"]) for c in ck], shm, point)
        ax.set_ylabel("MiB/s")
        ax.legend(fontsize=8)
        ax.set_title("checkpoint save (tmp + fsync + rename) and load, %s" % size_name(res["params"]["checkpoint_bytes"]))
        finish(fig, "checkpoint.png", (0, 0.03, 1, 1))
    fresh = [c for c in res["configs"] if c["phase"] == "fresh"]
    if fresh:
        fig, ax = plt.subplots(figsize=(14, 4.8))
        groups = []
        for c in fresh:
            sync = "end" if not c.get("fsync") else "every %d MiB" % c["fsync"]
            groups.append(("%s\n%d job(s)\nfsync %s" % (c["prep"] + "d", c["jobs"], sync), c["id"]))
        bars(ax, groups, present, point)
        ax.set_ylabel("MiB/s")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
        ax.set_title("writes into a new %s file, 1 MiB writes (a new file system each)" % size_name(res["params"]["fresh_bytes"]))
        finish(fig, "fresh.png", (0, 0.03, 1, 1))
    app = [c for c in res["configs"] if c["phase"] == "append"]
    if app:
        fig, ax = plt.subplots(figsize=(10, 4.5))
        bars(ax, [("%s %s" % (size_name(c["bs"]), c["op"]), c["id"]) for c in app], present, point)
        ax.set_ylabel("writes/s")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
        ax.set_title("size-extending appends vs overwrites, 1 job")
        finish(fig, "append.png", (0, 0.03, 1, 1))
    if res.get("cluster"):
        cluster(res["cluster"], finish)
    for w in written:
        print(os.path.join(out, w))


def median(v):
    v = sorted(v)
    n = len(v)
    if not n:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def cluster(cl, finish):
    """Section 5: per-reader MiB/s of dnnfs and of rclone from S3, and S3 bytes over the file size."""
    rounds = [r for r in cl["rounds"] if not r.get("error")]
    size = cl["layout"]["file_bytes"]

    def group(variant, readers, grp):
        # per run: mean MiB/s of the group's readers, the round's S3 bytes / file
        out = []
        for r in rounds:
            if r["variant"] != variant or r["readers"] != readers:
                continue
            rs = [x for x in r["reader"] if x["group"] == grp]
            if not rs or any(x.get("error") or x["mibps"] <= 0 for x in rs):
                continue
            out.append((sum(x["mibps"] for x in rs) / len(rs), r["s3_bytes"] / size))
        return out

    rows = [("1 reader", "together", 1, 1, 1), ("2 at once", "together", 2, 1, 2), ("4 at once", "together", 4, 1, 4),
            ("staggered:\nreader 1", "staggered", 4, 1, 1), ("staggered:\nreaders 2-4", "staggered", 4, 2, 3)]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.38
    ys = []
    for k, (name, color, hatch) in enumerate((("dnnfs cluster", "#d62728", "//"), ("S3 only (rclone cat)", "#636363", ".."))):
        xs, vals = [], []
        for i, (_, var, n, grp, peers) in enumerate(rows):
            g = group(var, n, grp) if k == 0 else group("s3only", peers, 1)
            v = median([x[0] for x in g])
            if v:
                xs.append(i + (k - 0.5) * width)
                vals.append(v)
        ax.bar(xs, vals, width, color=color, hatch=hatch, edgecolor="black", linewidth=0.5, label=name)
        for x, v in zip(xs, vals):
            ax.annotate("%.0f" % v, (x, v), ha="center", va="bottom", fontsize=7)
        ys += vals
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r[0] for r in rows], fontsize=8)
    ax.set_ylabel("MiB/s per reader")
    yscale(ax, ys)
    if ax.get_yscale() == "log" and ys:
        ax.set_ylim(bottom=min(ys) / 2)  # the shortest bar shows
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    paced = cl["layout"].get("s3_limit_mibps")
    ax.set_title("loading a %s checkpoint written on another node%s" % (
        size_name(size), " (S3 paced to %g MiB/s)" % paced if paced else ""))
    labels, vals, colors = [], [], []
    for name, var, n in (("1 reader", "together", 1), ("2 at once", "together", 2), ("4 at once", "together", 4), ("4 staggered", "staggered", 4)):
        v = median([x[1] for x in group(var, n, 1)])
        if v is not None:
            labels.append(name)
            vals.append(v)
            colors.append("#d62728")
    for n in (1, 2, 4):
        v = median([x[1] for x in group("s3only", n, 1)])
        if v is not None:
            labels.append("rclone\n%d at once" % n)
            vals.append(v)
            colors.append("#636363")
    ax2.bar(range(len(vals)), vals, 0.6, color=colors, edgecolor="black", linewidth=0.5)
    ax2.axhline(1.0, color="black", linestyle=":", linewidth=1)
    ax2.set_xticks(range(len(vals)))
    ax2.set_xticklabels(labels, fontsize=8)
    ax2.set_ylabel("S3 bytes in all / file size")
    yscale(ax2, vals)
    if ax2.get_yscale() == "log" and vals:
        ax2.set_ylim(bottom=min(vals) / 2)
    ax2.grid(alpha=0.3, axis="y")
    ax2.set_title("bytes read from S3")
    finish(fig, "cluster.png", (0, 0.03, 1, 1))


if __name__ == "__main__":
    main()
