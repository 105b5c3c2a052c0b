package embedding

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/kv"
)

// Weights are the placement weights (DESIGN.md §Placement): free space, bandwidth,
// and spread (negative weight on devices already holding shards of the
// same table).
type Weights struct{ Free, BW, Spread float64 }

// DefaultWeights weigh the three equally.
var DefaultWeights = Weights{Free: 1, BW: 1, Spread: 1}

// ParseWeights reads "free=1,bw=1,spread=1" (keys may be omitted).
func ParseWeights(s string) (Weights, error) {
	w := DefaultWeights
	items, err := kv.Parse(s)
	if err != nil {
		return w, fmt.Errorf("--placement %q: %w (want free=W,bw=W,spread=W with W >= 0)", s, err)
	}
	for _, it := range items {
		var f *float64
		switch it.Key {
		case "free":
			f = &w.Free
		case "bw":
			f = &w.BW
		case "spread":
			f = &w.Spread
		default:
			return w, fmt.Errorf("--placement %q: %w", s, it.Unknown("free", "bw", "spread"))
		}
		if *f, err = it.Float(0); err != nil {
			return w, fmt.Errorf("--placement %q: %w", s, err)
		}
	}
	return w, nil
}

// Options configure the tier.
type Options struct {
	Devices    []DeviceSpec
	Sched      SchedConfig
	Placement  Weights
	ShardBytes int64 // target shard size; 0 = DefaultShardBytes
	// Migrate is the migrator's period; 0 disables it.
	Migrate time.Duration
	// ComputeElements is the CPU processing elements of the compute stage
	// (DESIGN.md §Compute stage): ComputeAuto sizes them by
	// DefaultComputeElements; 0 runs a lookup's gather or pooling on the
	// loader that read its last piece, as before the compute stage.
	ComputeElements int
	Log             *zap.Logger
}

// DefaultShardBytes is the target shard size: small enough to move and
// balance, large enough to keep translation tables short.
const DefaultShardBytes = 4 << 20

// Tier is the mounted SSD tier.
type Tier struct {
	p      *core.FS
	meta   Meta // the registry and the tables' descriptors, in p
	log    *zap.Logger
	sched  scheduler
	weight Weights
	shardB int64

	devs []*Device // index DevID-1; nil for a registered device not given (fixed at Open)
	att  []*Device // the attached devices (fixed at Open)

	mu     sync.Mutex
	tables map[core.Ino]*Table

	useful  atomic.Uint64 // bytes callers asked for (reads, lookups)
	mig     migrator
	compute *computeSched // without elements (or nil, in tests) lookups reduce on the loader
	nCPU    int           // CPU elements Start creates

	pending  []*Device     // new devices Prepare found; Start registers them
	migEvery time.Duration // the migrator's period (Start)
}

// Open attaches the SSD-tier devices to a mounted pool: registers new
// directories, checks labels, rebuilds free shard space from the
// translation tables and starts the loaders. It is Prepare then Start.
func Open(p *core.FS, opts Options) (*Tier, error) {
	t, err := Prepare(p, opts)
	if err != nil {
		return nil, err
	}
	if err := t.Start(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Prepare opens and checks every device (labels against the pool's
// registry) and rebuilds the tables' state, writing nothing: new
// directories are registered by Start. A Prepare that fails, or a prepared
// tier closed before Start, leaves the pool and the directories as they
// were (a backing file it created is removed again).
func Prepare(p *core.FS, opts Options) (*Tier, error) {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	if opts.Sched.MaxPiece == 0 {
		opts.Sched.MaxPiece = DefaultSched.MaxPiece
	}
	if opts.Sched.Small == 0 {
		opts.Sched.Small, opts.Sched.Medium = DefaultSched.Small, DefaultSched.Medium
	}
	if opts.Sched.Weights == [maxClasses]int{} {
		opts.Sched.Weights = DefaultSched.Weights
	}
	if opts.Placement == (Weights{}) {
		opts.Placement = DefaultWeights
	}
	t := &Tier{p: p, meta: Meta{S: p}, log: log, sched: scheduler{cfg: opts.Sched}, weight: opts.Placement,
		shardB: opts.ShardBytes, tables: map[core.Ino]*Table{}, migEvery: opts.Migrate}
	if t.shardB == 0 {
		t.shardB = DefaultShardBytes
	}
	t.nCPU = opts.ComputeElements
	if t.nCPU == ComputeAuto {
		t.nCPU = DefaultComputeElements(len(opts.Devices))
	}
	if err := CheckDevices(opts.Devices); err != nil {
		return nil, err
	}
	var opened []*Device
	fail := func(err error) (*Tier, error) {
		for _, d := range opened {
			d.close()
			d.removeIfCreated()
		}
		return nil, err
	}
	reg, err := t.meta.TierDevices()
	if err != nil {
		return nil, fmt.Errorf("SSD-tier registry: %w; run `dnnfs fsck --pool PATH`", err)
	}
	next := len(reg) + 1 // the id the next new device gets
	for _, spec := range opts.Devices {
		d, label, fresh, err := openDevice(spec)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, d)
		switch {
		case fresh:
			d.ID = format.DevID(next)
			next++
			t.pending = append(t.pending, d)
		case label.Pool != p.UUID():
			return fail(fmt.Errorf("SSD directory %s belongs to another pool (uuid %x); give this pool its own directory", d.Dir, label.Pool))
		case int(label.Dev) == next:
			// Labelled, then the daemon died before the registry named
			// it: register it now (FORMAT.md, register a device).
			d.ID = label.Dev
			next++
			t.pending = append(t.pending, d)
		case int(label.Dev) > len(reg) || reg[label.Dev-1].UUID != label.UUID:
			return fail(fmt.Errorf("SSD directory %s holds device %d (uuid %x), which this pool's registry does not list: not this pool's device, or its registry was repaired; move %s away to reuse the directory",
				d.Dir, label.Dev, label.UUID, filepath.Join(d.Dir, BackingName)))
		default:
			d.ID, d.UUID = label.Dev, label.UUID
		}
		if int(d.ID) > format.MaxTierDevices {
			return fail(fmt.Errorf("SSD directory %s: the pool already has %d devices, the most it can hold", d.Dir, format.MaxTierDevices))
		}
	}
	t.devs = make([]*Device, next-1)
	for _, d := range opened {
		t.devs[d.ID-1] = d
	}
	for _, d := range t.devs {
		if d != nil {
			t.att = append(t.att, d)
		}
	}
	if err := t.loadTables(reg); err != nil {
		return fail(err)
	}
	for _, d := range opened {
		d.weights = opts.Sched.Weights
	}
	return t, nil
}

// CheckDevices checks what can be checked of the --ssd directories
// without the pool: each is given once and is an existing directory.
func CheckDevices(specs []DeviceSpec) error {
	seen := map[string]bool{}
	for _, spec := range specs {
		abs, _ := filepath.Abs(spec.Dir)
		if seen[abs] {
			return fmt.Errorf("--ssd %s given twice", spec.Dir)
		}
		seen[abs] = true
		st, err := os.Stat(spec.Dir)
		if err != nil {
			return fmt.Errorf("SSD directory %s: %w", spec.Dir, unwrapPath(err))
		}
		if !st.IsDir() {
			return fmt.Errorf("SSD directory %s is not a directory", spec.Dir)
		}
	}
	return nil
}

// Start registers the new devices Prepare found (label, then the pool's
// registry), starts the loaders and the migrator. Call it once, before
// the tier serves anything.
func (t *Tier) Start() error {
	for len(t.pending) > 0 {
		d := t.pending[0]
		if err := t.register(d, int(d.ID)); err != nil {
			return err
		}
		t.pending = t.pending[1:]
	}
	t.pending = nil
	t.compute = newComputeSched(cpuElements(t.nCPU)) // none: on the loaders, counted
	t.compute.inlineRows = t.sched.cfg.Small
	if t.sched.cfg.Mode == SizeAware { // fifo: one queue per element too
		t.compute.classOf, t.compute.weights = t.sched.cfg.class, t.sched.cfg.Weights
	}
	for _, d := range t.att {
		d.start()
	}
	t.p.SetExtFreed(t.extFreed)
	t.mig.start(t, t.migEvery)
	for _, d := range t.att {
		st := d.space.stats()
		t.log.Info("SSD-tier device attached", zap.Uint16("device", uint16(d.ID)), zap.String("dir", d.Dir),
			zap.Int("channels", d.model.Channels), zap.Float64("bw_bytes_per_s", d.model.BW), zap.Duration("lat", d.model.Lat),
			zap.Int64("capacity", st.Capacity), zap.Int64("used", st.Used))
	}
	return nil
}

// register labels a new device as id and adds it to the pool's registry.
func (t *Tier) register(d *Device, id int) error {
	if id > format.MaxTierDevices {
		return fmt.Errorf("SSD directory %s: the pool already has %d devices, the most it can hold", d.Dir, format.MaxTierDevices)
	}
	if _, err := rand.Read(d.UUID[:]); err != nil {
		return err
	}
	d.ID = format.DevID(id)
	if err := d.writeLabel(format.DevLabel{Dev: d.ID, Pool: t.p.UUID(), UUID: d.UUID}); err != nil {
		return fmt.Errorf("SSD directory %s: writing the device label: %w", d.Dir, err)
	}
	got, err := t.meta.RegisterTierDevice(format.TierDevice{UUID: d.UUID, Path: d.Dir})
	if err != nil {
		return fmt.Errorf("registering SSD directory %s: %w", d.Dir, err)
	}
	if got != d.ID {
		return fmt.Errorf("registering SSD directory %s: got device id %d, labelled %d", d.Dir, got, d.ID)
	}
	t.log.Info("SSD-tier device registered", zap.Uint16("device", uint16(d.ID)), zap.String("dir", d.Dir))
	return nil
}

// loadTables builds every table's DRAM state and the devices' free space.
func (t *Tier) loadTables(reg []format.TierDevice) error {
	used := make([][]extent, len(t.devs))
	missing := map[format.DevID]int{}
	for _, in := range t.p.Tables() {
		hdr, _ := in.Table()
		es, err := t.meta.TableShards(in)
		if err != nil {
			return fmt.Errorf("table inode %d: %w", in.Ino, err)
		}
		tb := t.newTable(in, hdr, es)
		for i, e := range es {
			span := int64(hdr.ShardSpan(i))
			for _, c := range []struct {
				id  format.DevID
				off uint64
			}{{e.Dev, e.Off}, {e.RDev, e.ROff}} {
				if c.id == 0 {
					continue
				}
				if t.devs[c.id-1] == nil {
					missing[c.id]++
					continue
				}
				used[c.id-1] = append(used[c.id-1], extent{off: int64(c.off), n: span})
			}
		}
		t.tables[in.Ino] = tb
	}
	if len(missing) > 0 {
		var parts []string
		for id, n := range missing {
			parts = append(parts, fmt.Sprintf("device %d (registered as %s) holds %d shard copies", id, reg[id-1].Path, n))
		}
		sort.Strings(parts)
		return fmt.Errorf("embedding tables need SSD-tier devices this mount was not given: %s; mount with --ssd DIR for each", strings.Join(parts, "; "))
	}
	for i, d := range t.devs {
		if d == nil {
			continue
		}
		if err := d.space.load(used[i]); err != nil {
			return fmt.Errorf("SSD device %d (%s): %w; run dnnfs fsck", d.ID, d.Dir, err)
		}
	}
	return nil
}

func (t *Tier) newTable(in *core.Inode, hdr format.TableHeader, es []format.ShardEntry) *Table {
	tb := &Table{tier: t, in: in, hdr: hdr, rowBytes: int64(hdr.RowBytes()), shards: make([]shard, len(es))}
	for i, e := range es {
		tb.shards[i].cur.Store(&location{e: e})
	}
	return tb
}

func (t *Tier) dev(id format.DevID) *Device {
	if id == 0 || int(id) > len(t.devs) {
		return nil
	}
	return t.devs[id-1]
}

// Table returns the DRAM table of a table inode.
func (t *Tier) Table(in *core.Inode) (*Table, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb, ok := t.tables[in.Ino]
	return tb, ok
}

// CreateTable makes the empty regular file in a table of rows x dim of
// dtype: shards are placed (DESIGN.md §Placement) and reserved, then the pool
// records the translation table.
func (t *Tier) CreateTable(in *core.Inode, rows uint64, dim uint32, dtype uint8, shardBytes int64) error {
	if shardBytes <= 0 {
		shardBytes = t.shardB
	}
	rb := uint64(dim) * uint64(format.DtypeSize(dtype))
	if rb == 0 {
		return fmt.Errorf("%w: dtype %d, dim %d", core.ErrInvalid, dtype, dim)
	}
	shardRows := max(uint64(shardBytes)/rb, 1)
	shardRows = max(shardRows, (rows+format.MaxTableShards-1)/format.MaxTableShards)
	hdr, err := format.NewTableHeader(rows, dim, dtype, shardRows)
	if err != nil {
		return fmt.Errorf("%w: %v", core.ErrInvalid, err)
	}
	if len(t.att) == 0 {
		return ErrNoTier
	}
	es := make([]format.ShardEntry, hdr.Shards)
	counts := map[format.DevID]int{}
	undo := func(k int) {
		for i := 0; i < k; i++ {
			t.dev(es[i].Dev).space.release(int64(es[i].Off), int64(hdr.ShardSpan(i)))
		}
	}
	for i := range es {
		span := int64(hdr.ShardSpan(i))
		d, off, ok := t.place(span, counts, i)
		if !ok {
			undo(i)
			return fmt.Errorf("%w: shard %d of %d needs %d bytes", ErrNoSpace, i, len(es), span)
		}
		counts[d.ID]++
		es[i] = format.ShardEntry{Dev: d.ID, Off: uint64(off)}
	}
	if err := t.meta.CreateTable(in, hdr, es); err != nil {
		undo(len(es))
		return err
	}
	t.mu.Lock()
	t.tables[in.Ino] = t.newTable(in, hdr, es)
	t.mu.Unlock()
	return nil
}

// place picks a device for span bytes by the weighted score of DESIGN.md
// §Placement and reserves the space there (best fit). counts are the table's
// shards per device so far (placed of them); devices in exclude are
// skipped.
func (t *Tier) place(span int64, counts map[format.DevID]int, placed int, exclude ...format.DevID) (*Device, int64, bool) {
	ds := t.att
	var maxFree, maxBW float64
	for _, d := range ds {
		maxFree = max(maxFree, float64(d.space.freeBytes()))
		maxBW = max(maxBW, d.model.BW)
	}
	type cand struct {
		d     *Device
		score float64
	}
	var cs []cand
	for _, d := range ds {
		if slices.Contains(exclude, d.ID) || d.space.freeBytes() < span {
			continue
		}
		bw := 1.0
		if maxBW > 0 {
			bw = d.model.BW / maxBW
			if d.model.BW == 0 {
				bw = 1 // unthrottled: as fast as the fastest
			}
		}
		s := t.weight.Free*float64(d.space.freeBytes())/max(maxFree, 1) + t.weight.BW*bw -
			t.weight.Spread*float64(counts[d.ID])/float64(placed+1)
		cs = append(cs, cand{d, s})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].score > cs[j].score })
	for _, c := range cs {
		if off, ok := c.d.space.reserve(span); ok {
			return c.d, off, true
		}
	}
	return nil, 0, false
}

// extFreed returns a deleted table's shard space (core hook).
func (t *Tier) extFreed(in *core.Inode, kind core.ExtKind, desc []byte) {
	if kind != core.ExtTable {
		return
	}
	hdr, es, err := DecodeTable(desc, len(t.devs))
	if err != nil {
		t.log.Error("freeing a table whose descriptor no longer decodes; its SSD space is reclaimed at the next mount",
			zap.Uint64("ino", uint64(in.Ino)), zap.Error(err))
		es = nil
	}
	t.mu.Lock()
	tb := t.tables[in.Ino]
	if tb != nil && tb.in == in {
		delete(t.tables, in.Ino)
	} else {
		tb = nil // the number was reused by a new table already
	}
	t.mu.Unlock()
	if tb != nil {
		// No handle is open (the pool frees tables only then), but wait
		// for pins of pieces still finishing.
		for i := range tb.shards {
			for tb.shards[i].cur.Load().refs.Load() > 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for i, e := range es {
		span := int64(hdr.ShardSpan(i))
		if d := t.dev(e.Dev); d != nil {
			d.space.release(int64(e.Off), span)
		}
		if d := t.dev(e.RDev); d != nil {
			d.space.release(int64(e.ROff), span)
		}
	}
}

// run schedules pieces as one request and waits for it.
func (t *Tier) run(rows, bytes int, ps []*piece) error {
	ch := make(chan error, 1)
	t.startAsync(rows, bytes, ps, func(err error) { ch <- err })
	return <-ch
}

// startAsync schedules pieces as one request; onDone runs on completion
// (on a loader goroutine: it must not block).
func (t *Tier) startAsync(rows, bytes int, ps []*piece, onDone func(error)) {
	for _, p := range ps {
		if p.dev == nil {
			go onDone(fmt.Errorf("SSD-tier device missing for a shard: %w", ErrNoTier))
			return
		}
	}
	r := t.sched.newRequest(rows, bytes, onDone)
	t.sched.dispatch(r, ps)
}

// Sync makes every write so far durable (fdatasync of the backing files
// written since the last Sync).
func (t *Tier) Sync() error {
	var errs []error
	for _, d := range t.att {
		if d.dirty.Swap(false) {
			if err := d.io.Sync(); err != nil {
				d.dirty.Store(true)
				errs = append(errs, fmt.Errorf("SSD device %d (%s): fdatasync: %w", d.ID, d.Dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Close stops the migrator and the loaders, syncs and closes the devices.
func (t *Tier) Close() error {
	t.mig.stop()
	err := t.Sync()
	for _, d := range t.att {
		d.close()
	}
	t.compute.close() // after the loaders: they submit
	// Not started (or registration failed): the directories not yet
	// registered get back the backing files they lacked.
	for _, d := range t.pending {
		d.removeIfCreated()
	}
	t.pending = nil
	return err
}
