package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The disk-pool workloads (the focused script is tests/bench/disk.sh):
//
//   - fresh: one file written from start to end in 1 MiB writes by 1 or 4
//     jobs (each a contiguous segment), into a file just truncated to its
//     size (sparse) or fallocated, with fsync at the end and optionally
//     every 64 MiB of each job, on a freshly made file system. Run on every
//     system, so it compares a pool on the disk with the disk's file system
//     (dnnfs-disk / disk) and a pool in /dev/shm with tmpfs.
//   - append: writes of 4 B and 4 KiB that extend a new file, against
//     overwrites of the same size in a written file; writes per second.

var freshFsyncs = []int{0, 64} // fio --fsync: 0 = only at the end

func freshConfig(jobs int, prep string, fsync int) Config {
	sync := "endfsync"
	if fsync > 0 {
		sync = fmt.Sprintf("fsync%dMiB", fsync)
	}
	return Config{ID: fmt.Sprintf("fresh/j%d/%s/%s", jobs, prep, sync), Phase: "fresh", Jobs: jobs, BS: MiB,
		RW: "write", Prep: prep, Fsync: fsync, Unit: "MiB/s"}
}

func appendConfig(bs int64, op string) Config {
	return Config{ID: fmt.Sprintf("append/%s/%s", sizeName(bs), op), Phase: "append", BS: bs, Op: op, Unit: "writes/s"}
}

var appendSizes = []int64{4, 4 * KiB}

// runFresh writes the fresh-file configurations on s, each on a newly made
// file system (a new pool, or an emptied directory): fresh blocks in the
// pool as a first user's are.
func (b *Bench) runFresh(ctx context.Context, s *System, run int, only map[string]bool) error {
	for _, fs := range freshFsyncs {
		for _, jobs := range []int{1, 4} {
			for _, prep := range []string{"truncate", "fallocate"} {
				c := freshConfig(jobs, prep, fs)
				if only != nil && !only[c.ID] {
					continue
				}
				if err := s.Start(ctx, b.p.FreshBytes); err != nil {
					return err
				}
				err := b.measureFresh(ctx, s, run, c)
				if serr := s.Stop(); serr != nil {
					b.fail(s.Name, "unmount after "+c.ID, s.mountCmd, serr)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (b *Bench) measureFresh(ctx context.Context, s *System, run int, c Config) error {
	size := b.p.FreshBytes
	path := filepath.Join(s.dir, "fresh")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if c.Prep == "fallocate" {
		err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
	} else {
		err = f.Truncate(size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s of %s: %w", c.Prep, path, err)
	}
	// Write back what earlier measurements left dirty, so it is not
	// charged to this one (the disk systems share the disk).
	syscall.Sync()
	seg := size / int64(c.Jobs)
	args := []string{
		"--directory=" + s.dir, "--filename=fresh", "--name=fresh",
		"--ioengine=psync", "--thread", fmt.Sprintf("--numjobs=%d", c.Jobs),
		"--rw=write", "--bs=1M", "--fallocate=none", "--end_fsync=1", "--group_reporting",
		fmt.Sprintf("--size=%d", seg), fmt.Sprintf("--offset_increment=%d", seg),
	}
	if c.Fsync > 0 {
		args = append(args, fmt.Sprintf("--fsync=%d", c.Fsync))
	}
	return b.profiled(ctx, s, c, func() error {
		start := time.Now()
		cpu0 := s.cpu()
		res, cmd, err := b.fio(ctx, nil, args)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cpu := -1.0
		if c1 := s.cpu(); cpu0 >= 0 && c1 >= 0 {
			cpu = c1 - cpu0
		}
		v, moved := 0.0, int64(0)
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("fio reported %d groups, want 1", len(res))
		}
		if err == nil {
			v, moved = res[0].WriteBW/float64(MiB), res[0].WriteBytes
			if moved < size {
				err = fmt.Errorf("fio wrote %d bytes of %d", moved, size)
			}
		}
		b.recordX(c, s, run, v, cmd, time.Since(start), moved, cpu, err)
		return nil
	})
}

// runAppend measures appends and overwrites of each size on s.
func (b *Bench) runAppend(ctx context.Context, s *System, run int, only map[string]bool) error {
	want := func(c Config) bool { return only == nil || only[c.ID] }
	if err := s.Start(ctx, b.p.AppendCap+64*MiB); err != nil {
		return err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			b.fail(s.Name, "unmount after the appends", s.mountCmd, err)
		}
	}()
	buf := make([]byte, MiB)
	fillRandom(buf, 3)
	if err := writeFile(filepath.Join(s.dir, "overwrite"), 64*MiB, buf); err != nil {
		return fmt.Errorf("writing the file to overwrite: %w", err)
	}
	rt := fioDur(b.p.appendTime)
	for _, bs := range appendSizes {
		for _, op := range []string{"append", "overwrite"} {
			c := appendConfig(bs, op)
			if !want(c) {
				continue
			}
			// append: a new file, every write extends it; fio stops at the
			// runtime or at AppendCap. overwrite: the same writes over the
			// written file, from its start again and again.
			args := []string{"--directory=" + s.dir, "--name=" + op, "--ioengine=psync", "--rw=write",
				fmt.Sprintf("--bs=%d", bs), "--fallocate=none", "--runtime=" + rt}
			if op == "append" {
				os.Remove(filepath.Join(s.dir, "append"))
				args = append(args, "--filename=append", fmt.Sprintf("--size=%d", b.p.AppendCap))
			} else {
				args = append(args, "--filename=overwrite", fmt.Sprintf("--size=%d", 64*MiB), "--time_based")
			}
			err := b.profiled(ctx, s, c, func() error {
				if b.profileFor[c.ID] != "" {
					args = append(args, "--runtime="+fioDur(5*b.p.appendTime)) // a profile wants samples
				}
				start := time.Now()
				res, cmd, err := b.fio(ctx, nil, args)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				v := 0.0
				if err == nil && len(res) != 1 {
					err = fmt.Errorf("fio reported %d groups, want 1", len(res))
				}
				if err == nil {
					v = res[0].WriteIOPS
				}
				b.record(c, s, run, v, cmd, time.Since(start), err)
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// crossRatio is config a / config b on one system, computed run by run
// (append / overwrite: both measured within seconds on the same mount).
func (st *stats) crossRatio(a, b, system string) *Ratio {
	x, y := st.byRun[a][system], st.byRun[b][system]
	var v []float64
	for run, xv := range x {
		if yv, ok := y[run]; ok && yv > 0 {
			v = append(v, xv/yv)
		}
	}
	if len(v) == 0 {
		return nil
	}
	r := &Ratio{ID: a + " / " + b, System: system, Peer: system, Median: median(v), N: len(v)}
	r.Min, r.Max = minMax(v)
	return r
}

// goalRow is one of the disk-pool goals with its measured ratio.
type goalRow struct {
	Name string
	R    *Ratio
	Min  float64 // the goal: at least this ratio
	Max  float64 // or, when not 0: at most this ratio
}

// goals lists the disk-pool goals that this run measured.
func (st *stats) goals(diskFS string) []goalRow {
	var out []goalRow
	add := func(name string, r *Ratio, min float64) {
		if r != nil {
			out = append(out, goalRow{Name: name, R: r, Min: min})
		}
	}
	if diskFS == "" {
		diskFS = "disk fs"
	} else {
		diskFS = strings.Fields(diskFS)[0]
	}
	for _, fs := range freshFsyncs {
		for _, jobs := range []int{1, 4} {
			for _, prep := range []string{"truncate", "fallocate"} {
				c := freshConfig(jobs, prep, fs)
				min, sync := 1.0, "end_fsync"
				if fs > 0 {
					min, sync = 0.9, fmt.Sprintf("fsync every %d MiB", fs)
				}
				add(fmt.Sprintf("disk pool / %s, %s, %d job(s), %sd file", diskFS, sync, jobs, prep), st.ratio(c.ID, "dnnfs-disk", "disk"), min)
			}
		}
	}
	for _, jobs := range []int{1, 4} {
		for _, prep := range []string{"truncate", "fallocate"} {
			min := 0.8
			if jobs == 1 {
				min = 0.75
			}
			add(fmt.Sprintf("shm pool / tmpfs, write, %d job(s), %sd file", jobs, prep), st.ratio(freshConfig(jobs, prep, 0).ID, "dnnfs-range", "tmpfs"), min)
		}
	}
	for _, jobs := range []int{1, 4} {
		add(fmt.Sprintf("shm pool / tmpfs, cold read, %d job(s), 1 MiB", jobs), st.ratio(fioConfig(group{"shared", jobs}, MiB, "read", "cold").ID, "dnnfs-range", "tmpfs"), 0.8)
	}
	for _, jobs := range []int{1, 4} {
		c := fioConfig(group{"shared", jobs}, 4*KiB, "randwrite", "").ID
		add(fmt.Sprintf("random 4 KiB writes / go-fuse loopback (FUSE passthrough), %d job(s)", jobs), st.ratio(c, "dnnfs-range", "loopback"), 1.2)
		add(fmt.Sprintf("random 4 KiB writes / go-fuse loopback without passthrough, %d job(s)", jobs), st.ratio(c, "dnnfs-range", "loopback-plain"), 1.2)
	}
	for _, sys := range []string{"dnnfs-disk", "dnnfs-range"} {
		for _, bs := range appendSizes {
			pool := map[string]string{"dnnfs-disk": "disk pool", "dnnfs-range": "shm pool"}[sys]
			add(fmt.Sprintf("appends / overwrites, %s, %s", sizeName(bs), pool),
				st.crossRatio(appendConfig(bs, "append").ID, appendConfig(bs, "overwrite").ID, sys), 0.8)
		}
	}
	return out
}

// goalsSection writes the goals table and the tables of the fresh-write and
// append workloads.
func (b *Bench) goalsSection(w *strings.Builder, st *stats, present []string) {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	gs := st.goals(b.machine.DiskFS)
	cg := append(b.clusterGoals(b.cluster), b.clusterGoals(b.clusterPaced)...)
	gs = append(gs, cg...)
	var fresh, app []Config
	for _, c := range configs {
		switch c.Phase {
		case "fresh":
			fresh = append(fresh, c)
		case "append":
			app = append(app, c)
		}
	}
	if len(gs) == 0 && len(fresh) == 0 && len(app) == 0 {
		return
	}
	only17 := len(cg) == len(gs) && len(fresh) == 0 && len(app) == 0
	switch {
	case only17:
		pr("## 4. Cluster goals (DESIGN.md §Cluster)\n\n")
	case len(cg) > 0:
		pr("## 4. Disk-pool and cluster goals; disk-backed pools, fresh blocks, appends\n\n")
	default:
		pr("## 4. Disk-backed pools, fresh blocks, appends\n\n")
	}
	if len(gs) > 0 {
		if only17 {
			pr("The cluster goals (DESIGN.md §Cluster), measured in section 5 (the cluster phase); median over the runs, min–max with more than one run.\n\n")
		} else {
			pr("The disk-pool goals (DESIGN.md §An fsync, §Delayed commit), each a ratio measured pair by pair within a run (median over the runs; min–max with more than one run). The focused script `tests/bench/disk.sh` measures the same at the goals' sizes.")
			if len(cg) > 0 {
				pr(" The cluster's (rows marked cluster) are from section 5, the cluster phase (S3 paced: 5b).")
			}
			pr("\n\n")
		}
		pr("| goal | measured | goal | met |\n|---|---:|---:|---|\n")
		for _, g := range gs {
			m := fmt.Sprintf("%.2f×", g.R.Median)
			if g.R.N > 1 {
				m += fmt.Sprintf(" (%.2f–%.2f)", g.R.Min, g.R.Max)
			}
			met, goal := "no", fmt.Sprintf("≥ %.2f×", g.Min)
			if g.Max > 0 {
				goal = fmt.Sprintf("≤ %.2f×", g.Max)
				if g.R.Median <= g.Max {
					met = "yes"
				}
			} else if g.R.Median >= g.Min {
				met = "yes"
			}
			pr("| %s | %s | %s | %s |\n", g.Name, m, goal, met)
		}
		pr("\n")
	}
	if len(fresh) > 0 {
		pr("### Writes into a new file (MiB/s)\n\n")
		pr("One %s file written from start to end in 1 MiB writes by 1 job, or by 4 jobs each writing a contiguous quarter, on a freshly made file system (a new pool): into a file just truncated to its size (sparse) or fallocated; `fsync` at the end, or also every 64 MiB of each job (`--fsync=64`).\n\n", sizeName(b.p.FreshBytes))
		var rc [][2]string
		for _, r := range [][2]string{{"dnnfs-disk", "disk"}, {"dnnfs-range", "tmpfs"}, {"dnnfs-file", "tmpfs"}} {
			if slices.Contains(present, r[0]) && slices.Contains(present, r[1]) {
				rc = append(rc, r)
			}
		}
		b.table(w, st, present, rc, "file, jobs, fsync", fresh, func(c Config) string {
			sync := "at the end"
			if c.Fsync > 0 {
				sync = fmt.Sprintf("every %d MiB", c.Fsync)
			}
			return fmt.Sprintf("%sd, %d, %s", c.Prep, c.Jobs, sync)
		})
	}
	if len(app) > 0 {
		pr("### Appends vs overwrites (writes/s)\n\n")
		pr("Writes of each size that extend a new file (every write changes its size, as a log's or xfstests generic/069's do) for %s or up to %s, and the same writes over a written 64 MiB file from its start (`--time_based`); `ioengine=psync`, 1 job. The last rows are append / overwrite on each system, run by run.\n\n", b.p.AppendTime, sizeName(b.p.AppendCap))
		b.table(w, st, present, nil, "size, writes", app, func(c Config) string {
			return fmt.Sprintf("%s, %s", sizeName(c.BS), c.Op)
		})
		// table ends with a blank line: continue it by hand instead.
		s := strings.TrimSuffix(w.String(), "\n")
		w.Reset()
		w.WriteString(s)
		for _, bs := range appendSizes {
			pr("| %s, append / overwrite |", sizeName(bs))
			for _, sys := range present {
				if r := st.crossRatio(appendConfig(bs, "append").ID, appendConfig(bs, "overwrite").ID, sys); r != nil {
					pr(" **%.2f×** |", r.Median)
				} else {
					pr(" |")
				}
			}
			pr("\n")
		}
		pr("\n")
	}
}
