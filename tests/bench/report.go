package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

var systemOrder = []string{"tmpfs", "loopback", "loopback-plain", "dnnfs-range", "dnnfs-file", "disk", "dnnfs-disk"}

var systemTitle = map[string]string{
	"tmpfs":          "tmpfs",
	"loopback":       "loopback",
	"loopback-plain": "loopback, no passthrough",
	"dnnfs-range":    "dnnfs range",
	"dnnfs-file":     "dnnfs file",
	"disk":           "disk fs",
	"dnnfs-disk":     "dnnfs disk pool",
}

// ratio columns of every table: system/peer.
var ratioCols = [][2]string{
	{"dnnfs-range", "tmpfs"}, {"dnnfs-range", "loopback"},
	{"dnnfs-file", "tmpfs"}, {"dnnfs-file", "loopback"},
	{"dnnfs-range", "dnnfs-file"},
}

// collectLogs keeps what the daemons logged (at --log-level warn, anything
// logged is a warning or an error) before the scratch directory goes.
func (b *Bench) collectLogs() map[string][]string {
	out := map[string][]string{}
	files, _ := filepath.Glob(filepath.Join(b.logs, "*.log"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".log")
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		n := 0
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if l == "" || strings.HasPrefix(l, "# ") {
				continue
			}
			// Dedupe on the text after the timestamp.
			key := l
			if i := strings.IndexByte(l, '\t'); i > 0 {
				key = l[i+1:]
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			n++
			if n <= 30 {
				out[name] = append(out[name], oneLine(l, 400))
			}
		}
		fh.Close()
		if n > 30 {
			out[name] = append(out[name], fmt.Sprintf("… %d more distinct lines", n-30))
		}
	}
	return out
}

type resultsFile struct {
	Machine      machineInfo         `json:"machine"`
	Params       params              `json:"params"`
	Systems      []systemInfo        `json:"systems"`
	Elapsed      float64             `json:"elapsed_seconds"`
	Configs      []Config            `json:"configs"`
	Summary      []Summary           `json:"summary"`
	Ratios       []Ratio             `json:"ratios"`
	Measurements []Measurement       `json:"measurements"`
	Failures     []Failure           `json:"failures"`
	DaemonLogs   map[string][]string `json:"daemon_logs"`
	Profiles     []profileOut        `json:"profiles,omitempty"`
	Micro        string              `json:"go_micro_benchmarks,omitempty"`
	Cluster      *clusterResults     `json:"cluster,omitempty"`
	ClusterPaced *clusterResults     `json:"cluster_paced,omitempty"`
}

type systemInfo struct {
	Name  string `json:"name"`
	Desc  string `json:"description"`
	Mount string `json:"mount_command,omitempty"`
}

// report writes results.json, micro.txt and every plot into the raw
// directory, and docs/BENCHMARKS.md with its headline plots in docs/bench/.
func (b *Bench) report(logs map[string][]string, systems []*System) error {
	dir := b.raw
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	st := computeStats(b.meas)
	var present []string
	seen := map[string]bool{}
	for _, m := range b.meas {
		seen[m.System] = true
	}
	for _, s := range systemOrder {
		if seen[s] {
			present = append(present, s)
		}
	}
	res := resultsFile{Machine: b.machine, Params: b.p, Elapsed: b.elapsed.Seconds(), Configs: configs,
		Measurements: b.meas, Failures: b.failures, DaemonLogs: logs, Profiles: b.profiles, Micro: b.micro, Cluster: b.cluster, ClusterPaced: b.clusterPaced}
	for _, s := range systems {
		res.Systems = append(res.Systems, systemInfo{s.Name, s.Desc, s.mountCmd})
	}
	for _, c := range configs {
		for _, s := range present {
			if sm := st.sum[c.ID][s]; sm != nil {
				res.Summary = append(res.Summary, *sm)
			}
		}
		for _, rc := range ratioCols {
			if r := st.ratio(c.ID, rc[0], rc[1]); r != nil {
				res.Ratios = append(res.Ratios, *r)
			}
		}
	}
	js, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return err
	}
	resPath := filepath.Join(dir, "results.json")
	if err := os.WriteFile(resPath, js, 0o644); err != nil {
		return err
	}
	if b.micro != "" {
		os.WriteFile(filepath.Join(dir, "micro.txt"), []byte(b.micro), 0o644)
	}

	plots, plotNote := b.plot(resPath, dir)
	if plotNote == "" { // no plots made: docs/bench keeps the last run's
		if err := b.copyHeadlines(dir, plots); err != nil {
			return err
		}
	}
	md := b.markdown(st, present, plots, plotNote, logs, systems)
	path := filepath.Join(b.out, "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	b.logf("wrote %s, %s and %d plot(s); %d failure(s)", path, resPath, len(plots), len(b.failures))
	return nil
}

// plot runs tests/bench/plot.py with the system's python3 and matplotlib.
func (b *Bench) plot(resPath, dir string) ([]string, string) {
	old, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	for _, f := range old {
		os.Remove(f)
	}
	script := filepath.Join(b.repo, "tests", "bench", "plot.py")
	cmd := exec.Command("/usr/bin/python3", script, resPath, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		note := fmt.Sprintf("no plots: `/usr/bin/python3 tests/bench/plot.py` failed (%v): %s — install python3-matplotlib (`apt-get install -y python3-matplotlib`) and re-run.", err, oneLine(tail(string(out), 300), 300))
		b.logf("%s", note)
		return nil, note
	}
	var plots []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); strings.HasSuffix(l, ".png") {
			plots = append(plots, filepath.Base(l))
		}
	}
	return plots, ""
}

// headlinePlots are the plots the report embeds from docs/bench/ (tracked):
// small and large I/O against the peers, the checkpoint and the cluster.
// The others stay in the raw directory.
var headlinePlots = map[string]bool{
	"fio-jobs-4KiB.png": true, "fio-jobs-1MiB.png": true, "checkpoint.png": true, "cluster.png": true,
}

// copyHeadlines copies this run's headline plots from the raw directory into
// docs/bench/, removing the headline plots this run did not make.
func (b *Bench) copyHeadlines(raw string, plots []string) error {
	dir := filepath.Join(b.out, "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for f := range headlinePlots {
		os.Remove(filepath.Join(dir, f))
	}
	for _, f := range plots {
		if !headlinePlots[f] {
			continue
		}
		data, err := os.ReadFile(filepath.Join(raw, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fmtVal(v float64) string {
	switch {
	case math.IsNaN(v) || v <= 0:
		return "—"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// cell is "median ±half-range%" (the ± only with more than one run).
func cell(s *Summary) string {
	if s == nil {
		return ""
	}
	if s.N == 0 {
		if s.Errors > 0 {
			return "**ERR**"
		}
		return "—"
	}
	v := fmtVal(s.Median)
	if s.N > 1 && s.Median > 0 {
		v += fmt.Sprintf(" ±%.0f%%", (s.Max-s.Min)/2/s.Median*100)
	}
	if s.Errors > 0 {
		v += fmt.Sprintf(" (%d ERR)", s.Errors)
	}
	return v
}

func ratioCell(r *Ratio) string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("%.2f", r.Median)
}

func (b *Bench) markdown(st *stats, all []string, plots []string, plotNote string, logs map[string][]string, systems []*System) string {
	d := newMDDoc(b, st, all)
	d.header()
	d.summary()
	d.reproduce()
	d.method(systems)
	d.plots(plots, plotNote)
	d.fioTables()
	d.cpuTable()
	d.phaseTables()
	b.goalsSection(&d.w, st, all)
	b.clusterSection(&d.w, b.cluster, "## 5. Cluster: loading a checkpoint written on another node")
	b.clusterSection(&d.w, b.clusterPaced, "### 5b. The same, with S3 across a paced link")
	d.micro()
	d.profiles()
	d.failures(logs)
	d.commands(systems)
	return d.w.String()
}

// mdDoc is BENCHMARKS.md being written, one method per section: the run,
// its statistics and what the sections' tables share.
type mdDoc struct {
	b       *Bench
	st      *stats
	present []string    // the systems of every table but section 4's
	rcols   [][2]string // the ratio columns whose both systems are present
	cpu     map[string]cpuUse
	w       strings.Builder
}

func newMDDoc(b *Bench, st *stats, all []string) *mdDoc {
	d := &mdDoc{b: b, st: st, cpu: daemonCPU(b.meas)}
	// The disk systems run only the disk-pool workloads (section 4): the
	// other tables leave them out.
	for _, s := range all {
		if s != "disk" && s != "dnnfs-disk" {
			d.present = append(d.present, s)
		}
	}
	for _, rc := range ratioCols {
		if d.has(rc[0]) && d.has(rc[1]) {
			d.rcols = append(d.rcols, rc)
		}
	}
	return d
}

func (d *mdDoc) pr(format string, a ...any) { fmt.Fprintf(&d.w, format, a...) }

func (d *mdDoc) has(s string) bool {
	for _, x := range d.present {
		if x == s {
			return true
		}
	}
	return false
}

// header writes the title, the machine and its load.
func (d *mdDoc) header() {
	b := d.b
	p, m := b.p, b.machine
	d.pr("# dnnfs benchmarks\n\n")
	d.pr("<!-- Generated by `make bench` (tests/bench); do not edit by hand: re-run it. -->\n\n")
	if p.Mode == "quick" {
		d.pr("> **Quick mode** (`make bench QUICK=1`): small sizes, a subset of the matrix, %d run(s). A smoke test of the benchmark, not a result: run `make bench` for the full matrix.\n\n", p.Runs)
	}
	d.pr("**Machine:** %s · %d CPUs · %d GiB RAM · %s · %s · %s · dnnfs %s · %s  \n", m.CPU, m.CPUs, m.MemGiB, m.Kernel, m.Fio, m.Go, m.Commit, m.Date)
	d.pr("**Load average** (1/5/15 min) at start %s, at end %s. **Mode** %s, %d run(s) of every configuration, %s in all.\n\n",
		m.LoadStart, m.LoadEnd, p.Mode, p.Runs, b.elapsed.Round(time.Second))
	if la := strings.Fields(m.LoadStart); len(la) > 0 {
		var l float64
		fmt.Sscanf(la[0], "%g", &l)
		if l > float64(m.CPUs) {
			d.pr("> **Warning:** the machine was busy (load average %s on %d CPUs) when this ran; absolute numbers and ratios are noisy. Re-run on an idle machine before drawing conclusions.\n\n", la[0], m.CPUs)
		}
	}
}

// summary writes the headline: the geometric mean of each workload's ratios.
func (d *mdDoc) summary() {
	b := d.b
	d.pr("## Summary\n\n")
	d.pr("Geometric mean, over the configurations of each workload, of the median per-run ratio (higher is better for dnnfs; 1.00 = same).\n\n")
	phases := []struct{ key, title string }{{"fio", "fio matrix (MiB/s)"}, {"personality", "personalities (IOPS)"}, {"checkpoint", "checkpoint save/load (MiB/s)"}, {"fresh", "writes into a new file (MiB/s)"}}
	d.pr("| workload |")
	for _, rc := range d.rcols {
		d.pr(" %s / %s |", systemTitle[rc[0]], systemTitle[rc[1]])
	}
	d.pr("\n|---|")
	for range d.rcols {
		d.pr("---:|")
	}
	d.pr("\n")
	for _, ph := range phases {
		var ids []string
		for _, c := range configs {
			if c.Phase == ph.key {
				ids = append(ids, c.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		d.pr("| %s |", ph.title)
		for _, rc := range d.rcols {
			g, n := d.st.geomean(ids, rc[0], rc[1])
			if n == 0 {
				d.pr(" — |")
			} else {
				d.pr(" %.2f |", g)
			}
		}
		d.pr("\n")
	}
	d.pr("\n")
	if len(b.failures) > 0 {
		d.pr("**%d failure(s)** during the run: see [Failures](#failures).\n\n", len(b.failures))
	} else {
		d.pr("No failures: every fio run, save and load completed without an error, and every daemon unmounted cleanly.\n\n")
	}
}

// reproduce writes how to re-run the benchmark.
func (d *mdDoc) reproduce() {
	d.pr("## How to reproduce\n\n")
	d.pr("```sh\nmake bench            # full: %s\nmake bench QUICK=1    # quick: under 5 minutes, a subset at small sizes\nmake bench RUNS=5     # more runs of every configuration\nmake bench PROFILE=1  # also CPU-profile dnnfs where it is furthest behind tmpfs\nmake bench CLUSTER_S3_MIBPS=100  # section 5b's rounds with S3 paced to 100 MiB/s (default 200; 0: none)\n```\n\n", fullNote)
	d.pr("Run as root (it mounts tmpfs and FUSE file systems) on an otherwise idle machine. `make bench` builds and runs `tests/bench` (Go); it installs fio and python3-matplotlib with apt-get when missing, builds `cmd/dnnfs`, go-fuse's `example/loopback` from the module cache and `tests/bench/loopplain` (the same loopback with FUSE passthrough off; it runs only the random 4 KiB writes, 1 MiB writes and cold reads), makes its own tmpfs mount and pools in a scratch directory under /dev/shm, and unmounts and removes everything on exit or Ctrl-C. Results: this page with its headline plots; the raw results of the run, `bench-out/results.json` (every measurement with its exact command), every plot, `micro.txt` and the CPU profiles, are in `bench-out/` at the repository root, which `make bench` writes and git ignores.\n\n")
	d.pr("Go micro-benchmarks of the hot paths (named for benchstat):\n\n```sh\nTMPDIR=/dev/shm go test -run '^$' -bench . -count 10 ./pmem ./lock ./journal ./core > new.txt\nbenchstat old.txt new.txt\n```\n\n")
}

// method writes what each system is and how each workload measures.
func (d *mdDoc) method(systems []*System) {
	b := d.b
	p, m := b.p, b.machine
	d.pr("## Method\n\n")
	d.pr("| system | what |\n|---|---|\n")
	for _, s := range systems {
		d.pr("| %s | %s |\n", systemTitle[s.Name], s.Desc)
	}
	d.pr("\n")
	if lb, ok := d.cpu["loopback"]; ok && lb.rBytes > 0 {
		rd, wr := lb.perGiB()
		switch {
		case rd < 0.05 && m.FusePassthrough == "y":
			d.pr("- **loopback's reads and writes bypass its daemon here**: the kernel has FUSE passthrough (CONFIG_FUSE_PASSTHROUGH=y) and go-fuse's loopback, run as root, hands each opened file to the kernel (FOPEN_PASSTHROUGH, a BACKING_OPEN at each open in its -debug log). Its daemon used %.3f CPU-seconds per GiB read and %.2f per GiB written (dnnfs: see the CPU table below). What still reaches it per write is one GETXATTR of security.capability (the kernel's file_remove_privs: 1024 GETXATTR for 1024 random 4 KiB writes in its -debug log), so for small writes loopback costs one FUSE round trip per write, as dnnfs does, and for large ones it measures the kernel, not a FUSE daemon. dnnfs serves every read and write in its daemon (FUSE direct I/O from the pool mapping).\n", rd, wr)
		case rd < 0.05:
			d.pr("- loopback's daemon used %.3f CPU-seconds per GiB read: its reads did not reach the daemon (FUSE passthrough or the kernel's page cache).\n", rd)
		default:
			d.pr("- loopback's reads went through its daemon (%.2f CPU-seconds per GiB read): no FUSE passthrough in effect (kernel CONFIG_FUSE_PASSTHROUGH=%s).\n", rd, orUnknown(m.FusePassthrough))
		}
	} else if m.FusePassthrough == "y" && d.has("loopback") {
		d.pr("- The kernel has FUSE passthrough (CONFIG_FUSE_PASSTHROUGH=y): go-fuse's loopback, run as root, hands each opened file to the kernel (FOPEN_PASSTHROUGH), and on this machine its reads then bypass its daemon (its writes did not), so loopback's read numbers are close to tmpfs and measure the kernel rather than a FUSE daemon. dnnfs serves every read and write in its daemon (FUSE direct I/O from the pool mapping).\n")
	}
	if d.has("loopback-plain") {
		d.pr("- **loopback, no passthrough** is the same go-fuse loopback with FUSE passthrough turned off (`tests/bench/loopplain`: its files answer no to go-fuse's passthrough question), so its reads and writes reach its daemon as dnnfs's do: the FUSE-daemon peer for the data path. It runs only the random 4 KiB writes, the 1 MiB writes and the cold 1 MiB reads.\n")
	}
	d.pr("- Every configuration runs on every system once per run; a run goes workload by workload, each system in turn (the order rotates from run to run). Values are the **median** over the runs; **±** is half the min–max range, relative to the median. **Ratios** are computed pair by pair within a run (dnnfs's value divided by the peer's value from the same run) and the median of those is shown.\n")
	d.pr("- fio: `ioengine=psync`, jobs are threads (`--thread`), `--invalidate=0`, `--group_reporting`; MiB/s = fio's `bw_bytes` / 2^20, summed over the jobs. Each configuration moves %s in all: with the **shared** layout the jobs split one file into contiguous segments (`--offset_increment`), the parameter-file pattern; with **perjob** each job has its own file of %s/jobs (the control; with 1 job the two layouts are the same, so it is not repeated).\n", sizeName(p.MatrixBytes), sizeName(p.MatrixBytes))
	d.pr("- The files are written first (not measured). **Writes** overwrite them in place (`--time_based --runtime=%s`). **Cold reads** are the first reads after a remount (FUSE systems: the kernel's page cache of the mount is gone, dnnfs rebuilds its index and maps the pool afresh; tmpfs has no colder state than its page cache, which is its storage) and stop after reading everything once or after %s. **Warm reads** follow, after a read of everything, `--time_based --runtime=%s`.\n", p.FioTime, p.ColdCap, p.FioTime)
	d.pr("- Personalities: fio job files in [tests/bench/fio/](../tests/bench/fio/) over a file set made beforehand; `openfiles=64` and `file_service_type=random`, so threads keep opening and closing files; `--runtime=%s` per point; IOPS = read + write IOPS.\n", p.PersTime)
	for _, ps := range p.Personalities {
		d.pr("  - **%s**: %s.\n", ps.Name, ps.Describe)
	}
	d.pr("- Checkpoint: %s written as `ckpt.tmp` in 1 MiB writes (1 thread: sequential `write`; 4 threads: `ftruncate` to the size, then each thread `pwrite`s its contiguous quarter), `fsync`, `rename` over `ckpt`, `fsync` of the directory; MiB/s over the whole sequence. An unmeasured first save makes every measured save replace an existing checkpoint. Load: read it all in 1 MiB reads (1 thread sequential, 4 threads a quarter each), cold (after a remount) then warm.\n", sizeName(p.CkptBytes))
	if b.machine.DiskFS != "" {
		d.pr("- The disk-pool workloads (section 4) also run on the **disk** systems: the file system of the disk holding `%s` (%s) natively, and dnnfs with its emulated pool in a file in that same directory (as `make run` keeps its pool); the other workloads do not run there. **Fresh writes**: a new file system each time (a new pool, an emptied directory); the file is truncated or fallocated to its size, then written in 1 MiB writes (`--fallocate=none --end_fsync=1`, `--fsync=64` for every 64 MiB). **Appends**: 4 B and 4 KiB writes extending a new file against overwrites of a written file, writes/s.\n", b.o.diskDir, b.machine.DiskFS)
	}
	d.pr("- Sizes of this mode: fio %s per configuration, blocks %s, layouts %s; personality threads %v; checkpoint %s with %v thread(s).\n\n",
		sizeName(p.MatrixBytes), blockList(p.Blocks), groupList(p.Groups), p.Threads, sizeName(p.CkptBytes), p.CkptThreads)
	d.pr("%s\n\n", fullNote2())
}

// plots embeds the headline plots and names the others.
func (d *mdDoc) plots(plots []string, plotNote string) {
	if len(plots) > 0 || plotNote != "" {
		d.pr("## Plots\n\n")
		if plotNote != "" {
			d.pr("%s\n\n", plotNote)
		}
		var others []string
		for _, f := range plots {
			if headlinePlots[f] {
				d.pr("![%s](bench/%s)\n\n", strings.TrimSuffix(f, ".png"), f)
			} else {
				others = append(others, "`"+f+"`")
			}
		}
		if len(others) > 0 {
			d.pr("The run's other plots are in `bench-out/` (not tracked): %s.\n\n", strings.Join(others, ", "))
		}
	}
}

// fioTables writes section 1, one table per fio operation.
func (d *mdDoc) fioTables() {
	b := d.b
	fioSections := []struct{ rw, temp, title string }{
		{"write", "", "Sequential write"}, {"randwrite", "", "Random write"},
		{"read", "cold", "Sequential read, cold"}, {"read", "warm", "Sequential read, warm"},
		{"randread", "cold", "Random read, cold"}, {"randread", "warm", "Random read, warm"},
	}
	wrote := false
	for _, sec := range fioSections {
		var rows []Config
		for _, c := range configs {
			if c.Phase == "fio" && c.RW == sec.rw && c.Temp == sec.temp {
				rows = append(rows, c)
			}
		}
		if len(rows) == 0 {
			continue
		}
		if !wrote {
			d.pr("## 1. fio matrix (MiB/s)\n\n")
			wrote = true
		}
		sort.SliceStable(rows, func(i, j int) bool {
			a, c := rows[i], rows[j]
			if a.Layout != c.Layout {
				return a.Layout > c.Layout // shared first
			}
			if a.Jobs != c.Jobs {
				return a.Jobs < c.Jobs
			}
			return a.BS < c.BS
		})
		d.pr("### %s\n\n", sec.title)
		b.table(&d.w, d.st, d.present, d.rcols, "layout, jobs, block", rows, func(c Config) string {
			return fmt.Sprintf("%s, %d, %s", c.Layout, c.Jobs, sizeName(c.BS))
		})
	}
}

// cpuTable writes the daemons' CPU time per GiB moved (section 1).
func (d *mdDoc) cpuTable() {
	if len(d.cpu) > 0 {
		d.pr("### Daemon CPU per GiB moved\n\n")
		d.pr("CPU time (user + system) of each FUSE daemon during the fio matrix and the writes into a new file (section 4), per GiB that fio read or wrote, summed over all configurations and runs: how much work each system does per byte in user space.\n\n")
		d.pr("| system | reads: CPU-s/GiB | writes: CPU-s/GiB | GiB read | GiB written |\n|---|---:|---:|---:|---:|\n")
		for _, sys := range systemOrder {
			if c, ok := d.cpu[sys]; ok {
				rd, wr := c.perGiB()
				d.pr("| %s | %.3f | %.3f | %.1f | %.1f |\n", systemTitle[sys], rd, wr, float64(c.rBytes)/float64(GiB), float64(c.wBytes)/float64(GiB))
			}
		}
		d.pr("\n")
	}
}

// phaseTables writes sections 2 and 3: personalities and checkpoints.
func (d *mdDoc) phaseTables() {
	b := d.b
	p := b.p
	var rows []Config
	for _, c := range configs {
		if c.Phase == "personality" {
			rows = append(rows, c)
		}
	}
	if len(rows) > 0 {
		d.pr("## 2. Filebench-like personalities (IOPS)\n\n")
		b.table(&d.w, d.st, d.present, d.rcols, "personality, threads", rows, func(c Config) string {
			return fmt.Sprintf("%s, %d", c.Pers, c.Threads)
		})
	}
	rows = nil
	for _, c := range configs {
		if c.Phase == "checkpoint" {
			rows = append(rows, c)
		}
	}
	if len(rows) > 0 {
		d.pr("## 3. Checkpoint save and load, %s (MiB/s)\n\n", sizeName(p.CkptBytes))
		b.table(&d.w, d.st, d.present, d.rcols, "operation, threads", rows, func(c Config) string {
			return fmt.Sprintf("%s, %d", c.Op, c.Threads)
		})
	}
}

// micro writes the Go micro-benchmarks' output.
func (d *mdDoc) micro() {
	b := d.b
	if b.micro != "" {
		d.pr("## Go micro-benchmarks\n\n")
		d.pr("One pass (`-count 1`, quick mode `-benchtime 200ms`) from this run, also in `bench-out/micro.txt` for benchstat. `pmem`: Persist of 64 B / 4 KiB / 1 MiB (msync of an emulated pool; `BenchmarkFlushCPU`: the cache-line flush loop); `lock`: range-lock Acquire+Release uncontended and contended; `journal`: one metadata transaction commit (`memory` = the protocol's CPU cost, `emulated` = with msync); `core`: the data path below FUSE on a memory pool.\n\n")
		d.pr("```\n%s```\n\n", b.micro)
	}
}

// profiles lists the CPU profiles (PROFILE=1).
func (d *mdDoc) profiles() {
	b := d.b
	if len(b.profiles) > 0 {
		d.pr("## CPU profiles (PROFILE=1)\n\n")
		d.pr("dnnfs --lock=range re-run under `--cpuprofile` on the configurations furthest behind tmpfs; `go tool pprof -top` of each:\n\n")
		for _, po := range b.profiles {
			if po.File != "" {
				d.pr("- %s (%.2f× tmpfs): `bench-out/%s`\n", po.Title, po.Ratio, po.File)
			} else {
				d.pr("- %s (%.2f× tmpfs): no profile: %s\n", po.Title, po.Ratio, oneLine(po.Err, 300))
			}
		}
		d.pr("\n")
	}
}

// failures lists the run's failures and the daemons' log lines.
func (d *mdDoc) failures(logs map[string][]string) {
	b := d.b
	d.pr("## Failures\n\n")
	if len(b.failures) == 0 {
		d.pr("None.\n\n")
	} else {
		d.pr("| system | what | command | error |\n|---|---|---|---|\n")
		for _, f := range b.failures {
			d.pr("| %s | %s | %s | %s |\n", f.System, mdEsc(f.What), codeCell(f.Cmd), mdEsc(oneLine(f.Err, 600)))
		}
		d.pr("\n")
	}
	var logNames []string
	for n := range logs {
		logNames = append(logNames, n)
	}
	sort.Strings(logNames)
	if len(logNames) > 0 {
		d.pr("Daemon log lines (dnnfs runs with `--log-level warn`, so these are warnings or errors; loopback with `-q`):\n\n")
		for _, n := range logNames {
			d.pr("- %s:\n", n)
			for _, l := range logs[n] {
				d.pr("  - `%s`\n", strings.ReplaceAll(l, "`", "'"))
			}
		}
		d.pr("\n")
	}
}

// commands writes the exact mount commands and one command of each kind.
func (d *mdDoc) commands(systems []*System) {
	b := d.b
	p := b.p
	d.pr("## Exact commands\n\n")
	d.pr("Mounts (the scratch directory is a fresh `mktemp -d /dev/shm/dnnfs-bench.XXXX`):\n\n```sh\n")
	d.pr("mount -t tmpfs -o size=%dm,mode=0755 dnnfs-bench $W/tmpfs\n", p.tmpfsSize()>>20)
	d.pr("mount -t tmpfs -o size=%dm,mode=0755,huge=%s dnnfs-bench-pools $W/pools   # the shm systems' pools\n", 2*p.tmpfsSize()>>20, b.o.poolHuge)
	for _, s := range systems {
		switch s.kind {
		case "loopback":
			if s.Name == "loopback-plain" {
				d.pr("bin/loopplain -q -directmount $W/mnt/loopback-plain $W/tmpfs/loopback-plain-src   # go build -o bin/loopplain ./tests/bench/loopplain\n")
				break
			}
			d.pr("bin/loopback -q -directmount $W/mnt/loopback $W/tmpfs/loopback-src   # go build -o bin/loopback github.com/hanwen/go-fuse/v2/example/loopback\n")
		case "dnnfs":
			pool := "$W/pools/pool-" + s.lock
			if s.Name == "dnnfs-disk" {
				d.pr("D=$(mktemp -d %s/dnnfs-bench.XXXX)   # the disk systems' directory; disk: $D/native\n", b.o.diskDir)
				pool = "$D/pool"
			}
			d.pr("bin/dnnfs mkfs --pool %s --size SIZE --force && bin/dnnfs mount --pool %s $W/mnt/%s --lock %s --log-level warn &\n", pool, pool, s.Name, s.lock)
		}
	}
	d.pr("# unmount: SIGTERM to the daemon (both unmount cleanly on it)\n```\n\n")
	d.pr("One command of each kind as run (dnnfs --lock=range; the others differ only in the directory). Every measurement's command is in results.json.\n\n```sh\n")
	shown := map[string]bool{}
	for _, mm := range b.meas {
		if mm.System != "dnnfs-range" && d.has("dnnfs-range") {
			continue
		}
		c := configs[configIdx[mm.ID]]
		kind := c.Phase + "/" + c.Layout + "/" + c.Temp + "/" + c.Pers + "/" + c.Op
		if c.Phase == "fio" {
			kind = c.Phase + "/" + c.Layout + "/" + c.Temp
		}
		if shown[kind] {
			continue
		}
		shown[kind] = true
		title := c.Title()
		if c.Phase == "fio" {
			title = fmt.Sprintf("%s %s, %d job(s)", c.Layout, c.RW, c.Jobs)
			if c.Temp != "" {
				title += ", " + c.Temp
			}
			if strings.Count(mm.Cmd, "--name=") > 1 {
				title += ": one section per block size, run one after another (--stonewall)"
			}
		}
		d.pr("# %s\n%s\n", title, mm.Cmd)
	}
	d.pr("```\n")
}

const fullNote = "about 40 minutes on an idle 2-core machine"

// fullNote2 says how full mode is sized, from its parameters.
func fullNote2() string {
	f := newParams(options{})
	all := []string{"fio", "personality", "checkpoint", "fresh", "append", "cluster"}
	return fmt.Sprintf("**Full mode** is sized for about 40 minutes on an idle 2-core, 24 GiB machine (the driver's own estimate: %s plus builds and micro-benchmarks): %d runs; "+
		"%s per fio configuration, in %s time-based runs (cold reads: up to %s), so the %d fio configurations × 3 (write, cold read, warm read) × 4 systems × %d runs stay near 20 minutes including a remount before every cold read; "+
		"personalities with %v threads for %s each; a %s checkpoint, which fits twice (old and new) in each system's memory; "+
		"the disk-pool writes into a new %s file and %s appends/overwrites on 6 systems (about 10 minutes); "+
		"the cluster phase (DESIGN.md §Cluster) loading a %s checkpoint (section 5; about 5 minutes a run). "+
		"Larger files would mostly measure the same memory bandwidth for longer; RUNS=N tightens the spread. Quick mode: 1 run, %s per fio configuration, blocks %s, layouts %s, %v threads, a %s checkpoint, a %s cluster checkpoint.",
		f.estimate(systemCount{mem: 4, disk: 2}, all).Round(time.Minute), f.Runs, sizeName(f.MatrixBytes), f.FioTime, f.ColdCap, len(f.Groups)*len(f.Blocks)*2, f.Runs,
		f.Threads, f.PersTime, sizeName(f.CkptBytes), sizeName(f.FreshBytes), f.AppendTime, sizeName(f.ClusterBytes),
		sizeName(newParams(options{quick: true}).MatrixBytes), blockList(newParams(options{quick: true}).Blocks),
		groupList(newParams(options{quick: true}).Groups), newParams(options{quick: true}).Threads, sizeName(newParams(options{quick: true}).CkptBytes),
		sizeName(newParams(options{quick: true}).ClusterBytes))
}

func (b *Bench) table(w *strings.Builder, st *stats, present []string, rcols [][2]string, head string, rows []Config, label func(Config) string) {
	fmt.Fprintf(w, "| %s |", head)
	for _, s := range present {
		fmt.Fprintf(w, " %s |", systemTitle[s])
	}
	for _, rc := range rcols {
		fmt.Fprintf(w, " %s / %s |", shortTitle(rc[0]), shortTitle(rc[1]))
	}
	w.WriteString("\n|---|")
	for range present {
		w.WriteString("---:|")
	}
	for range rcols {
		w.WriteString("---:|")
	}
	w.WriteString("\n")
	for _, c := range rows {
		fmt.Fprintf(w, "| %s |", label(c))
		for _, s := range present {
			fmt.Fprintf(w, " %s |", cell(st.sum[c.ID][s]))
		}
		for _, rc := range rcols {
			fmt.Fprintf(w, " %s |", ratioCell(st.ratio(c.ID, rc[0], rc[1])))
		}
		w.WriteString("\n")
	}
	w.WriteString("\n")
}

func shortTitle(s string) string {
	switch s {
	case "dnnfs-range":
		return "range"
	case "dnnfs-file":
		return "file"
	}
	return s
}

func blockList(bs []int64) string {
	var s []string
	for _, b := range bs {
		s = append(s, sizeName(b))
	}
	return strings.Join(s, ", ")
}

func groupList(gs []group) string {
	var s []string
	for _, g := range gs {
		s = append(s, fmt.Sprintf("%s×%d", g.Layout, g.Jobs))
	}
	return strings.Join(s, ", ")
}

func mdEsc(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}

func codeCell(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.NewReplacer("|", `\|`, "`", "'").Replace(oneLine(s, 400)) + "`"
}

// reportOnly regenerates the report from a results.json (e.g. after a change
// of the report's layout), measuring nothing.
func reportOnly(o options) error {
	js, err := os.ReadFile(o.reportOf)
	if err != nil {
		return err
	}
	var res resultsFile
	if err := json.Unmarshal(js, &res); err != nil {
		return fmt.Errorf("%s: %w", o.reportOf, err)
	}
	repo := o.repo
	if repo == "" {
		if repo, err = findRepo(); err != nil {
			return err
		}
	}
	out, raw := outDirs(o, repo)
	p := res.Params
	p.fioTime, _ = time.ParseDuration(p.FioTime)
	p.coldCap, _ = time.ParseDuration(p.ColdCap)
	p.persTime, _ = time.ParseDuration(p.PersTime)
	p.appendTime, _ = time.ParseDuration(p.AppendTime)
	b := &Bench{o: o, p: p, repo: repo, out: out, raw: raw, started: time.Now(), machine: res.Machine, meas: res.Measurements,
		failures: res.Failures, profiles: res.Profiles, micro: res.Micro, cluster: res.Cluster, clusterPaced: res.ClusterPaced,
		elapsed: time.Duration(res.Elapsed * float64(time.Second)), active: map[*System]bool{}}
	for _, c := range res.Configs {
		registerConfig(c)
	}
	var systems []*System
	for _, si := range res.Systems {
		s := newSystem(b, si.Name)
		s.Desc, s.mountCmd = si.Desc, si.Mount
		systems = append(systems, s)
	}
	return b.report(res.DaemonLogs, systems)
}

type cpuUse struct {
	rCPU, wCPU     float64
	rBytes, wBytes int64
}

func (c cpuUse) perGiB() (rd, wr float64) {
	if c.rBytes > 0 {
		rd = c.rCPU / (float64(c.rBytes) / float64(GiB))
	}
	if c.wBytes > 0 {
		wr = c.wCPU / (float64(c.wBytes) / float64(GiB))
	}
	return
}

// daemonCPU sums the daemons' CPU time and the bytes moved over the fio
// matrix, per system (FUSE systems only).
func daemonCPU(meas []Measurement) map[string]cpuUse {
	out := map[string]cpuUse{}
	for _, m := range meas {
		if m.Err != "" || m.DaemonCPU < 0 || m.Bytes <= 0 || !strings.HasPrefix(m.ID, "fio/") && !strings.HasPrefix(m.ID, "fresh/") {
			continue
		}
		if m.DaemonCPU == 0 && m.System == "tmpfs" {
			continue
		}
		c := out[m.System]
		if strings.Contains(m.ID, "write") || strings.HasPrefix(m.ID, "fresh/") {
			c.wCPU += m.DaemonCPU
			c.wBytes += m.Bytes
		} else {
			c.rCPU += m.DaemonCPU
			c.rBytes += m.Bytes
		}
		out[m.System] = c
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
