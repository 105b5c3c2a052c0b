// Command bench is `make bench`: it measures dnnfs against its peers in one
// run and regenerates the report, docs/BENCHMARKS.md, with its headline
// plots in docs/bench/ (tracked), and the raw results (results.json, every
// plot, micro.txt, CPU profiles) in bench-out/ (ignored: they change on
// every run).
//
// Peers, all on this machine in the same run: native tmpfs (a tmpfs mount of
// our own), go-fuse's loopback example over that tmpfs, dnnfs --lock=range
// (the default) and dnnfs --lock=file. Pools and tmpfs live in /dev/shm.
// For the disk-pool goals two more: the file system of a disk (a directory
// under --disk-dir, /var/tmp by default) and dnnfs with its pool in a file
// there; they run only the fresh-write and append workloads.
//
// Workloads:
//  1. fio matrix (the paper's, scaled): sequential/random read/write, 1, 2
//     and 4 jobs, 4 KiB..1 MiB blocks, one shared file with a contiguous
//     segment per job, plus one file per job as the control. Reads are
//     measured cold (first read after a remount) and warm.
//  2. Filebench-like personalities as fio job files (tests/bench/fio/).
//  3. Checkpoint save (write tmp, fsync, rename, fsync dir) and load.
//  4. Fresh writes (into a truncated or fallocated file, fsync at the end or
//     every 64 MiB) and appends vs overwrites of 4 B and 4 KiB (goals.go).
//  5. The cluster (DESIGN.md §Cluster) (cluster.go): a checkpoint written on one dnnfs
//     node, loaded by 1, 2 and 4 others (etcd and versitygw started here),
//     against rclone reading the same objects from S3. It runs once per
//     run, whatever -systems says.
//
// It sets everything up itself (fio and matplotlib through apt-get when
// missing, the binaries, the mounts) and unmounts everything on exit and on
// Ctrl-C. Modes and knobs (flags, or the environment as `make bench` passes
// it): QUICK=1 / --quick, RUNS=N / --runs, PROFILE=1 / --profile,
// DISKDIR=DIR / --disk-dir, CLUSTER_POOLS / --cluster-pools,
// CLUSTER_S3_MIBPS / --cluster-s3-mibps.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	quick     bool
	runs      int
	profile   bool
	repo      string // repository root
	out       string // docs directory
	raw       string // raw results directory (bench-out)
	work      string // parent of the scratch directory (tmpfs)
	diskDir   string // parent of the disk systems' scratch directory
	poolHuge  string // huge= of the tmpfs holding the shm systems' pools
	systems   string // comma list, for debugging
	phases    string // comma list: fio,personality,checkpoint
	noInstall bool
	dryRun    bool
	reportOf  string // regenerate the report from this results.json
	// clusterPools: where the cluster phase's reader pools go: shm, disk
	// (under diskDir) or auto (shm when 4 of them fit in MemAvailable).
	clusterPools string
	// clusterS3MiBps: when not 0, the cluster phase's first run also reads
	// through a proxy pacing all S3 replies together to this rate (a
	// remote store).
	clusterS3MiBps float64
}

func envBool(name string) bool {
	v := strings.TrimSpace(os.Getenv(name))
	return v != "" && v != "0" && !strings.EqualFold(v, "false") && !strings.EqualFold(v, "no")
}

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// envFloatOr is $name as a number, or def when it is unset or empty.
func envFloatOr(name string, def float64) float64 {
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return def
	}
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

func main() {
	var o options
	flag.BoolVar(&o.quick, "quick", envBool("QUICK"), "quick mode: small sizes, a subset of the matrix, 1 run (env QUICK=1)")
	flag.IntVar(&o.runs, "runs", 0, "runs of every configuration (env RUNS; default 3, quick 1)")
	flag.BoolVar(&o.profile, "profile", envBool("PROFILE"), "CPU-profile dnnfs on the 3 configurations furthest behind tmpfs (env PROFILE=1)")
	flag.StringVar(&o.repo, "repo", "", "repository root (default: found from the working directory)")
	flag.StringVar(&o.out, "out", "", "output docs directory (default REPO/docs)")
	flag.StringVar(&o.raw, "raw", "", "raw results directory: results.json, every plot, micro.txt, profiles (default REPO/bench-out, not tracked)")
	flag.StringVar(&o.work, "work", "/dev/shm", "where the scratch directory (pools, tmpfs, mountpoints) goes")
	flag.StringVar(&o.diskDir, "disk-dir", envOr("DISKDIR", "/var/tmp"), "a directory on a disk file system for the disk systems (env DISKDIR)")
	flag.StringVar(&o.poolHuge, "pool-huge", envOr("POOL_HUGE", "never"), "huge= option of the tmpfs that holds the shm pools: never, as /dev/shm has it, or within_size (README, \"Where to keep a pool\") (env POOL_HUGE)")
	flag.StringVar(&o.systems, "systems", "tmpfs,loopback,loopback-plain,dnnfs-range,dnnfs-file,disk,dnnfs-disk", "systems to measure (debugging)")
	flag.StringVar(&o.phases, "phases", "fio,personality,checkpoint,fresh,append,cluster,micro", "workloads to run (debugging): fio, personality, checkpoint, fresh, append, cluster (DESIGN.md §Cluster: etcd, versitygw and 5 dnnfs nodes, against rclone), micro (go test -bench)")
	flag.Float64Var(&o.clusterS3MiBps, "cluster-s3-mibps", envFloatOr("CLUSTER_S3_MIBPS", 200), "cluster phase: after the rounds with S3 read directly (at memory speed on this machine), run them once more, in the first run, with S3 behind a proxy that paces all its replies together to this many MiB/s, as a store across a network (env CLUSTER_S3_MIBPS; 0: no paced rounds)")
	flag.StringVar(&o.clusterPools, "cluster-pools", envOr("CLUSTER_POOLS", "auto"), "where the cluster phase's reader pools go: shm, disk (under -disk-dir) or auto (shm when four fit in the available memory) (env CLUSTER_POOLS)")
	flag.BoolVar(&o.noInstall, "no-install", false, "do not apt-get install missing tools")
	flag.StringVar(&o.reportOf, "report-only", "", "regenerate docs/BENCHMARKS.md and the plots from this results.json, measuring nothing")
	flag.BoolVar(&o.dryRun, "n", false, "print the plan (sizes, number of measurements, estimated time) and exit")
	flag.Parse()
	if o.runs == 0 {
		if v := strings.TrimSpace(os.Getenv("RUNS")); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "bench: RUNS=%q: want a positive number\n", v)
				os.Exit(2)
			}
			o.runs = n
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/dnnfs/dnnfs") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("run from inside the dnnfs repository (no go.mod of github.com/dnnfs/dnnfs above %s)", dir)
		}
	}
}

// Bench is one benchmark run: its parameters, scratch space, systems and
// the measurements so far.
type Bench struct {
	o         options
	p         params
	repo      string
	out       string // docs directory: the report and its headline plots
	raw       string // raw results: results.json, every plot, micro.txt, profiles
	w         string // scratch directory
	tmpfs     string // our tmpfs mount: native/ and loopback source live here
	poolfs    string // our tmpfs mount for the shm systems' pools (huge=o.poolHuge)
	diskW     string // scratch directory on the disk (disk systems), or ""
	binDir    string
	dnnfs     string // daemon binary
	loop      string // loopback binary
	loopPlain string // loopplain binary (loopback without passthrough)
	logs      string
	started   time.Time
	machine   machineInfo

	mu       sync.Mutex
	meas     []Measurement
	failures []Failure
	active   map[*System]bool
	mounted  []string // our own non-FUSE mounts (the tmpfs)

	cenv    *clusterEnv     // the cluster phase's etcd and S3 server, once started
	cluster *clusterResults // the cluster phase's results
	// clusterPaced: the cluster phase's rounds again, in the first run,
	// with S3 behind the pacing proxy (-cluster-s3-mibps); nil without.
	clusterPaced *clusterResults

	profileFor map[string]string // config id -> cpuprofile path, while profiling
	profiling  bool
	profiles   []profileOut
	micro      string // go test -bench output
	elapsed    time.Duration
}

func run(o options) error {
	if o.dryRun {
		p := newParams(o)
		phases := strings.Split(o.phases, ",")
		n := countSystems(strings.Split(o.systems, ","))
		js, _ := json.MarshalIndent(p, "", "  ")
		fmt.Printf("%s\n%d measurements, about %s on an idle 2-core machine (plus builds and micro-benchmarks)\n",
			js, p.count(n, phases), p.estimate(n, phases).Round(time.Second))
		return nil
	}
	if o.reportOf != "" {
		return reportOnly(o)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (mount -t tmpfs, FUSE mounts without fusermount); run as root")
	}
	repo := o.repo
	if repo == "" {
		var err error
		if repo, err = findRepo(); err != nil {
			return err
		}
	}
	out, raw := outDirs(o, repo)
	b := &Bench{o: o, p: newParams(o), repo: repo, out: out, raw: raw, started: time.Now(), active: map[*System]bool{}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "\nbench: %v: stopping, unmounting everything\n", sig)
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "bench: second signal: cleaning up now and exiting")
		b.cleanup()
		os.Exit(130)
	}()

	if err := b.setup(ctx); err != nil {
		b.cleanup()
		return err
	}
	systems := b.systems()
	err := b.runAll(ctx, systems)
	b.machine.LoadEnd = loadavg()
	b.elapsed = time.Since(b.started)
	logs := b.collectLogs()
	b.cleanup()
	if ctx.Err() != nil {
		return errors.New("interrupted; nothing written to docs/")
	}
	if err != nil {
		return err
	}
	return b.report(logs, systems)
}

// setup installs what is missing, builds the binaries and mounts the tmpfs.
func (b *Bench) setup(ctx context.Context) error {
	b.logf("mode %s: %d run(s) of every configuration; scratch in %s", b.p.Mode, b.p.Runs, b.o.work)
	if err := b.install(ctx); err != nil {
		return err
	}
	w, err := os.MkdirTemp(b.o.work, "dnnfs-bench.")
	if err != nil {
		return err
	}
	b.w = w
	b.binDir = filepath.Join(w, "bin")
	b.logs = filepath.Join(w, "logs")
	b.tmpfs = filepath.Join(w, "tmpfs")
	b.poolfs = filepath.Join(w, "pools")
	for _, d := range []string{b.binDir, b.logs, b.tmpfs, b.poolfs, filepath.Join(w, "mnt")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	b.dnnfs = filepath.Join(b.binDir, "dnnfs")
	b.loop = filepath.Join(b.binDir, "loopback")
	b.loopPlain = filepath.Join(b.binDir, "loopplain")
	b.logf("building %s and the go-fuse loopback example", "cmd/dnnfs")
	if err := b.cmd(ctx, "go", "build", "-o", b.dnnfs, "./cmd/dnnfs"); err != nil {
		return fmt.Errorf("building dnnfs: %w", err)
	}
	if err := b.cmd(ctx, "go", "build", "-o", b.loop, "github.com/hanwen/go-fuse/v2/example/loopback"); err != nil {
		return fmt.Errorf("building the go-fuse loopback example: %w", err)
	}
	if err := b.cmd(ctx, "go", "build", "-o", b.loopPlain, "./tests/bench/loopplain"); err != nil {
		return fmt.Errorf("building loopplain: %w", err)
	}
	size := b.p.tmpfsSize()
	if err := b.cmd(ctx, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0755", size>>20), "dnnfs-bench", b.tmpfs); err != nil {
		return fmt.Errorf("mounting the tmpfs peer: %w", err)
	}
	b.mu.Lock()
	b.mounted = append(b.mounted, b.tmpfs)
	b.mu.Unlock()
	// The pools of the shm systems get a tmpfs of their own, so that
	// -pool-huge can give them 2 MiB pages (DESIGN.md §Where a pool
	// lives); the size is only a limit: room for both lock modes' pools.
	if err := b.cmd(ctx, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0755,huge=%s", 2*size>>20, b.o.poolHuge), "dnnfs-bench-pools", b.poolfs); err != nil {
		return fmt.Errorf("mounting the tmpfs for the pools: %w", err)
	}
	b.mu.Lock()
	b.mounted = append(b.mounted, b.poolfs)
	b.mu.Unlock()
	if strings.Contains(","+b.o.systems+",", ",disk,") || strings.Contains(","+b.o.systems+",", ",dnnfs-disk,") {
		d, err := os.MkdirTemp(b.o.diskDir, "dnnfs-bench.")
		if err != nil {
			return fmt.Errorf("scratch directory for the disk systems: %w", err)
		}
		b.diskW = d
	}
	b.machine = probeMachine(ctx, b)
	return nil
}

// install makes fio present (required) and matplotlib (optional: plots).
func (b *Bench) install(ctx context.Context) error {
	var want []string
	if _, err := exec.LookPath("fio"); err != nil {
		want = append(want, "fio")
	}
	if exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
		want = append(want, "python3-matplotlib")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		want = append(want, "fuse3")
	}
	if _, err := exec.LookPath("rclone"); err != nil && hasPhase(b.o.phases, "cluster") {
		want = append(want, "rclone") // the cluster phase's S3-only peer
	}
	if len(want) == 0 {
		return nil
	}
	if b.o.noInstall {
		b.logf("not installing %v (--no-install)", want)
	} else {
		b.logf("installing %v with apt-get", want)
		env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		up := exec.CommandContext(ctx, "apt-get", "update", "-qq")
		up.Env = env
		if out, err := up.CombinedOutput(); err != nil {
			b.logf("apt-get update failed: %v\n%s", err, tail(string(out), 800))
		}
		for _, pkg := range want {
			in := exec.CommandContext(ctx, "apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
			in.Env = env
			if out, err := in.CombinedOutput(); err != nil {
				b.logf("apt-get install %s failed: %v\n%s", pkg, err, tail(string(out), 800))
			}
		}
	}
	if _, err := exec.LookPath("fio"); err != nil {
		return errors.New("fio is missing and could not be installed (apt-get install fio)")
	}
	return nil
}

// cmd runs a setup command in the repository, failing with its output.
func (b *Bench) cmd(ctx context.Context, name string, args ...string) error {
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = b.repo
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", shellJoin(append([]string{name}, args...)), err, tail(string(out), 2000))
	}
	return nil
}

func (b *Bench) logf(format string, args ...any) {
	el := time.Since(b.started).Round(time.Second)
	fmt.Fprintf(os.Stderr, "[%6s] %s\n", el, fmt.Sprintf(format, args...))
}

// runAll runs every phase RUNS times; within a run every system runs the
// phase in turn (the order rotates between runs), so ratios can be taken
// pair by pair within one run.
func (b *Bench) runAll(ctx context.Context, systems []*System) error {
	var phases []string
	micro := false
	for _, ph := range strings.Split(b.o.phases, ",") {
		switch ph = strings.TrimSpace(ph); ph {
		case "":
		case "micro":
			micro = true
		default:
			phases = append(phases, ph)
		}
	}
	var names []string
	for _, s := range systems {
		names = append(names, s.Name)
	}
	sc := countSystems(names)
	b.logf("about %d measurements; estimated %s on an idle 2-core machine", b.p.count(sc, phases), b.p.estimate(sc, phases).Round(time.Minute))
	for run := 0; run < b.p.Runs; run++ {
		for _, ph := range phases {
			if ph == "cluster" {
				// Its own nodes and peer (rclone), once per run.
				b.logf("run %d/%d: cluster", run+1, b.p.Runs)
				if err := b.runCluster(ctx, run); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					b.fail("dnnfs-cluster", "cluster", "", err)
				}
				continue
			}
			for i := range systems {
				s := systems[(i+run)%len(systems)]
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if s.onDisk() && ph != "fresh" && ph != "append" {
					continue // the disk systems are there for the disk-pool workloads only
				}
				if s.Name == "loopback-plain" && ph != "fio" {
					continue // a FUSE data-path peer: plainConfigs only
				}
				b.logf("run %d/%d: %s on %s", run+1, b.p.Runs, ph, s.Name)
				var err error
				switch ph {
				case "fio":
					var only map[string]bool
					if s.Name == "loopback-plain" {
						only = plainConfigs()
					}
					err = b.runMatrix(ctx, s, run, only)
				case "personality":
					err = b.runPersonalities(ctx, s, run, nil)
				case "checkpoint":
					err = b.runCheckpoint(ctx, s, run, nil)
				case "fresh":
					err = b.runFresh(ctx, s, run, nil)
				case "append":
					err = b.runAppend(ctx, s, run, nil)
				default:
					return fmt.Errorf("unknown phase %q (want fio, personality, checkpoint, fresh, append, cluster, micro)", ph)
				}
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					b.fail(s.Name, ph, "", err)
				}
			}
		}
	}
	if b.o.profile {
		if err := b.runProfiles(ctx, systems); err != nil && ctx.Err() == nil {
			b.fail("dnnfs-range", "profile", "", err)
		}
	}
	if micro && ctx.Err() == nil {
		b.runMicro(ctx)
	}
	return ctx.Err()
}

// hasPhase reports whether the comma list phases names ph.
func hasPhase(phases, ph string) bool {
	for _, p := range strings.Split(phases, ",") {
		if strings.TrimSpace(p) == ph {
			return true
		}
	}
	return false
}

// countSystems sorts system names into the in-memory and the disk ones.
func countSystems(names []string) systemCount {
	var sc systemCount
	for _, n := range names {
		switch n = strings.TrimSpace(n); n {
		case "":
		case "disk", "dnnfs-disk":
			sc.disk++
		case "loopback-plain":
			sc.plain++
		default:
			sc.mem++
		}
	}
	return sc
}

func (b *Bench) systems() []*System {
	var out []*System
	for _, n := range strings.Split(b.o.systems, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		out = append(out, newSystem(b, n))
	}
	return out
}

// cleanup unmounts everything this run mounted and removes the scratch
// directory. It is safe to call more than once.
func (b *Bench) cleanup() {
	b.mu.Lock()
	var act []*System
	for s := range b.active {
		act = append(act, s)
	}
	mounted := b.mounted
	b.mounted = nil
	b.mu.Unlock()
	for _, s := range act {
		if err := s.unmount(); err != nil {
			b.logf("cleanup: %s: %v", s.Name, err)
		}
		b.mu.Lock()
		delete(b.active, s)
		b.mu.Unlock()
	}
	b.mu.Lock()
	cenv := b.cenv
	b.cenv = nil
	b.mu.Unlock()
	cenv.stop() // after the nodes: they leave etcd on unmount
	for _, m := range mounted {
		for i := 0; i < 50; i++ {
			if exec.Command("umount", m).Run() == nil || !isMounted(m) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if isMounted(m) {
			exec.Command("umount", "-l", m).Run()
		}
	}
	if b.w != "" && strings.HasPrefix(b.w, b.o.work) {
		// Keep the daemon logs for the report (copied before), then remove.
		if !anyMountUnder(b.w) {
			os.RemoveAll(b.w)
		} else {
			b.logf("cleanup: something is still mounted under %s; leaving it", b.w)
		}
	}
	if b.diskW != "" && strings.HasPrefix(b.diskW, b.o.diskDir) && !anyMountUnder(b.diskW) {
		os.RemoveAll(b.diskW)
	}
}

// NumCPU for the machine line.
var numCPU = runtime.NumCPU()

// outDirs returns the report's directory (REPO/docs unless -out) and the raw
// results' (REPO/bench-out unless -raw).
func outDirs(o options, repo string) (out, raw string) {
	out, raw = o.out, o.raw
	if out == "" {
		out = filepath.Join(repo, "docs")
	}
	if raw == "" {
		raw = filepath.Join(repo, "bench-out")
	}
	return out, raw
}
