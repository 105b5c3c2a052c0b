package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	dfs "github.com/dnnfs/dnnfs/fs"
	"github.com/dnnfs/dnnfs/internal/metrics"
	"github.com/dnnfs/dnnfs/pmem"
)

func newLogger(level, format, file string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", level)}
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	switch format {
	case "console":
		cfg.Encoding = "console"
	case "json":
	default:
		return nil, usageError{fmt.Sprintf("--log-format %q: want console or json", format)}
	}
	cfg.OutputPaths = []string{"stderr"}
	if file != "" {
		abs, err := filepath.Abs(file)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--log-file %q: %v", file, err)}
		}
		cfg.OutputPaths = []string{abs}
	}
	return cfg.Build()
}

// runMount is `dnnfs mount`: it checks the command line (a bad one fails
// before any daemon starts), then either starts the daemon and waits for
// the mount to be live (mountInBackground) or is the daemon (run).
func runMount(args []string) error {
	o := &mountOptions{}
	fl := newFlags("mount")
	o.AddFlags(fl)
	if err := parse(fl, args); err != nil {
		return err
	}
	readyPipe := takeReadyPipe() // set in a backgrounded mount's daemon
	mo, err := applyMountOptions(fl, o.options)
	if err != nil {
		return err
	}
	if mo.remount && fl.NArg() > 0 {
		return remount(fl.Arg(fl.NArg()-1), mo)
	}
	if o.mountpoint, err = mountOperands(fl, &o.pool); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	log, err := newLogger(o.logLevel, o.logFormat, o.logFile)
	if err != nil {
		return err
	}
	defer log.Sync()
	if err := o.checkMountpoint(); err != nil {
		return err
	}
	if err := o.cluster.check(o.readOnly); err != nil {
		return err
	}
	if !o.foreground && readyPipe == nil {
		return mountInBackground(args)
	}
	return o.run(log, readyPipe)
}

// mountRun is the daemon's state while it mounts and serves: each step of
// run fills in a field, and a step that fails closes what the steps
// before it opened but the medium, the cluster and the metrics (run's
// defers).
type mountRun struct {
	o      *mountOptions
	log    *zap.Logger
	cl     *cluster.Node   // nil: not a cluster node
	mx     *metrics.Server // nil: metrics off
	m      pmem.Medium
	p      *core.FS
	tier   *embedding.Tier // nil: no --ssd
	server *fuse.Server
	sigs   chan os.Signal
}

// run is the daemon: it opens everything, mounts, serves until unmounted
// and closes the pool cleanly. ready is the backgrounding parent's pipe
// (nil in the foreground).
func (o *mountOptions) run(log *zap.Logger, ready *os.File) error {
	// The cluster (--etcd) is joined before the pool is opened: a bad
	// configuration is a one-line error and the pool stays as it was.
	cl, err := o.cluster.dial(log)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The daemon (not the parent that waits for it) binds the metrics port.
	var mx *metrics.Server
	if o.metricsListen != "" {
		if mx, err = metrics.Listen(o.metricsListen, log); err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", o.metricsListen, err)
		}
		defer mx.Close()
	}
	if err := embedding.CheckDevices(o.tier.Devices); err != nil {
		return fmt.Errorf("--ssd: %w", err)
	}
	if o.readOnly && len(o.tier.Devices) > 0 {
		return usageError{"--read-only: not with --ssd yet (the SSD tier writes its devices' labels and registry when it opens)"}
	}
	r := &mountRun{o: o, log: log, cl: cl, mx: mx}
	if err := r.openMedium(); err != nil {
		return err
	}
	defer r.m.Close()
	fields, err := r.openPool()
	if err != nil {
		return err
	}
	if err := r.start(); err != nil {
		return err
	}
	r.reportKernelLimits()
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			log.Warn("no CPU profile: the mount goes on without one", zap.String("cpuprofile", o.cpuProfile), zap.Error(err))
		} else {
			defer stop()
		}
	}
	announceReady(ready, o.logFile, log)
	log.Info("mounted", fields...)
	mx.Serve(metrics.Sources{Pool: r.p, Tier: r.tier, Cluster: cl})
	go r.unmountOnSignal()
	r.server.Wait()
	return r.shutdown()
}

// openMedium opens the pool's file or device. A mount that fails leaves
// the pool as it was (unless it needed recovery, which core.Open
// persists): nothing is written until the FUSE mount exists, and then the
// pool is stamped mounted and new SSD directories are registered before
// the first request is served.
func (r *mountRun) openMedium() error {
	open := pmem.Open
	if r.o.readOnly {
		// Copy-on-write: recovery (journal replay, orphans, sessions)
		// and anything else core stores stay in this process.
		open = pmem.OpenPrivate
		r.o.core.Atime = core.AtimeNever
	}
	m, err := open(r.o.pool)
	if err != nil {
		return openPoolError(r.o.pool, err)
	}
	if w := spaceWarning(r.o.pool); w != "" {
		r.log.Warn(w)
	}
	r.m = m
	return nil
}

// openPool opens the pool on the medium (recovering it if it needs it),
// logs what recovery did, and returns the fields of the "mounted" line.
func (r *mountRun) openPool() ([]zap.Field, error) {
	o, log, m := r.o, r.log, r.m
	start := time.Now()
	co := o.core
	co.Log, co.DeferStamp = log, true
	p, rep, err := core.Open(m, co)
	if err != nil {
		return nil, poolError(o.pool, err)
	}
	r.p = p
	fields := []zap.Field{zap.String("pool", o.pool), zap.String("medium", m.Kind().String()),
		zap.String("mountpoint", o.mountpoint), zap.Bool("read_only", o.readOnly), zap.String("lock", co.LockMode.String()), zap.String("atime", co.Atime.String()), zap.Int("inodes", rep.Inodes),
		zap.Uint64("used_blocks", rep.UsedBlocks), zap.Uint64("free_blocks", rep.FreeBlocks),
		zap.Uint64("warm_cap_bytes", p.Warm().Cap), zap.Duration("load_time", time.Since(start))}
	if m.Kind() != pmem.Emulated {
		fields = append(fields, zap.String("flush", pmem.FlushInstruction()))
	}
	if rep.ReplicaUsed {
		log.Warn("primary superblock was bad; mounted from the replica and rewrote the primary",
			zap.String("pool", o.pool), zap.NamedError("primary_error", rep.PrimarySBError))
	}
	if !rep.WasClean {
		log.Warn("pool was not unmounted cleanly; recovered",
			zap.String("pool", o.pool), zap.Int("journal_records_replayed", rep.ReplayedRecs),
			zap.Int("orphans_freed", rep.OrphansFreed), zap.Int("sessions_resumable", rep.SessionsOpen),
			zap.Int("sessions_closed", rep.SessionsClosed))
	}
	return fields, nil
}

// start brings up the SSD tier, the cluster node and the FUSE mount, and
// stamps the pool mounted. On failure the pool is closed.
func (r *mountRun) start() error {
	if err := r.prepareTier(); err != nil {
		r.p.Close()
		return err
	}
	if err := r.cl.Start(r.p); err != nil {
		r.closeTier()
		r.p.Close()
		return fmt.Errorf("cluster: %w", err)
	}
	return r.mount()
}

// prepareTier opens the SSD tier (DESIGN §Embedding tier) when --ssd is
// given; it starts serving in mount, once the pool is stamped.
func (r *mountRun) prepareTier() error {
	if len(r.o.tier.Devices) == 0 {
		if ts := r.p.Tables(); len(ts) > 0 {
			r.log.Warn("the pool has embedding tables but no --ssd was given: their reads and writes fail until you remount with --ssd",
				zap.Int("tables", len(ts)))
		}
		return nil
	}
	// Goroutines blocked in /dev/fuse reads and backing-file preads
	// hold their P until the runtime's monitor hands it off (up to
	// 10 ms later); with as few Ps as cores the SSD loaders then wait
	// behind them. More Ps than cores keeps them running (measured:
	// small-request p99 under load 4x lower on 2 cores).
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < 8 {
		runtime.GOMAXPROCS(8)
	}
	opts := r.o.tier
	opts.Log = r.log
	tier, err := embedding.Prepare(r.p, opts)
	if err != nil {
		return err
	}
	r.tier = tier
	return nil
}

func (r *mountRun) closeTier() {
	if r.tier != nil {
		if err := r.tier.Close(); err != nil {
			r.log.Error("closing the SSD tier", zap.Error(err))
		}
	}
}

// mount makes the FUSE mount and starts serving it: the pool is stamped
// mounted and the tier started before the first request is served. On
// failure it unmounts and closes the tier and the pool.
func (r *mountRun) mount() error {
	o, p, log := r.o, r.p, r.log
	root := dfs.Root(p, dfs.Options{Log: log, ReadCache: o.readCache, PageCache: o.pageCache, Tier: r.tier, Cluster: r.cl})
	opts := r.fuseOptions()
	// Signals are caught before the mount appears: a SIGTERM in between
	// would otherwise kill the daemon and leave a dead mount behind.
	r.sigs = make(chan os.Signal, 2)
	signal.Notify(r.sigs, syscall.SIGINT, syscall.SIGTERM)
	// Mounted, but nothing is served before Serve: the kernel queues
	// requests until then.
	server, err := newServer(r.mx.FUSE(dfs.NewRawFS(root, p, opts, log)), o.mountpoint, &opts.MountOptions)
	if err != nil {
		r.closeTier()
		p.Close()
		return fmt.Errorf("mount %s on %s: %w", o.pool, o.mountpoint, err)
	}
	r.server = server
	var startErr error
	if !o.readOnly {
		startErr = p.Stamp()
	}
	if startErr == nil && r.tier != nil {
		startErr = r.tier.Start()
	}
	go server.Serve()
	if startErr == nil {
		startErr = server.WaitMount()
	}
	if startErr == nil && r.cl != nil {
		r.cl.SetNotifier(notifier{server})
	}
	if startErr != nil {
		// Unmount before anything uses the half-started tier.
		if err := server.Unmount(); err != nil {
			log.Error("unmounting after a failed start", zap.String("mountpoint", o.mountpoint), zap.Error(err))
		}
		r.closeTier()
		p.Close()
		return fmt.Errorf("mount %s on %s: %w", o.pool, o.mountpoint, startErr)
	}
	return nil
}

// fuseOptions are go-fuse's options for this mount: the kernel's view of
// atime, read-only and device nodes.
func (r *mountRun) fuseOptions() *gofs.Options {
	o := r.o
	opts := dfs.MountOptions(o.pool, o.allowOther, r.log)
	// The atime mode shows in mountinfo like a local file system's (the
	// kernel itself updates no atime on FUSE: the pool applies the rule).
	switch o.core.Atime {
	case core.AtimeNever:
		opts.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOATIME
	case core.AtimeStrict:
		opts.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_STRICTATIME
	}
	if os.Geteuid() != 0 {
		opts.DirectMount = false // through fusermount3
		if o.readOnly {
			opts.Options = append(opts.Options, "ro")
		}
		return opts
	}
	opts.Options = append(opts.Options, deviceOptions(o.nodev, o.nosuid)...)
	if o.readOnly {
		// The kernel refuses every change with EROFS, as on any
		// read-only mount.
		if opts.DirectMountFlags == 0 {
			opts.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV
		}
		opts.DirectMountFlags |= syscall.MS_RDONLY
	}
	return opts
}

// reportKernelLimits logs the kernel settings that make FUSE requests
// smaller than they could be (README, Tuning).
func (r *mountRun) reportKernelLimits() {
	log, mnt := r.log, r.o.mountpoint
	if err := dfs.SetReadAhead(mnt); err != nil {
		warn := log.Warn
		if os.Geteuid() != 0 {
			warn = log.Info // sysfs is root's: expected
		}
		warn("read-ahead stays at the kernel's default (128 KiB): page-cache reads go as small requests", zap.String("mountpoint", mnt), zap.Error(err))
	}
	if limit, split := dfs.SplitsUnaligned(); split {
		log.Info("a 1 MiB read or write from a buffer that does not start on a page goes as two FUSE requests; "+
			"`sysctl fs.fuse.max_pages_limit=257` (or more) before mounting lets it go as one (README, Tuning)",
			zap.Int("max_pages_limit", limit), zap.Int("max_request_bytes", dfs.MaxRequest()))
	}
}

// unmountOnSignal unmounts on SIGINT or SIGTERM, retrying while the mount
// is busy; server.Wait then returns in run.
func (r *mountRun) unmountOnSignal() {
	log, mnt := r.log, r.o.mountpoint
	for sig := range r.sigs {
		notifyStopping()
		log.Info("unmounting", zap.String("signal", sig.String()), zap.String("mountpoint", mnt))
		for i := 0; ; i++ {
			err := r.server.Unmount()
			if err == nil {
				return
			}
			if i%20 == 0 {
				log.Warn("unmount failed; retrying (close files and leave directories under the mountpoint)",
					zap.String("mountpoint", mnt), zap.Error(err))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// shutdown closes everything after the unmount, readers before what they
// read, and the pool last: a clean close is what the next mount needs to
// skip recovery.
func (r *mountRun) shutdown() error {
	log, pool := r.log, r.o.pool
	r.mx.Close() // before the pool it reads
	// The cluster too: its chunk server and watches read the pool.
	if err := r.cl.Close(); err != nil {
		log.Warn("leaving the cluster", zap.Error(err))
	}
	r.closeTier()
	if err := r.p.Close(); err != nil {
		log.Error("closing the pool failed; the next mount will recover it", zap.String("pool", pool), zap.Error(err))
		return fmt.Errorf("closing %s: %w", pool, err)
	}
	if err := r.m.Close(); err != nil {
		return err
	}
	log.Info("unmounted cleanly", zap.String("pool", pool), zap.String("mountpoint", r.o.mountpoint))
	return nil
}

// startCPUProfile profiles the daemon into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// deviceOptions are the mount options of a mount by root: device nodes
// and setuid bits work, as on ext4 or tmpfs mounted by root (go-fuse's
// default is nodev,nosuid), unless the administrator asks otherwise.
// fusermount3 makes every other user's mount nodev,nosuid.
func deviceOptions(nodev, nosuid bool) []string {
	o := []string{"dev", "suid"}
	if nodev {
		o[0] = "nodev"
	}
	if nosuid {
		o[1] = "nosuid"
	}
	return o
}

// newServer is fuse.NewServer with a failure told in one line. When the
// mount goes through fusermount3 (not root, or no mount rights), go-fuse
// hands it our stderr, where it prints the real reason, and then reports
// only "fusermount exited with code 256": the reason is caught on a pipe
// and becomes the error instead.
func newServer(fs fuse.RawFileSystem, mnt string, mo *fuse.MountOptions) (*fuse.Server, error) {
	r, w, perr := os.Pipe()
	if perr != nil {
		return fuse.NewServer(fs, mnt, mo)
	}
	defer r.Close()
	stderr := os.Stderr
	os.Stderr = w // read by go-fuse when it starts fusermount3
	server, err := fuse.NewServer(fs, mnt, mo)
	os.Stderr = stderr
	w.Close()
	// fusermount3 has exited by now; never wait on a straggler.
	_ = r.SetReadDeadline(time.Now().Add(time.Second))
	said, _ := io.ReadAll(r)
	msg := strings.Join(strings.Fields(strings.TrimSpace(string(said))), " ")
	if err == nil {
		if msg != "" {
			fmt.Fprintln(stderr, msg) // a warning from a mount that worked
		}
		return server, nil
	}
	if msg != "" {
		return nil, fmt.Errorf("%s", msg)
	}
	return nil, fmt.Errorf("%s", strings.Join(strings.Fields(err.Error()), " "))
}
