package embedding

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/kv"
	"github.com/dnnfs/dnnfs/internal/units"
)

// BackingName is the backing file in each SSD-tier directory.
const BackingName = "dnnfs-tier.dat"

// Model emulates a distinct SSD on shared hardware: bandwidth (bytes/s;
// 0 = as fast as the file), latency per request, loaders (channels),
// capacity (0 = what the directory's file system has free at mount) and
// sector, the unit of a read (0 = the file system's O_DIRECT alignment,
// else 4096): a row costs the sectors it touches.
type Model struct {
	BW       float64
	Lat      time.Duration
	Channels int
	Cap      int64
	Sector   int64
}

// DeviceSpec is one --ssd argument: DIR[:bw=800MiB/s,lat=90us,channels=4,cap=64GiB].
type DeviceSpec struct {
	Dir   string
	Model Model
}

// DefaultChannels is the loaders per device when the spec names none.
const DefaultChannels = 4

// ParseDeviceSpec reads DIR[:bw=RATE,lat=DUR,channels=N,cap=SIZE,sector=SIZE].
func ParseDeviceSpec(s string) (DeviceSpec, error) {
	spec := DeviceSpec{Dir: s, Model: Model{Channels: DefaultChannels}}
	if i := strings.LastIndex(s, ":"); i >= 0 && strings.Contains(s[i+1:], "=") {
		spec.Dir = s[:i]
		items, err := kv.Parse(s[i+1:])
		if err != nil {
			return spec, fmt.Errorf("--ssd %s: %w", s, err)
		}
		for _, it := range items {
			switch it.Key {
			case "bw":
				var n int64
				n, err = units.ParseSize(strings.TrimSuffix(it.Value, "/s"))
				if err != nil {
					err = it.Errorf("want a rate like 800MiB/s")
				}
				spec.Model.BW = float64(n)
			case "lat":
				spec.Model.Lat, err = it.Duration()
			case "channels":
				var n int64
				n, err = it.Int(1, 256)
				spec.Model.Channels = int(n)
			case "sector":
				spec.Model.Sector, err = it.Size()
				if n := spec.Model.Sector; err != nil || n < 512 || n > format.BlockSize || n&(n-1) != 0 {
					err = it.Errorf("want a power of two from 512 to 4096")
				}
			case "cap":
				spec.Model.Cap, err = it.Size()
				if err != nil || spec.Model.Cap < format.BlockSize {
					err = it.Errorf("want a size like 64GiB")
				}
			default:
				err = it.Unknown("bw", "lat", "channels", "cap", "sector")
			}
			if err != nil {
				return spec, fmt.Errorf("--ssd %s: %w", s, err)
			}
		}
	}
	if spec.Dir == "" {
		return spec, fmt.Errorf("--ssd %q: no directory", s)
	}
	return spec, nil
}

// backing is a device's backing file as the loaders see it; tests wrap it
// to inject faults (EIO, short transfers, stalls).
type backing interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
}

// fileBacking reads and writes with pread/pwrite; through an O_DIRECT
// descriptor when offset, length and buffer meet the file system's
// direct-I/O alignment (no page cache: the SSD's own latency and
// bandwidth), else the buffered one. The kernel keeps the two coherent
// (direct reads flush dirty pages first). A file system that refuses a
// direct transfer (EINVAL) is read buffered from then on.
type fileBacking struct {
	f        *os.File
	direct   atomic.Pointer[os.File] // nil once the file system refused a direct transfer
	dfile    *os.File                // the O_DIRECT descriptor, for close
	dioAlign int64                   // offset and length alignment of O_DIRECT
	memAlign uintptr
}

func (b *fileBacking) aligned(p []byte, off int64) bool {
	return off%b.dioAlign == 0 && int64(len(p))%b.dioAlign == 0 && len(p) > 0 &&
		uintptr(unsafe.Pointer(&p[0]))%b.memAlign == 0
}

func (b *fileBacking) ReadAt(p []byte, off int64) (int, error) {
	if d := b.direct.Load(); d != nil && b.aligned(p, off) {
		n, err := d.ReadAt(p, off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		b.direct.Store(nil)
	}
	return b.f.ReadAt(p, off)
}

func (b *fileBacking) WriteAt(p []byte, off int64) (int, error) {
	if d := b.direct.Load(); d != nil && b.aligned(p, off) {
		n, err := d.WriteAt(p, off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		b.direct.Store(nil)
	}
	return b.f.WriteAt(p, off)
}

func (b *fileBacking) Sync() error { return unix.Fdatasync(int(b.f.Fd())) }

// alignedBuf returns n bytes (rounded up to blocks) at a block-aligned
// address, for O_DIRECT.
func alignedBuf(n int) []byte {
	n = (n + format.BlockSize - 1) / format.BlockSize * format.BlockSize
	raw := make([]byte, n+format.BlockSize)
	skip := (format.BlockSize - int(uintptr(unsafe.Pointer(&raw[0]))%format.BlockSize)) % format.BlockSize
	return raw[skip : skip+n : skip+n]
}

// readBuf is an aligned buffer from readBufs; put returns it.
type readBuf struct {
	b     []byte
	class int // -1: too large to keep
}

// readBufs recycles the aligned buffers the loaders read into, per
// power-of-two size class from 4 KiB to 64 MiB: a fresh buffer is zeroed
// by the allocator, which on fast devices cost more CPU than the
// reduction of the rows read (DESIGN.md §Compute stage). A recycled
// buffer is not cleared: a read fills it or fails, and a read past the
// backing file's end clears the rest itself (serve).
var readBufs [15]sync.Pool

// getReadBuf returns a buffer of n bytes at a block-aligned address (its
// capacity may be larger).
func getReadBuf(n int) *readBuf {
	class := 0
	for format.BlockSize<<class < n {
		class++
	}
	if class >= len(readBufs) {
		return &readBuf{b: alignedBuf(n), class: -1}
	}
	if rb, ok := readBufs[class].Get().(*readBuf); ok {
		rb.b = rb.b[:n]
		return rb
	}
	b := alignedBuf(format.BlockSize << class)
	return &readBuf{b: b[:n], class: class}
}

// put recycles the buffer; nothing may use it after. A nil buffer is fine.
func (rb *readBuf) put() {
	if rb == nil || rb.class < 0 {
		return
	}
	rb.b = rb.b[:cap(rb.b)]
	readBufs[rb.class].Put(rb)
}

// carve gives the read pieces their buffers (sizes are multiples of the
// block size) as slices of one aligned, recycled buffer: one per request
// instead of one per piece. Put it back once every piece is done.
func carve(ps []*piece) *readBuf {
	total := 0
	for _, p := range ps {
		total += p.size
	}
	if total == 0 {
		return nil
	}
	buf := getReadBuf(total)
	all := buf.b
	for _, p := range ps {
		n := p.size
		p.buf, all = all[:n:n], all[n:]
	}
	return buf
}

// Device is one SSD-tier device: its backing file, shard space, class
// queues and loaders.
type Device struct {
	ID     format.DevID
	Dir    string
	UUID   [16]byte
	model  Model
	sector int64 // unit of a read: rows cost the sectors they touch
	file   *os.File
	io     backing
	space  *spaceMap

	// Throttle state of the device model: the transfer timeline.
	tmu       sync.Mutex
	busyUntil time.Time

	qmu     sync.Mutex
	qcond   *sync.Cond
	pending classQueues[*piece]
	weights [maxClasses]int
	closing bool
	loaders sync.WaitGroup

	created unix.Stat_t // of the backing file if openDevice created it, else zero (removeIfCreated)

	dirty    atomic.Bool // written since the last Sync
	inflight atomic.Int64

	// Counters.
	readBytes, writeBytes atomic.Uint64
	reads, writes, errors atomic.Uint64
	windowBytes           atomic.Uint64 // read bytes since the migrator's last look
	lat                   hist          // per piece: queue + service
	svc                   hist          // per piece: service only
	moves                 atomic.Uint64

	trace func(p *piece) // tests: called as a loader takes a piece
}

// openDevice opens (creating if needed) DIR's backing file and returns its
// label, or a zero label with fresh=true for a new file.
func openDevice(spec DeviceSpec) (*Device, format.DevLabel, bool, error) {
	var zero format.DevLabel
	st, err := os.Stat(spec.Dir)
	if err != nil {
		return nil, zero, false, fmt.Errorf("SSD directory %s: %w", spec.Dir, unwrapPath(err))
	}
	if !st.IsDir() {
		return nil, zero, false, fmt.Errorf("SSD directory %s is not a directory", spec.Dir)
	}
	dir, _ := filepath.Abs(spec.Dir)
	path := filepath.Join(dir, BackingName)
	var created unix.Stat_t
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	} else if err == nil {
		_ = unix.Fstat(int(f.Fd()), &created)
	}
	if err != nil {
		return nil, zero, false, fmt.Errorf("SSD backing file %s: %w", path, unwrapPath(err))
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, zero, false, fmt.Errorf("SSD backing file %s is in use by another dnnfs daemon", path)
	}
	d := &Device{Dir: dir, model: spec.Model, file: f, created: created}
	fb := &fileBacking{f: f, dioAlign: format.BlockSize, memAlign: format.BlockSize}
	var stx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx); err == nil &&
		stx.Mask&unix.STATX_DIOALIGN != 0 && stx.Dio_offset_align > 0 {
		fb.dioAlign, fb.memAlign = int64(stx.Dio_offset_align), uintptr(max(stx.Dio_mem_align, 1))
	}
	if df, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0); err == nil {
		fb.direct.Store(df)
		fb.dfile = df
	}
	d.io = fb
	d.sector = spec.Model.Sector
	if d.sector == 0 {
		d.sector = min(fb.dioAlign, format.BlockSize)
	}
	d.qcond = sync.NewCond(&d.qmu)
	capacity := spec.Model.Cap
	if capacity == 0 {
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &sfs); err == nil {
			capacity = int64(sfs.Bavail) * sfs.Bsize
		}
		fi, _ := f.Stat()
		if fi != nil {
			capacity += fi.Size() // what we already hold is ours
		}
	}
	capacity = capacity / format.BlockSize * format.BlockSize
	d.space = newSpaceMap(capacity, max(capacity/16, 64<<20))
	d.space.punch = func(off, n int64) error {
		return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	}
	d.space.shrink = func(size int64) error { return f.Truncate(size) }
	buf := make([]byte, format.DevLabelSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		d.close()
		return nil, zero, false, fmt.Errorf("SSD backing file %s: reading its label: %w", path, err)
	}
	if n == 0 {
		return d, zero, true, nil
	}
	if n < format.DevLabelSize {
		d.close()
		return nil, zero, false, fmt.Errorf("SSD backing file %s: %d bytes, too short for a label: not a dnnfs SSD-tier file (move it away)", path, n)
	}
	l, err := format.DecodeDevLabel(buf)
	if err != nil {
		d.close()
		return nil, zero, false, fmt.Errorf("SSD backing file %s: %w", path, err)
	}
	return d, l, false, nil
}

// removeIfCreated removes the backing file of a device that was never
// registered, if openDevice created it and it is still that file and
// empty: a mount that fails leaves the directory as it found it. Call it
// after close.
func (d *Device) removeIfCreated() {
	if d.created.Ino == 0 {
		return
	}
	path := filepath.Join(d.Dir, BackingName)
	var now unix.Stat_t
	if err := unix.Stat(path, &now); err == nil && now.Size == 0 && now.Dev == d.created.Dev && now.Ino == d.created.Ino {
		os.Remove(path)
	}
}

// writeLabel writes and syncs the device label.
func (d *Device) writeLabel(l format.DevLabel) error {
	buf := make([]byte, format.BlockSize)
	l.Encode(buf)
	if _, err := d.file.WriteAt(buf, 0); err != nil {
		return err
	}
	return d.file.Sync()
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// start runs the loaders.
func (d *Device) start() {
	for i := 0; i < d.model.Channels; i++ {
		d.loaders.Add(1)
		go d.loader()
	}
}

// close stops the loaders (after the queued pieces) and closes the files.
func (d *Device) close() {
	d.qmu.Lock()
	d.closing = true
	d.qcond.Broadcast()
	d.qmu.Unlock()
	d.loaders.Wait()
	if fb, ok := d.io.(*fileBacking); ok && fb.dfile != nil {
		fb.dfile.Close()
	}
	d.file.Close()
}

// enqueue adds pieces to the device's class queue.
func (d *Device) enqueue(class int, ps ...*piece) {
	d.qmu.Lock()
	d.pending.push(class, ps...)
	d.qmu.Unlock()
	for range min(len(ps), d.model.Channels) { // more wake-ups than loaders find nothing
		d.qcond.Signal()
	}
}

// next takes the next piece (classQueues.pop), waiting for one.
func (d *Device) next() *piece {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	for d.pending.n == 0 {
		if d.closing {
			return nil
		}
		d.qcond.Wait()
	}
	return d.pending.pop(&d.weights)
}

// queueLen is the pieces waiting (for replica choice and status).
func (d *Device) queueLen() int {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	return d.pending.n
}

func (d *Device) classDepths() [maxClasses]int {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	return d.pending.depths()
}

func (d *Device) loader() {
	defer d.loaders.Done()
	for {
		p := d.next()
		if p == nil {
			return
		}
		d.serve(p)
	}
}

// serve does one piece's I/O under the device model.
func (d *Device) serve(p *piece) {
	if d.trace != nil {
		d.trace(p)
	}
	start := time.Now()
	d.inflight.Add(1)
	p.req.started(start)
	deadline := d.reserve(start, len(p.buf))
	var err error
	var n int
	if p.write {
		n, err = d.io.WriteAt(p.buf, p.off)
		if err == nil && n < len(p.buf) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(p.buf))
		}
		d.dirty.Store(true)
	} else {
		n, err = d.io.ReadAt(p.buf, p.off)
		switch {
		case n == len(p.buf):
			err = nil // io.EOF with a full buffer is fine
		case errors.Is(err, io.EOF):
			// Past the end of the backing file: space never written
			// reads as zeros, like a hole.
			clear(p.buf[n:])
			err = nil
		case err == nil:
			err = fmt.Errorf("short read: %d of %d bytes", n, len(p.buf))
		}
	}
	if !deadline.IsZero() && time.Until(deadline) > 0 { // zero: no model, no clock read
		modelSleeper.until(deadline)
	}
	end := time.Now()
	d.inflight.Add(-1)
	if err != nil {
		d.errors.Add(1)
		err = &IOError{Dev: d.ID, Dir: d.Dir, Off: p.off, Len: len(p.buf), Write: p.write, Err: err}
	}
	if p.write {
		d.writes.Add(1)
		d.writeBytes.Add(uint64(len(p.buf)))
	} else {
		d.reads.Add(1)
		d.readBytes.Add(uint64(len(p.buf)))
		d.windowBytes.Add(uint64(len(p.buf)))
	}
	d.svc.add(end.Sub(start))
	d.lat.add(end.Sub(p.enq))
	p.done(err)
}

// reserve books the transfer on the device model's timeline and returns
// when the piece may complete: latency overlaps across channels, the
// transfer shares the device's bandwidth.
func (d *Device) reserve(now time.Time, n int) time.Time {
	if d.model.BW == 0 && d.model.Lat == 0 {
		return time.Time{}
	}
	done := now.Add(d.model.Lat)
	if d.model.BW > 0 {
		d.tmu.Lock()
		s := now
		if d.busyUntil.After(s) {
			s = d.busyUntil
		}
		d.busyUntil = s.Add(time.Duration(float64(n) / d.model.BW * 1e9))
		if d.busyUntil.After(done) {
			done = d.busyUntil
		}
		d.tmu.Unlock()
	}
	return done
}

// IOError is a failed loader transfer: which device, file and range.
type IOError struct {
	Dev   format.DevID
	Dir   string
	Off   int64
	Len   int
	Write bool
	Err   error
}

func (e *IOError) Error() string {
	op := "read"
	if e.Write {
		op = "write"
	}
	return fmt.Sprintf("SSD device %d (%s/%s): %s of %d bytes at offset %d: %v", e.Dev, e.Dir, BackingName, op, e.Len, e.Off, e.Err)
}

func (e *IOError) Unwrap() error { return e.Err }
