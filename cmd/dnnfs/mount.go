package main

import (
	"bufio"
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

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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

// isMountpoint reports whether dir is already a mount point (mountinfo).
func isMountpoint(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<16), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == dir {
			return true, nil
		}
	}
	return false, s.Err()
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func runMount(args []string) error {
	fl := newFlags("mount")
	poolPath := fl.String("pool", "", "pool file or DAX device (required, or give POOL MOUNTPOINT)")
	foreground := fl.BoolP("foreground", "f", false, "stay in the foreground until unmounted (default: return once the mount is live, leaving a daemon)")
	logFile := fl.String("log-file", "", "append the log to this file (default: stderr; a daemon's goes to /var/log/dnnfs.log, or $XDG_STATE_HOME/dnnfs/dnnfs.log when not root, once it is live)")
	options := fl.StringArrayP("options", "o", nil, "mount options, comma-separated (as mount -o): every flag here as FLAG or FLAG=VALUE, ro, noatime, allow_other, remount (to the kernel), and mount(8)'s own (defaults, _netdev, nofail, x-*) ignored")
	level := fl.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fl.String("log-format", "console", "log format: console or json")
	allowOther := fl.Bool("allow-other", false, "let other users access the mount (needs user_allow_other for non-root)")
	nodev := fl.Bool("nodev", false, "do not open character or block devices on the mount (a mount by a user other than root never does)")
	nosuid := fl.Bool("nosuid", false, "ignore set-user-ID and set-group-ID bits on the mount (a mount by a user other than root always does)")
	readOnly := fl.Bool("read-only", false, "mount read-only (-o ro): nothing reaches the pool, writes fail with EROFS, reads update no access time; a pool that needs recovery is recovered in memory only")
	readCache := fl.Bool("read-cache", false, "serve read-only opens through the kernel page cache instead of direct I/O")
	pageCache := fl.Bool("page-cache", false, "serve every open through the kernel page cache: write(2) and shared mmap stores to one page stay coherent, but the kernel serialises the writers of a file")
	cpuProfile := fl.String("cpuprofile", "", "write a CPU profile of the daemon to this file until unmount")
	tailInterval := fl.String("tail-interval", "4MiB", "progress of a session segment between persisted tails (a crash redoes at most this per thread)")
	commitInterval := fl.Duration("commit-interval", core.DefaultCommitInterval, "how often writes that allocate blocks or grow a file are committed without an fsync: the most of them a crash can lose (0 = only at fsync, a metadata change of the file, and unmount)")
	warmBytes := fl.String("warm-bytes", "auto", "most freed blocks an emulated pool keeps in its file for the next write instead of punching them at once (auto = half the pool, at most 4GiB; 0 = punch at once)")
	warmDecay := fl.Duration("warm-decay", core.DefaultWarmDecay, "how long a freed block an emulated pool keeps (--warm-bytes) may stay unused before it is punched")
	atimeFlag := fl.String("atime", "relatime", "when reads update access times: relatime (if not newer than mtime/ctime, or a day old), noatime (never) or strictatime (always)")
	lockFlag := fl.String("lock", "range", "data locking: range (per-thread byte-range locks) or file (one lock per file, the kernel file systems' way)")
	ssd := fl.StringArray("ssd", nil, "SSD-tier directory for embedding tables, one per device: DIR[:bw=800MiB/s,lat=90us,channels=4,cap=64GiB] (repeat for more devices)")
	schedFlag := fl.String("sched", "size", "embedding read scheduler: size (a queue per size class, round-robin) or fifo (one queue)")
	classes := fl.String("classes", "128,512", "size-class thresholds in rows: SMALL,MEDIUM (classes <=SMALL, <=MEDIUM, larger)")
	classWeights := fl.String("class-weights", "16,4,1", "pieces each size class (small,medium,large) takes per round-robin turn; 1,1,1 is plain round-robin")
	maxPiece := fl.String("max-piece", "128KiB", "largest single loader transfer (a large request is split into pieces of at most this)")
	computeEls := fl.String("compute-elements", "auto", "CPU processing elements that gather and pool embedding lookups' rows after the loaders read them: auto (GOMAXPROCS-1-ceil(devices/2); none if no core is left) or N; 0 pools on the loaders")
	placement := fl.String("placement", "free=1,bw=1,spread=1", "shard placement weights: free space, device bandwidth, spread of a table over devices")
	shardSize := fl.String("shard-size", "4MiB", "target size of an embedding table shard (the unit of placement and migration)")
	migrate := fl.Duration("migrate-interval", 2*time.Second, "how often the migrator balances hot shards across SSD devices (0 = never)")
	metricsListen := fl.String("metrics-listen", "", "serve Prometheus metrics at http://HOST:PORT/metrics (off by default; a loopback HOST unless --metrics-allow-remote)")
	metricsRemote := fl.Bool("metrics-allow-remote", false, "let --metrics-listen bind a non-loopback address or every interface")
	cf := clusterFlags(fl)
	if err := parse(fl, args); err != nil {
		return err
	}
	readyPipe := takeReadyPipe() // set in a backgrounded mount's daemon
	mo, err := applyMountOptions(fl, *options)
	if err != nil {
		return err
	}
	if mo.remount && fl.NArg() > 0 {
		return remount(fl.Arg(fl.NArg()-1), mo)
	}
	mntArg, err := mountOperands(fl, poolPath)
	if err != nil {
		return err
	}
	lockMode, err := core.ParseLockMode(*lockFlag)
	if err != nil {
		return usageError{"--lock: " + err.Error()}
	}
	atimeMode, err := core.ParseAtimeMode(*atimeFlag)
	if err != nil {
		return usageError{"--atime: " + err.Error()}
	}
	ti, err := parseSize(*tailInterval)
	if err != nil {
		return usageError{"--tail-interval: " + err.Error()}
	}
	if *commitInterval < 0 {
		return usageError{"--commit-interval: must not be negative"}
	}
	ci := *commitInterval
	if ci == 0 {
		ci = -1 // core: never
	}
	var wb int64 // core: the default
	if *warmBytes != "auto" {
		if wb, err = parseSize(*warmBytes); err != nil || wb < 0 {
			return usageError{fmt.Sprintf("--warm-bytes %q: want a size (0 = punch freed blocks at once) or auto", *warmBytes)}
		}
		if wb == 0 {
			wb = -1 // core: none
		}
	}
	if *warmDecay <= 0 {
		return usageError{"--warm-decay: must be positive"}
	}
	tierOpts := embedding.Options{Migrate: *migrate}
	for _, s := range *ssd {
		spec, err := embedding.ParseDeviceSpec(s)
		if err != nil {
			return usageError{err.Error()}
		}
		tierOpts.Devices = append(tierOpts.Devices, spec)
	}
	if tierOpts.Sched.Mode, err = embedding.ParseSchedMode(*schedFlag); err != nil {
		return usageError{err.Error()}
	}
	if tierOpts.Sched.Small, tierOpts.Sched.Medium, err = embedding.ParseClasses(*classes); err != nil {
		return usageError{err.Error()}
	}
	if tierOpts.Sched.Weights, err = embedding.ParseClassWeights(*classWeights); err != nil {
		return usageError{err.Error()}
	}
	mp, err := parseSize(*maxPiece)
	if err != nil || mp < 4096 || mp%4096 != 0 || mp > 16<<20 {
		return usageError{fmt.Sprintf("--max-piece %q: want a multiple of 4KiB up to 16MiB", *maxPiece)}
	}
	tierOpts.Sched.MaxPiece = int(mp)
	if tierOpts.ComputeElements, err = embedding.ParseComputeElements(*computeEls); err != nil {
		return usageError{err.Error()}
	}
	if tierOpts.Placement, err = embedding.ParseWeights(*placement); err != nil {
		return usageError{err.Error()}
	}
	if tierOpts.ShardBytes, err = parseSize(*shardSize); err != nil || tierOpts.ShardBytes < 4096 {
		return usageError{fmt.Sprintf("--shard-size %q: want a size of at least 4KiB", *shardSize)}
	}
	if *migrate < 0 {
		return usageError{"--migrate-interval must not be negative"}
	}
	if *metricsListen != "" {
		if err := metrics.CheckAddr(*metricsListen, *metricsRemote); err != nil {
			return usageError{"--metrics-listen " + err.Error()}
		}
	}
	log, err := newLogger(*level, *logFormat, *logFile)
	if err != nil {
		return err
	}
	defer log.Sync()
	mnt, err := filepath.Abs(mntArg)
	if err != nil {
		return err
	}
	st, err := os.Stat(mnt)
	switch {
	case err != nil:
		return fmt.Errorf("mountpoint %s: %w (create the directory first)", mnt, unwrapPathErr(err))
	case !st.IsDir():
		return fmt.Errorf("mountpoint %s is not a directory", mnt)
	}
	if busy, err := isMountpoint(mnt); err != nil {
		return err
	} else if busy {
		return fmt.Errorf("mountpoint %s is busy: something is already mounted there (unmount it first)", mnt)
	}
	if err := cf.check(*readOnly); err != nil {
		return err
	}
	if !*foreground && readyPipe == nil {
		return mountInBackground(args)
	}
	// The cluster (--etcd) is joined before the pool is opened: a bad
	// configuration is a one-line error and the pool stays as it was.
	cl, err := cf.dial(log)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The daemon (not the parent that waits for it) binds the metrics port.
	var mx *metrics.Server // nil: metrics off
	if *metricsListen != "" {
		if mx, err = metrics.Listen(*metricsListen, log); err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", *metricsListen, err)
		}
		defer mx.Close()
	}
	if err := embedding.CheckDevices(tierOpts.Devices); err != nil {
		return fmt.Errorf("--ssd: %w", err)
	}
	if *readOnly && len(tierOpts.Devices) > 0 {
		return usageError{"--read-only: not with --ssd yet (the SSD tier writes its devices' labels and registry when it opens)"}
	}

	// A mount that fails leaves the pool as it was (unless it needed
	// recovery, which core.Open persists): nothing is written until the
	// FUSE mount exists, and then the pool is stamped mounted and new SSD
	// directories are registered before the first request is served.
	open := pmem.Open
	if *readOnly {
		// Copy-on-write: recovery (journal replay, orphans, sessions)
		// and anything else core stores stay in this process.
		open = pmem.OpenPrivate
		atimeMode = core.AtimeNever
	}
	m, err := open(*poolPath)
	if err != nil {
		return openPoolError(*poolPath, err)
	}
	if w := spaceWarning(*poolPath); w != "" {
		log.Warn(w)
	}
	defer m.Close()
	start := time.Now()
	p, rep, err := core.Open(m, core.Options{Log: log, LockMode: lockMode, TailInterval: uint64(ti), Atime: atimeMode, DeferStamp: true, CommitInterval: ci,
		WarmBytes: wb, WarmDecay: *warmDecay})
	if err != nil {
		return fmt.Errorf("%s: %w", *poolPath, err)
	}
	fields := []zap.Field{zap.String("pool", *poolPath), zap.String("medium", m.Kind().String()),
		zap.String("mountpoint", mnt), zap.Bool("read_only", *readOnly), zap.String("lock", lockMode.String()), zap.String("atime", atimeMode.String()), zap.Int("inodes", rep.Inodes),
		zap.Uint64("used_blocks", rep.UsedBlocks), zap.Uint64("free_blocks", rep.FreeBlocks),
		zap.Uint64("warm_cap_bytes", p.Warm().Cap), zap.Duration("load_time", time.Since(start))}
	if m.Kind() != pmem.Emulated {
		fields = append(fields, zap.String("flush", pmem.FlushInstruction()))
	}
	if rep.ReplicaUsed {
		log.Warn("primary superblock was bad; mounted from the replica and rewrote the primary",
			zap.String("pool", *poolPath), zap.NamedError("primary_error", rep.PrimarySBError))
	}
	if !rep.WasClean {
		log.Warn("pool was not unmounted cleanly; recovered",
			zap.String("pool", *poolPath), zap.Int("journal_records_replayed", rep.ReplayedRecs),
			zap.Int("orphans_freed", rep.OrphansFreed), zap.Int("sessions_resumable", rep.SessionsOpen),
			zap.Int("sessions_closed", rep.SessionsClosed))
	}
	var tier *embedding.Tier
	if len(tierOpts.Devices) > 0 {
		// Goroutines blocked in /dev/fuse reads and backing-file preads
		// hold their P until the runtime's monitor hands it off (up to
		// 10 ms later); with as few Ps as cores the SSD loaders then wait
		// behind them. More Ps than cores keeps them running (measured:
		// small-request p99 under load 4x lower on 2 cores).
		if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < 8 {
			runtime.GOMAXPROCS(8)
		}
		tierOpts.Log = log
		if tier, err = embedding.Prepare(p, tierOpts); err != nil {
			p.Close()
			return err
		}
	} else if ts := p.Tables(); len(ts) > 0 {
		log.Warn("the pool has embedding tables but no --ssd was given: their reads and writes fail until you remount with --ssd",
			zap.Int("tables", len(ts)))
	}
	closeTier := func() {
		if tier != nil {
			if err := tier.Close(); err != nil {
				log.Error("closing the SSD tier", zap.Error(err))
			}
		}
	}
	if err := cl.Start(p); err != nil {
		closeTier()
		p.Close()
		return fmt.Errorf("cluster: %w", err)
	}
	root := dfs.Root(p, dfs.Options{Log: log, ReadCache: *readCache, PageCache: *pageCache, Tier: tier, Cluster: cl})
	opts := dfs.MountOptions(*poolPath, *allowOther, log)
	// The atime mode shows in mountinfo like a local file system's (the
	// kernel itself updates no atime on FUSE: the pool applies the rule).
	switch atimeMode {
	case core.AtimeNever:
		opts.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOATIME
	case core.AtimeStrict:
		opts.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_STRICTATIME
	}
	if os.Geteuid() != 0 {
		opts.DirectMount = false // through fusermount3
		if *readOnly {
			opts.Options = append(opts.Options, "ro")
		}
	} else {
		opts.Options = append(opts.Options, deviceOptions(*nodev, *nosuid)...)
		if *readOnly {
			// The kernel refuses every change with EROFS, as on any
			// read-only mount.
			if opts.DirectMountFlags == 0 {
				opts.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV
			}
			opts.DirectMountFlags |= syscall.MS_RDONLY
		}
	}
	// Signals are caught before the mount appears: a SIGTERM in between
	// would otherwise kill the daemon and leave a dead mount behind.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	// Mounted, but nothing is served before Serve: the kernel queues
	// requests until then.
	server, err := newServer(mx.FUSE(dfs.NewRawFS(root, p, opts, log)), mnt, &opts.MountOptions)
	if err != nil {
		closeTier()
		p.Close()
		return fmt.Errorf("mount %s on %s: %w", *poolPath, mnt, err)
	}
	var startErr error
	if !*readOnly {
		startErr = p.Stamp()
	}
	if startErr == nil && tier != nil {
		startErr = tier.Start()
	}
	go server.Serve()
	if startErr == nil {
		startErr = server.WaitMount()
	}
	if startErr == nil && cl != nil {
		cl.SetNotifier(notifier{server})
	}
	if startErr != nil {
		// Unmount before anything uses the half-started tier.
		if err := server.Unmount(); err != nil {
			log.Error("unmounting after a failed start", zap.String("mountpoint", mnt), zap.Error(err))
		}
		closeTier()
		p.Close()
		return fmt.Errorf("mount %s on %s: %w", *poolPath, mnt, startErr)
	}
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
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	announceReady(readyPipe, *logFile, log)
	log.Info("mounted", fields...)
	mx.Serve(metrics.Sources{Pool: p, Tier: tier, Cluster: cl})

	go func() {
		for sig := range sigs {
			notifyStopping()
			log.Info("unmounting", zap.String("signal", sig.String()), zap.String("mountpoint", mnt))
			for i := 0; ; i++ {
				err := server.Unmount()
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
	}()
	server.Wait()
	mx.Close() // before the pool it reads
	// The cluster too: its chunk server and watches read the pool.
	if err := cl.Close(); err != nil {
		log.Warn("leaving the cluster", zap.Error(err))
	}
	closeTier()
	if err := p.Close(); err != nil {
		log.Error("closing the pool failed; the next mount will recover it", zap.String("pool", *poolPath), zap.Error(err))
		return fmt.Errorf("closing %s: %w", *poolPath, err)
	}
	if err := m.Close(); err != nil {
		return err
	}
	log.Info("unmounted cleanly", zap.String("pool", *poolPath), zap.String("mountpoint", mnt))
	return nil
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

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
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
