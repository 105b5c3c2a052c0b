package main

import (
	"fmt"
	"math"
	"strings"
)

// clusterRow is one row of the cluster table: a group of readers of one
// kind of round, with the S3-only round it is compared with.
type clusterRow struct {
	Label   string
	Variant string // together, staggered
	Readers int    // readers in the round
	Group   int    // staggered: 1 = the first reader, 2 = the later ones
	S3Peers int    // rclone readers at once to compare with
}

func clusterRows() []clusterRow {
	var rows []clusterRow
	for _, n := range clusterReaderCounts {
		label := fmt.Sprintf("%d readers at once", n)
		if n == 1 {
			label = "1 reader"
		}
		rows = append(rows, clusterRow{Label: label, Variant: "together", Readers: n, Group: 1, S3Peers: n})
	}
	rows = append(rows,
		clusterRow{Label: "4 readers staggered: reader 1 alone", Variant: "staggered", Readers: 4, Group: 1, S3Peers: 1},
		clusterRow{Label: "4 readers staggered: readers 2–4 after it, at once", Variant: "staggered", Readers: 4, Group: 2, S3Peers: 3})
	return rows
}

// groupStats are one round's readers of one group: mean, min and max
// MiB/s, mean S3 bytes per reader, bytes by source summed.
type groupStats struct {
	ok                       bool
	mean, lo, hi             float64
	s3PerReader              float64
	local, peer, home, s3Src int64
	s3Total, s3Gets, file    int64
	readers                  int
}

func (res *clusterResults) group(run int, variant string, readers, group int) groupStats {
	var g groupStats
	for _, r := range res.Rounds {
		if r.Run != run || r.Variant != variant || r.Readers != readers || r.Err != "" {
			continue
		}
		g.lo, g.hi = math.Inf(1), math.Inf(-1)
		var sum, s3 float64
		for _, rd := range r.Reader {
			if rd.Group != group {
				continue
			}
			if rd.Err != "" || rd.MiBps <= 0 {
				return groupStats{}
			}
			g.readers++
			sum += rd.MiBps
			s3 += float64(rd.S3)
			g.lo, g.hi = math.Min(g.lo, rd.MiBps), math.Max(g.hi, rd.MiBps)
			g.local += rd.Local
			g.peer += rd.Peer
			g.home += rd.Home
			g.s3Src += rd.S3Fetch
			g.s3Gets += rd.S3Gets
		}
		if g.readers == 0 {
			return groupStats{}
		}
		g.ok = true
		g.mean, g.s3PerReader = sum/float64(g.readers), s3/float64(g.readers)
		g.s3Total, g.file = r.S3Bytes, res.Layout.FileBytes
	}
	return g
}

func (res *clusterResults) runs() []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range res.Rounds {
		if !seen[r.Run] {
			seen[r.Run] = true
			out = append(out, r.Run)
		}
	}
	return out
}

// overRuns summarizes f over the runs where it is defined.
func (res *clusterResults) overRuns(f func(run int) (float64, bool)) *Ratio {
	var v []float64
	for _, run := range res.runs() {
		if x, ok := f(run); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return nil
	}
	r := &Ratio{Median: median(v), N: len(v)}
	r.Min, r.Max = minMax(v)
	return r
}

func (res *clusterResults) dnnfs(row clusterRow) *Ratio {
	return res.overRuns(func(run int) (float64, bool) {
		g := res.group(run, row.Variant, row.Readers, row.Group)
		return g.mean, g.ok
	})
}

func (res *clusterResults) s3only(n int) *Ratio {
	return res.overRuns(func(run int) (float64, bool) {
		g := res.group(run, "s3only", n, 1)
		return g.mean, g.ok
	})
}

// speedup is the row's per-reader MiB/s over the S3-only readers' at the
// row's concurrency, run by run.
func (res *clusterResults) speedup(row clusterRow) *Ratio {
	return res.overRuns(func(run int) (float64, bool) {
		g, s := res.group(run, row.Variant, row.Readers, row.Group), res.group(run, "s3only", row.S3Peers, 1)
		return g.mean / s.mean, g.ok && s.ok
	})
}

// s3Share is the round's S3 bytes over the file size, run by run.
func (res *clusterResults) s3Share(row clusterRow) *Ratio {
	return res.overRuns(func(run int) (float64, bool) {
		g := res.group(run, row.Variant, row.Readers, row.Group)
		return float64(g.s3Total) / float64(g.file), g.ok && g.file > 0
	})
}

// clusterGoals are the cluster goals (DESIGN.md §Cluster): the readers after the first at ≥ 2×
// the S3-only rate, and S3 bytes ≈ 1× the file in all (at most 1.1×).
func (b *Bench) clusterGoals(res *clusterResults) []goalRow {
	if res == nil {
		return nil
	}
	var out []goalRow
	rows := clusterRows()
	paced := ""
	if res.Layout.S3LimitMiBps > 0 {
		paced = fmt.Sprintf(" (S3 paced to %g MiB/s)", res.Layout.S3LimitMiBps)
	}
	later := rows[len(rows)-1]
	if r := res.speedup(later); r != nil {
		out = append(out, goalRow{Name: fmt.Sprintf("cluster: loading a %s checkpoint, readers 2–4 (after reader 1) / S3-only (rclone, 3 at once), MiB/s per reader%s", sizeName(res.Layout.FileBytes), paced), R: r, Min: 2})
	}
	for _, row := range rows {
		if row.Variant == "staggered" && row.Group == 2 {
			continue // the same round as its first reader
		}
		label := fmt.Sprintf("%d reader(s) at once", row.Readers)
		if row.Variant == "staggered" {
			label = "4 readers staggered"
		}
		if r := res.s3Share(row); r != nil {
			out = append(out, goalRow{Name: "cluster: S3 bytes in all / file size, " + label + paced, R: r, Max: 1.1})
		}
	}
	return out
}

func ratioText(r *Ratio, format string) string {
	if r == nil {
		return "—"
	}
	s := fmt.Sprintf(format, r.Median)
	if lo, hi := fmt.Sprintf(format, r.Min), fmt.Sprintf(format, r.Max); r.N > 1 && lo != hi {
		s += " (" + lo + "–" + hi + ")"
	}
	return s
}

// clusterSection writes section 5 (or, for the paced rounds, 5b) under
// heading: the method, the two tables (rates, then where the chunks came
// from) and the commands.
func (b *Bench) clusterSection(w *strings.Builder, res *clusterResults, heading string) {
	if res == nil {
		return
	}
	fmt.Fprintf(w, "%s\n\n", heading)
	b.clusterMethod(w, res.Layout)
	clusterRates(w, res)
	clusterSources(w, res)
	clusterCommands(w, res)
}

// clusterMethod says what ran where and how each round measures.
func (b *Bench) clusterMethod(w *strings.Builder, lay clusterLayout) {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	file := sizeName(lay.FileBytes)
	pr("DESIGN.md §Cluster: a %s checkpoint written on one node, loaded by 1, 2 and 4 others, against plain reads of the same S3 objects with a maintained client (rclone). Goal: the second and later readers at ≥ 2× the S3-only rate, and S3 bytes ≈ 1× the file size in all, not 1× per reader (section 4's goal table).\n\n", file)
	pr("**Layout, all on this machine.** One etcd member (%s, %s) and one versitygw S3 server (%s, posix backend, its data directory `%s` on the disk), started by the driver and stopped by the pids it started. ",
		lay.Etcd, lay.EtcdVersion, lay.S3Version, lay.S3Dir)
	pr("dnnfs nodes, each a daemon with its own pool, peer servers on `127.0.0.N` with a free port each mount (`--peer-insecure`: plain HTTP), chunk size %s (`--chunk-size`): the writer `w` on 127.0.0.1 and readers `r1`..`r4` on 127.0.0.2..127.0.0.5. ", sizeName(lay.ChunkBytes))
	where := "in a tmpfs directory under /dev/shm"
	if lay.Pools == "disk" {
		where = "in files in a directory on the disk (`" + lay.PoolDir + "`, next to the S3 data)"
	}
	pr("The writer's pool is in /dev/shm; the reader pools (%s each) are %s (%s; `-cluster-pools` / `CLUSTER_POOLS=shm|disk|auto` chooses). ", sizeName(poolSize(lay.FileBytes)), where, lay.MemNote)
	pr("The machine has %d GiB of RAM and %d CPUs for all of it: etcd, the S3 server, up to 4 daemons, their readers and rclone.\n\n", b.machine.MemGiB, b.machine.CPUs)
	if lay.S3LimitMiBps > 0 {
		pr("**S3 paced to %g MiB/s.** The nodes and rclone reach S3 through a reverse proxy in the driver (`-cluster-s3-mibps %g`, `CLUSTER_S3_MIBPS`) that paces the bodies of all its replies together to %g MiB/s: a store across a network link the nodes share, instead of a server at memory speed on this machine; requests and uploads pass unpaced. These rounds ran once, in the first run, on the same checkpoint as the rounds of section 5, with fresh reader pools; everything else is as there.\n\n", lay.S3LimitMiBps, lay.S3LimitMiBps, lay.S3LimitMiBps)
	}
	pr("**Method.** The writer writes the file in 1 MiB writes and closes it: the close commits it (its chunks and manifest to S3, then one etcd transaction); then the writer unmounts and its pool is removed, as after an earlier job, so no reader finds the chunks in a peer's pool at first: every byte comes from S3 once, through the chunks' home nodes (rendezvous hashing over the live readers, one S3 GET per chunk for concurrent askers), then peer to peer. ")
	pr("Every round makes fresh reader pools (mkfs, mount, read, unmount, remove), so nothing is cached from an earlier round. **At once**: all readers start together. **Staggered**: reader 1 reads the file alone (the 3 others mounted and idle, serving as home nodes), then readers 2–4 start together. Each reader is a fio process on its node's mount: the whole file in 1 MiB reads (`--rw=read --bs=1M --ioengine=psync`); MiB/s is fio's. ")
	pr("S3 bytes are each node's `s3.chunk_get_bytes` from `dnnfs status --json` after the round (its own reads and the fills it made as a home node for others). ")
	pr("**S3-only**: 1, 2, 3 and 4 `rclone cat` processes at once, each reading all the file's chunk objects from the same server (%s, S3 remote configured by environment variables); MiB/s = bytes / wall time of each. ", lay.Rclone)
	if lay.S3LimitMiBps > 0 {
		pr("They read through the same pacing proxy as the nodes. ")
	} else {
		pr("The S3 server's files are likely in the page cache for both (written minutes before), and the server is on this machine, reached over loopback: S3 here answers at memory speed, far faster than a store across a network, the case most favourable to the S3-only reads (the goal is about a remote store, where a GET costs much more than a peer's read; `-cluster-s3-mibps` emulates one). ")
	}
	pr("dnnfs / S3-only compares each row's mean MiB/s per reader with the S3-only readers' at the same number of readers at once. Writing and committing the file on the writer: %s MiB/s.\n\n", joinRates(lay.WriteMiBps))
}

// clusterRates is the table of read rates and S3 bytes, dnnfs against S3
// alone, one row per reader arrangement.
func clusterRates(w *strings.Builder, res *clusterResults) {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	lay := res.Layout
	rows := clusterRows()
	pr("| readers | dnnfs MiB/s per reader (mean; slowest–fastest reader) | S3-only MiB/s per reader (rclone) | dnnfs / S3-only | S3 bytes per reader | S3 bytes in all / file size |\n|---|---:|---:|---:|---:|---:|\n")
	runs := res.runs()
	for _, row := range rows {
		m := res.dnnfs(row)
		var lo, hi, s3pr []float64
		for _, run := range runs {
			if g := res.group(run, row.Variant, row.Readers, row.Group); g.ok {
				lo, hi, s3pr = append(lo, g.lo), append(hi, g.hi), append(s3pr, g.s3PerReader)
			}
		}
		dn := "**ERR**"
		if m != nil {
			dn = fmtVal(m.Median)
			if row.Readers > 1 && !(row.Variant == "staggered" && row.Group == 1) {
				dn += fmt.Sprintf(" (%s–%s)", fmtVal(median(lo)), fmtVal(median(hi)))
			}
			if m.N > 1 {
				dn += fmt.Sprintf(" ±%.0f%%", (m.Max-m.Min)/2/m.Median*100)
			}
		}
		s3o := "—"
		if r := res.s3only(row.S3Peers); r != nil {
			s3o = fmtVal(r.Median)
			if row.S3Peers != row.Readers {
				s3o += fmt.Sprintf(" (%d at once)", row.S3Peers)
			}
		}
		s3b := "—"
		if len(s3pr) > 0 {
			v := median(s3pr)
			s3b = fmt.Sprintf("%s (%.2f×)", mibs(v), v/float64(lay.FileBytes))
		}
		pr("| %s | %s | %s | %s | %s | %s |\n", row.Label, dn, s3o, ratioText(res.speedup(row), "%.2f×"), s3b, ratioText(res.s3Share(row), "%.2f×"))
	}
	pr("\n")
}

// clusterSources is the table of where the rows' chunks came from.
func clusterSources(w *strings.Builder, res *clusterResults) {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	rows, runs := clusterRows(), res.runs()
	pr("Where the chunks came from: the fetch counters of the row's nodes (`fetch` in `dnnfs status --json`, read after the round, so a staggered round's home fills made while reader 1 read count on readers 2–4), summed over the row's readers, median over the runs, as multiples of the file size. **local** = already in the node's pool, **peer** = from a node holding the chunk, **home** = from the chunk's home node (which fills it from S3 once for all askers), **S3** = from S3 by the node itself: as the chunk's home, for its own reads and for the others'.\n\n")
	pr("| readers | local | peer | home | S3 | S3 GETs (all nodes of the round) |\n|---|---:|---:|---:|---:|---:|\n")
	for _, row := range rows {
		var l, p, h, s, gets []float64
		var file float64
		for _, run := range runs {
			g := res.group(run, row.Variant, row.Readers, row.Group)
			if !g.ok {
				continue
			}
			file = float64(g.file)
			l, p, h, s = append(l, float64(g.local)), append(p, float64(g.peer)), append(h, float64(g.home)), append(s, float64(g.s3Src))
			var all int64
			for _, r := range res.Rounds {
				if r.Run == run && r.Variant == row.Variant && r.Readers == row.Readers {
					for _, rd := range r.Reader {
						all += rd.S3Gets
					}
				}
			}
			gets = append(gets, float64(all))
		}
		if len(l) == 0 {
			pr("| %s | | | | | |\n", row.Label)
			continue
		}
		x := func(v []float64) string { return fmt.Sprintf("%.2f×", median(v)/file) }
		pr("| %s | %s | %s | %s | %s | %.0f |\n", row.Label, x(l), x(p), x(h), x(s), median(gets))
	}
	pr("\n")
}

// clusterCommands shows one reader's mount, one reader's fio and rclone.
func clusterCommands(w *strings.Builder, res *clusterResults) {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	lay := res.Layout
	pr("The file has %d chunks of %s. Commands: one reader's mount (credentials in `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`):\n\n```sh\n%s\n", (lay.FileBytes+lay.ChunkBytes-1)/lay.ChunkBytes, sizeName(lay.ChunkBytes), lay.MountCmd)
	for _, r := range res.Rounds {
		if r.Variant != "s3only" && len(r.Reader) > 0 && r.Reader[0].Cmd != "" {
			pr("%s\n", r.Reader[0].Cmd)
			break
		}
	}
	pr("%s\n```\n\n", lay.RcloneCmd)
}

func mibs(v float64) string {
	if v >= float64(GiB) {
		return fmt.Sprintf("%.2f GiB", v/float64(GiB))
	}
	return fmt.Sprintf("%.0f MiB", v/float64(MiB))
}

func joinRates(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	var s []string
	for _, x := range v {
		s = append(s, fmtVal(x))
	}
	return strings.Join(s, ", ")
}
