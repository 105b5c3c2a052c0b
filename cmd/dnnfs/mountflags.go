package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/internal/metrics"
)

// mountOptions are the flags of `dnnfs mount` as given (AddFlags) and, once
// validate has run, what they mean for core and embedding. -o options set
// the same fields (applyMountOptions goes through the flag set).
type mountOptions struct {
	pool, mountpoint               string
	foreground                     bool
	logFile, logLevel, logFormat   string
	options                        []string
	allowOther, nodev, nosuid      bool
	readOnly, readCache, pageCache bool
	cpuProfile                     string
	tailInterval, warmBytes        string
	commitInterval                 time.Duration
	atime, lock                    string
	ssd                            []string
	sched, classes, classWeights   string
	maxPiece, computeElements      string
	placement, shardSize           string
	metricsListen                  string
	metricsRemote                  bool
	cluster                        *clusterFlagSet

	// Set by validate: core's options but Log and DeferStamp, and the
	// tier's but Log. --warm-decay and --migrate-interval are bound to
	// their fields here directly, having nothing to translate.
	core core.Options
	tier embedding.Options
}

// AddFlags defines the mount flags on fl, in the order --help lists them,
// the cluster's last (clusterFlags).
func (o *mountOptions) AddFlags(fl *pflag.FlagSet) {
	o.addMountFlags(fl)
	o.addPoolFlags(fl)
	o.addTierFlags(fl)
	fl.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://HOST:PORT/metrics (off by default; a loopback HOST unless --metrics-allow-remote)")
	fl.BoolVar(&o.metricsRemote, "metrics-allow-remote", false, "let --metrics-listen bind a non-loopback address or every interface")
	o.cluster = clusterFlags(fl)
}

// addMountFlags: the pool, the daemon and its log, and the kernel mount.
func (o *mountOptions) addMountFlags(fl *pflag.FlagSet) {
	fl.StringVar(&o.pool, "pool", "", "pool file or DAX device (required, or give POOL MOUNTPOINT)")
	fl.BoolVarP(&o.foreground, "foreground", "f", false, "stay in the foreground until unmounted (default: return once the mount is live, leaving a daemon)")
	fl.StringVar(&o.logFile, "log-file", "", "append the log to this file (default: stderr; a daemon's goes to /var/log/dnnfs.log, or $XDG_STATE_HOME/dnnfs/dnnfs.log when not root, once it is live)")
	fl.StringArrayVarP(&o.options, "options", "o", nil, "mount options, comma-separated (as mount -o): every flag here as FLAG or FLAG=VALUE, ro, noatime, allow_other, remount (to the kernel), and mount(8)'s own (defaults, _netdev, nofail, x-*) ignored")
	fl.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.StringVar(&o.logFormat, "log-format", "console", "log format: console or json")
	fl.BoolVar(&o.allowOther, "allow-other", false, "let other users access the mount (needs user_allow_other for non-root)")
	fl.BoolVar(&o.nodev, "nodev", false, "do not open character or block devices on the mount (a mount by a user other than root never does)")
	fl.BoolVar(&o.nosuid, "nosuid", false, "ignore set-user-ID and set-group-ID bits on the mount (a mount by a user other than root always does)")
	fl.BoolVar(&o.readOnly, "read-only", false, "mount read-only (-o ro): nothing reaches the pool, writes fail with EROFS, reads update no access time; a pool that needs recovery is recovered in memory only")
	fl.BoolVar(&o.readCache, "read-cache", false, "serve read-only opens through the kernel page cache instead of direct I/O")
	fl.BoolVar(&o.pageCache, "page-cache", false, "serve every open through the kernel page cache: write(2) and shared mmap stores to one page stay coherent, but the kernel serialises the writers of a file")
	fl.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the daemon to this file until unmount")
}

// addPoolFlags: how core persists, frees and locks (DESIGN §Two-layer log,
// §Delayed commit, §Warm blocks, §Range locks).
func (o *mountOptions) addPoolFlags(fl *pflag.FlagSet) {
	fl.StringVar(&o.tailInterval, "tail-interval", "4MiB", "progress of a session segment between persisted tails (a crash redoes at most this per thread)")
	fl.DurationVar(&o.commitInterval, "commit-interval", core.DefaultCommitInterval, "how often writes that allocate blocks or grow a file are committed without an fsync: the most of them a crash can lose (0 = only at fsync, a metadata change of the file, and unmount)")
	fl.StringVar(&o.warmBytes, "warm-bytes", "auto", "most freed blocks an emulated pool keeps in its file for the next write instead of punching them at once (auto = half the pool, at most 4GiB; 0 = punch at once)")
	fl.DurationVar(&o.core.WarmDecay, "warm-decay", core.DefaultWarmDecay, "how long a freed block an emulated pool keeps (--warm-bytes) may stay unused before it is punched")
	fl.StringVar(&o.atime, "atime", "relatime", "when reads update access times: relatime (if not newer than mtime/ctime, or a day old), noatime (never) or strictatime (always)")
	fl.StringVar(&o.lock, "lock", "range", "data locking: range (per-thread byte-range locks) or file (one lock per file, the kernel file systems' way)")
}

// addTierFlags: the embedding tier (DESIGN §Embedding tier).
func (o *mountOptions) addTierFlags(fl *pflag.FlagSet) {
	fl.StringArrayVar(&o.ssd, "ssd", nil, "SSD-tier directory for embedding tables, one per device: DIR[:bw=800MiB/s,lat=90us,channels=4,cap=64GiB] (repeat for more devices)")
	fl.StringVar(&o.sched, "sched", "size", "embedding read scheduler: size (a queue per size class, round-robin) or fifo (one queue)")
	fl.StringVar(&o.classes, "classes", "128,512", "size-class thresholds in rows: SMALL,MEDIUM (classes <=SMALL, <=MEDIUM, larger)")
	fl.StringVar(&o.classWeights, "class-weights", "16,4,1", "pieces each size class (small,medium,large) takes per round-robin turn; 1,1,1 is plain round-robin")
	fl.StringVar(&o.maxPiece, "max-piece", "128KiB", "largest single loader transfer (a large request is split into pieces of at most this)")
	fl.StringVar(&o.computeElements, "compute-elements", "auto", "CPU processing elements that gather and pool embedding lookups' rows after the loaders read them: auto (GOMAXPROCS-1-ceil(devices/2); none if no core is left) or N; 0 pools on the loaders")
	fl.StringVar(&o.placement, "placement", "free=1,bw=1,spread=1", "shard placement weights: free space, device bandwidth, spread of a table over devices")
	fl.StringVar(&o.shardSize, "shard-size", "4MiB", "target size of an embedding table shard (the unit of placement and migration)")
	fl.DurationVar(&o.tier.Migrate, "migrate-interval", 2*time.Second, "how often the migrator balances hot shards across SSD devices (0 = never)")
}

// validate checks every flag value that needs no file system, in the order
// of the flags, and fills in core and tier. The
// mountpoint, the log flags and the cluster's are checked after it
// (runMount), each with its own message.
func (o *mountOptions) validate() error {
	if err := o.validatePool(); err != nil {
		return err
	}
	if err := o.validateTier(); err != nil {
		return err
	}
	if o.metricsListen != "" {
		if err := metrics.CheckAddr(o.metricsListen, o.metricsRemote); err != nil {
			return usageError{"--metrics-listen " + err.Error()}
		}
	}
	return nil
}

// validatePool reads the flags of addPoolFlags into core.
func (o *mountOptions) validatePool() error {
	var err error
	if o.core.LockMode, err = core.ParseLockMode(o.lock); err != nil {
		return usageError{"--lock: " + err.Error()}
	}
	if o.core.Atime, err = core.ParseAtimeMode(o.atime); err != nil {
		return usageError{"--atime: " + err.Error()}
	}
	ti, err := parseSize(o.tailInterval)
	if err != nil {
		return usageError{"--tail-interval: " + err.Error()}
	}
	o.core.TailInterval = uint64(ti)
	if o.commitInterval < 0 {
		return usageError{"--commit-interval: must not be negative"}
	}
	o.core.CommitInterval = o.commitInterval
	if o.core.CommitInterval == 0 {
		o.core.CommitInterval = -1 // core: never
	}
	if o.warmBytes != "auto" { // else 0: core's default
		wb, err := parseSize(o.warmBytes)
		if err != nil || wb < 0 {
			return usageError{fmt.Sprintf("--warm-bytes %q: want a size (0 = punch freed blocks at once) or auto", o.warmBytes)}
		}
		if wb == 0 {
			wb = -1 // core: none
		}
		o.core.WarmBytes = wb
	}
	if o.core.WarmDecay <= 0 {
		return usageError{"--warm-decay: must be positive"}
	}
	return nil
}

// validateTier reads the flags of addTierFlags into tier.
func (o *mountOptions) validateTier() error {
	t := &o.tier
	for _, s := range o.ssd {
		spec, err := embedding.ParseDeviceSpec(s)
		if err != nil {
			return usageError{err.Error()}
		}
		t.Devices = append(t.Devices, spec)
	}
	var err error
	if t.Sched.Mode, err = embedding.ParseSchedMode(o.sched); err != nil {
		return usageError{err.Error()}
	}
	if t.Sched.Small, t.Sched.Medium, err = embedding.ParseClasses(o.classes); err != nil {
		return usageError{err.Error()}
	}
	if t.Sched.Weights, err = embedding.ParseClassWeights(o.classWeights); err != nil {
		return usageError{err.Error()}
	}
	mp, err := parseSize(o.maxPiece)
	if err != nil || mp < 4096 || mp%4096 != 0 || mp > 16<<20 {
		return usageError{fmt.Sprintf("--max-piece %q: want a multiple of 4KiB up to 16MiB", o.maxPiece)}
	}
	t.Sched.MaxPiece = int(mp)
	if t.ComputeElements, err = embedding.ParseComputeElements(o.computeElements); err != nil {
		return usageError{err.Error()}
	}
	if t.Placement, err = embedding.ParseWeights(o.placement); err != nil {
		return usageError{err.Error()}
	}
	if t.ShardBytes, err = parseSize(o.shardSize); err != nil || t.ShardBytes < 4096 {
		return usageError{fmt.Sprintf("--shard-size %q: want a size of at least 4KiB", o.shardSize)}
	}
	if t.Migrate < 0 {
		return usageError{"--migrate-interval must not be negative"}
	}
	return nil
}

// checkMountpoint makes mountpoint absolute and refuses one that is not an
// existing directory with nothing mounted on it.
func (o *mountOptions) checkMountpoint() error {
	mnt, err := filepath.Abs(o.mountpoint)
	if err != nil {
		return err
	}
	o.mountpoint = mnt
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
	return nil
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

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
