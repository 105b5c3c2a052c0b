// Command dlrm is a synthetic DLRM embedding workload against dnnfs's SSD
// tier (DESIGN.md §Embedding tier). It makes its own pool, SSD-tier
// directories and mounts, fills 26 tables with Criteo-Terabyte-like row
// counts (capped), and measures, in one run:
//
//   - open-loop lookups (Poisson arrivals) per batch size and index skew,
//     swept to saturation: rows/s, pooled bags/s, latency per size class
//     (client side, and the daemon's queueing vs service split);
//   - small requests alone vs under a large-request load, with the
//     size-aware scheduler and with --sched=fifo (same devices, same
//     loaders);
//   - lookups through the request file vs one pread per row through the
//     mount vs direct preads of the backing files without FUSE (ceiling);
//   - bytes read from the backing files per useful byte.
//
// Usage (root, FUSE): go run ./tests/dlrm [-quick] [-bin bin/dnnfs] [-out docs/bench] [-raw bench-out]
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/client"
)

// criteoRows are the 26 categorical features' cardinalities of Criteo
// Terabyte (as used by the DLRM reference), capped by -cap.
var criteoRows = []int{39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346,
	10, 2208, 11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36}

type config struct {
	bin, work, out string
	raw            string // where dlrm.json goes (bench-out, not tracked)
	quick          bool
	cap            int
	dim            int
	devices        int
	model          string
	point          time.Duration
	seed           uint64
	computeOnly    bool // fill, then only the compute-stage comparison
	computeRounds  int
	computeLoads   string // light,heavy
	computeDevices string // native,model,nvme
	nvmeModel      string // a faster device model for the heavy load ("" = none)
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/dnnfs", "dnnfs binary")
	flag.StringVar(&c.work, "work", "/dev/shm/dnnfs-dlrm", "scratch directory (pool, SSD dirs, mount); removed at the end")
	flag.StringVar(&c.out, "out", "docs/bench", "where DLRM.md goes")
	flag.StringVar(&c.raw, "raw", "bench-out", "where dlrm.json, the raw results, goes (not tracked)")
	flag.BoolVar(&c.quick, "quick", false, "small tables and short points (a couple of minutes)")
	flag.IntVar(&c.cap, "cap", 2_000_000, "rows cap per table")
	flag.IntVar(&c.dim, "dim", 64, "embedding dimension (fp32)")
	flag.IntVar(&c.devices, "devices", 2, "SSD-tier devices (directories)")
	flag.StringVar(&c.model, "model", "bw=400MiB/s,lat=400us,channels=4,sector=512", "device model of each SSD for the scheduler experiments")
	flag.DurationVar(&c.point, "point", 3*time.Second, "measuring time per point")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed")
	flag.BoolVar(&c.computeOnly, "compute-only", false, "fill, then run only the compute-stage comparison (reduction on the loaders vs on 1 and 2 compute elements)")
	flag.IntVar(&c.computeRounds, "compute-rounds", 3, "interleaved rounds of the compute-stage comparison (medians are reported)")
	flag.StringVar(&c.computeLoads, "compute-loads", "light,heavy", "loads of the compute-stage comparison: light (the workload above) and heavy (multi-hot: f16 tables, dim 128, weighted sums of ~40 rows)")
	flag.StringVar(&c.computeDevices, "compute-devices", "native,model,nvme", "devices of the compute-stage comparison: native, model (-model), nvme (-nvme-model, heavy load only)")
	flag.StringVar(&c.nvmeModel, "nvme-model", "bw=2GiB/s,lat=90us,channels=4,sector=512", "a faster device model the heavy load also runs under (empty: none)")
	reportOnly := flag.Bool("report-only", false, "rewrite DLRM.md from the dlrm.json in -raw without measuring")
	flag.Parse()
	if *reportOnly {
		var rep report
		b, err := os.ReadFile(filepath.Join(c.raw, "dlrm.json"))
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err == nil {
			err = writeReport(c, rep)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "dlrm:", err)
			os.Exit(1)
		}
		return
	}
	if c.quick {
		c.cap, c.point = 100_000, time.Second
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "dlrm:", err)
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------
// Mounts

// mountSeq numbers the mounts for DLRM_MOUNT_ARGS's {n}.
var mountSeq atomic.Int64

type mount struct {
	c    config
	mnt  string
	cmd  *exec.Cmd
	args []string
}

func (c config) mountWith(args ...string) (*mount, error) {
	m := &mount{c: c, mnt: filepath.Join(c.work, "mnt")}
	os.MkdirAll(m.mnt, 0o755)
	full := append([]string{"mount", "-f", "--pool", filepath.Join(c.work, "pool"), m.mnt, "--log-level", "warn", "--migrate-interval", "0"}, args...)
	for i := 0; i < c.devices; i++ {
		full = append(full, "--ssd", "")
		full[len(full)-1] = filepath.Join(c.work, fmt.Sprintf("ssd%d", i))
	}
	if extra := os.Getenv("DLRM_MOUNT_ARGS"); extra != "" {
		// e.g. --cpuprofile /tmp/cpu-{n}.prof: {n} is the mount's
		// sequence number, so each mount keeps its own profile.
		extra = strings.ReplaceAll(extra, "{n}", fmt.Sprint(mountSeq.Add(1)))
		full = append(full, strings.Fields(extra)...)
	}
	m.args = full
	return m, m.start()
}

// withModel turns every --ssd DIR into DIR:model.
func (m *mount) withModel(model string) {
	for i := range m.args {
		if i > 0 && m.args[i-1] == "--ssd" && model != "" {
			m.args[i] += ":" + model
		}
	}
}

func (m *mount) start() error {
	m.cmd = exec.Command(m.c.bin, m.args...)
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		return err
	}
	for i := 0; i < 200; i++ {
		if _, err := unix.Getxattr(m.mnt, "user.dnnfs.status", nil); err == nil {
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("mount %v did not come up", m.args)
}

func (m *mount) stop() error {
	m.cmd.Process.Signal(syscall.SIGTERM)
	return m.cmd.Wait()
}

// drain waits (up to a minute) until the daemon has no lookup in flight,
// so a saturated point's backlog does not spill into the next one.
func (m *mount) drain() {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		n, err := unix.Getxattr(m.mnt, "user.dnnfs.status", buf)
		if err != nil {
			return
		}
		var s struct {
			Embedding struct {
				Classes []struct {
					InFlight int64 `json:"in_flight_requests"`
				} `json:"classes"`
			} `json:"embedding"`
		}
		json.Unmarshal(buf[:n], &s)
		busy := false
		for _, c := range s.Embedding.Classes {
			busy = busy || c.InFlight > 0
		}
		if !busy {
			return
		}
	}
}

func (m *mount) resetStats() { unix.Setxattr(m.mnt, "user.dnnfs.status", []byte("reset"), 0) }

type classStat struct {
	Name     string `json:"name"`
	Requests uint64 `json:"requests"`
	Queue    lat    `json:"queue"`
	Service  lat    `json:"service"`
	Total    lat    `json:"total"`
}
type lat struct {
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
}
type tierStatus struct {
	Classes []classStat `json:"classes"`
	Compute struct {
		OnLoader        uint64  `json:"on_loader"`
		OnLoaderSeconds float64 `json:"on_loader_seconds"`
		Elements        []struct {
			BusySeconds float64 `json:"busy_seconds"`
			Completions uint64  `json:"completions"`
		} `json:"elements"`
	} `json:"compute"`
	UsefulBytes      uint64  `json:"useful_bytes"`
	BackingReadBytes uint64  `json:"backing_read_bytes"`
	ReadAmp          float64 `json:"read_amplification"`
}

func (m *mount) status() tierStatus {
	buf := make([]byte, 1<<20)
	n, err := unix.Getxattr(m.mnt, "user.dnnfs.status", buf)
	var s struct {
		Embedding tierStatus `json:"embedding"`
	}
	if err == nil {
		json.Unmarshal(buf[:n], &s)
	}
	return s.Embedding
}

// ---------------------------------------------------------------------
// Tables

type table struct {
	name string
	rows int
	path string
}

// heavyDim is the heavy load's embedding dimension (f16 tables: rows of
// 256 bytes, as the light load's dim-64 fp32 rows).
const heavyDim = 128

// value is the deterministic content of row r, element i of table t: the
// benchmark checks sampled results against it.
func value(t, r, i int) float32 { return float32((r*31+i*7+t)%1024) / 64 }

func (c config) tables(prefix string) []table {
	var ts []table
	for i, n := range criteoRows {
		ts = append(ts, table{name: fmt.Sprintf("%s%02d", prefix, i), rows: min(n, c.cap)})
	}
	return ts
}

// f16 is v as an IEEE half: exact for the benchmark's values (0, or a
// multiple of 1/64 below 16: a normal half with at most 10 mantissa bits).
func f16(v float32) uint16 {
	if v == 0 {
		return 0
	}
	b := math.Float32bits(v)
	return uint16(b>>16)&0x8000 | uint16(int(b>>23&0xff)-127+15)<<10 | uint16(b>>13)&0x3ff
}

// fill makes the tables (dtype f32 or f16) and writes every row's values.
func fill(m *mount, ts []table, dim int, dtype string) error {
	es := 4
	if dtype == "f16" {
		es = 2
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ts))
	sem := make(chan struct{}, 2)
	for ti := range ts {
		t := &ts[ti]
		t.path = filepath.Join(m.mnt, t.name)
		f, err := os.Create(t.path)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Setxattr(t.path, "user.dnnfs.table", []byte(fmt.Sprintf("rows=%d,dim=%d,dtype=%s", t.rows, dim, dtype)), 0); err != nil {
			return fmt.Errorf("%s: make table: %w", t.path, err)
		}
		wg.Add(1)
		go func(ti int, t *table) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f, err := os.OpenFile(t.path, os.O_WRONLY, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			chunkRows := max(1, (1<<20)/(dim*es))
			buf := make([]byte, chunkRows*dim*es)
			for r0 := 0; r0 < t.rows; r0 += chunkRows {
				n := min(chunkRows, t.rows-r0)
				for r := 0; r < n; r++ {
					for i := 0; i < dim; i++ {
						v := value(ti, r0+r, i)
						if es == 2 {
							binary.LittleEndian.PutUint16(buf[(r*dim+i)*2:], f16(v))
						} else {
							binary.LittleEndian.PutUint32(buf[(r*dim+i)*4:], math.Float32bits(v))
						}
					}
				}
				if _, err := f.WriteAt(buf[:n*dim*es], int64(r0*dim*es)); err != nil {
					errs <- fmt.Errorf("%s: %w", t.path, err)
					return
				}
			}
			errs <- f.Sync()
		}(ti, t)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ---------------------------------------------------------------------
// Workload

// skew draws row indices: uniform, or Zipf with hot rows scattered over
// the table by a multiplicative permutation.
type skew struct {
	name  string
	alpha float64 // 0 = uniform
}

type indexer struct {
	rows int
	zipf *rand.Zipf
	rng  *rand.Rand
	mult uint64
}

func newIndexer(rows int, s skew, rng *rand.Rand) *indexer {
	ix := &indexer{rows: rows, rng: rng, mult: 1}
	if s.alpha > 0 && rows > 1 {
		ix.zipf = rand.NewZipf(rng, s.alpha, 1, uint64(rows-1))
		// A multiplier coprime with rows permutes the ranks.
		for _, p := range []uint64{1000003, 999983, 7919, 104729} {
			if gcd(p, uint64(rows)) == 1 {
				ix.mult = p
				break
			}
		}
	}
	return ix
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (ix *indexer) next() int64 {
	if ix.zipf == nil {
		return int64(ix.rng.IntN(ix.rows))
	}
	return int64((ix.zipf.Uint64()*ix.mult + 12345) % uint64(ix.rows))
}

// poolingFactor: lognormal with the mean (0: 15), sigma 1, clipped to
// 1..200 (mean 15) or 1..500.
func poolingFactor(rng *rand.Rand, mean float64) int {
	const sigma = 1.0
	hi := 500.0
	if mean == 0 {
		mean, hi = 15, 200
	}
	mu := math.Log(mean) - sigma*sigma/2
	return int(min(hi, max(1, math.Round(math.Exp(mu+sigma*rng.NormFloat64())))))
}

// stream is one open-loop arrival process: batches of a size, at a rate.
type stream struct {
	name  string
	batch int
	rate  float64 // requests per second
	skew  skew
	mode  client.Mode
	// closed > 0 makes the stream closed-loop: at most closed requests
	// in flight (arrivals wait), for measuring capacity without building
	// a backlog.
	closed int
	// The heavy load's: pooling factor mean (0: 15), per-row weights,
	// the tables' dtype (0: f32).
	pooling  float64
	weighted bool
	dtype    client.Dtype
}

type streamResult struct {
	Name      string  `json:"name"`
	Batch     int     `json:"batch"`
	Skew      string  `json:"skew"`
	Offered   float64 `json:"offered_req_s"`
	Achieved  float64 `json:"achieved_req_s"`
	RowsPerS  float64 `json:"rows_s"`
	BagsPerS  float64 `json:"bags_s"`
	MeanRows  float64 `json:"mean_rows_per_request"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	Completed int     `json:"completed"`
	Errors    int     `json:"errors"`
	Checked   int     `json:"checked"`
	Backlog   int     `json:"unfinished"`
	Saturated bool    `json:"saturated"`
}

type point struct {
	Label   string         `json:"label"`
	Sched   string         `json:"sched"`
	Streams []streamResult `json:"streams"`
	Server  tierStatus     `json:"server"`
}

// runPoint drives the streams open-loop for d and returns per-stream
// results (latency measured from each request's scheduled arrival).
func runPoint(m *mount, ts []table, dim int, streams []stream, d time.Duration, seed uint64) ([]streamResult, error) {
	start := time.Now().Add(20 * time.Millisecond)
	p := &pointRun{ts: ts, dim: dim, seed: seed, start: start, end: start.Add(d), stats: make([]*streamStats, len(streams))}
	for si, s := range streams {
		r := &streamStats{pending: map[uint64]inflight{}}
		p.stats[si] = r
		hs, err := p.openHandles(r)
		if err != nil {
			return nil, err
		}
		p.senders.Add(1)
		go func(si int, s stream, hs []*os.File) {
			defer p.senders.Done()
			p.send(si, s, r, hs)
		}(si, s, hs)
	}
	if os.Getenv("DLRM_DEBUG") != "" {
		go p.debugLog()
	}
	p.senders.Wait()
	elapsed := p.drain()
	p.closeHandles()
	if e := p.firstErr.Load(); e != nil {
		return nil, *e
	}
	var out []streamResult
	for si, s := range streams {
		out = append(out, p.stats[si].result(s, elapsed))
	}
	return out, nil
}

// pointRun is one runPoint under way: what its streams share.
type pointRun struct {
	ts         []table
	dim        int
	seed       uint64
	start, end time.Time
	stats      []*streamStats
	files      []*os.File // every request-file handle, closed at the end
	senders    sync.WaitGroup
	readers    sync.WaitGroup
	firstErr   atomic.Pointer[error]
	tagSeq     atomic.Uint64
}

// inflight is a submitted request awaiting its result.
type inflight struct {
	at    time.Time // scheduled arrival
	rows  int
	bags  int
	check func([]float32) bool
}

// streamStats is one stream's counters, shared by its sender and readers.
type streamStats struct {
	mu        sync.Mutex
	lats      []time.Duration
	rows      int
	bags      int
	errs      int
	checked   int
	submitted int
	pending   map[uint64]inflight
}

// openHandles opens one request-file handle per table for a stream and
// starts its reader.
func (p *pointRun) openHandles(r *streamStats) ([]*os.File, error) {
	hs := make([]*os.File, len(p.ts))
	for ti := range p.ts {
		f, err := os.OpenFile(p.ts[ti].path+".lookup", os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		hs[ti] = f
		p.files = append(p.files, f)
		p.readers.Add(1)
		go func(f *os.File) {
			defer p.readers.Done()
			r.read(f)
		}(f)
	}
	return hs, nil
}

// read collects the results of handle f until it is closed, checking
// the first 20 of the stream's against the tables' known values.
func (r *streamStats) read(f *os.File) {
	buf := make([]byte, 16<<20)
	for {
		n, err := f.Read(buf)
		if err != nil || n == 0 {
			return // closed, or done
		}
		now := time.Now()
		res, err := client.DecodeResult(buf[:n])
		r.mu.Lock()
		in, ok := r.pending[res.Tag]
		delete(r.pending, res.Tag)
		if err != nil || !ok || res.Status != 0 {
			r.errs++
			r.mu.Unlock()
			continue
		}
		r.lats = append(r.lats, now.Sub(in.at))
		r.rows += in.rows
		r.bags += in.bags
		doCheck := in.check != nil && r.checked < 20
		r.mu.Unlock()
		if doCheck {
			vals, err := res.Float32s()
			ok := err == nil && in.check(vals)
			r.mu.Lock()
			r.checked++
			if !ok {
				r.errs++
			}
			r.mu.Unlock()
		}
	}
}

// send submits stream s's requests until the point's end, the tables in
// turn, at Poisson arrivals (or, closed-loop, as answers free a slot).
func (p *pointRun) send(si int, s stream, r *streamStats, hs []*os.File) {
	rng := rand.New(rand.NewPCG(p.seed, uint64(si)))
	ixs := make([]*indexer, len(p.ts))
	for ti := range p.ts {
		ixs[ti] = newIndexer(p.ts[ti].rows, s.skew, rng)
	}
	next := p.start
	ti := 0
	for {
		if s.closed > 0 {
			next = time.Now() // closed loop: arrival = submission
		} else {
			next = next.Add(time.Duration(rng.ExpFloat64() / s.rate * 1e9))
		}
		if next.After(p.end) {
			return
		}
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		p.waitSlot(s, r)
		ti = (ti + 1) % len(p.ts)
		idx, offs, ws := lookupBags(rng, ixs[ti], s)
		dtype := s.dtype
		if dtype == 0 {
			dtype = client.F32
		}
		tag := p.tagSeq.Add(1)
		req, err := client.EncodeLookup(tag, s.mode, dtype, idx, offs, ws)
		if err != nil {
			p.firstErr.CompareAndSwap(nil, &err)
			return
		}
		check := lookupCheck(ti, p.dim, s.mode, idx, offs, ws)
		r.mu.Lock()
		r.pending[tag] = inflight{at: next, rows: len(idx), bags: len(offs), check: check}
		r.submitted++
		r.mu.Unlock()
		if _, err := hs[ti].Write(req); err != nil {
			if errors.Is(err, syscall.EAGAIN) {
				r.mu.Lock()
				delete(r.pending, tag)
				r.errs++
				r.mu.Unlock()
				continue
			}
			p.firstErr.CompareAndSwap(nil, &err)
			return
		}
	}
}

// waitSlot holds a closed-loop stream until fewer than s.closed of its
// requests are in flight, or the point is over.
func (p *pointRun) waitSlot(s stream, r *streamStats) {
	for s.closed > 0 {
		r.mu.Lock()
		n := len(r.pending)
		r.mu.Unlock()
		if n < s.closed || time.Now().After(p.end) {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// lookupBags draws one request's bags: s.batch bags of a pooling factor
// of rows each, with weights for a weighted stream.
func lookupBags(rng *rand.Rand, ix *indexer, s stream) (idx, offs []int64, ws []float32) {
	for b := 0; b < s.batch; b++ {
		offs = append(offs, int64(len(idx)))
		for k := poolingFactor(rng, s.pooling); k > 0; k-- {
			idx = append(idx, ix.next())
			if s.weighted {
				ws = append(ws, float32(rng.IntN(64)+1)/64) // exact in f32: the check is tight
			}
		}
	}
	return idx, offs, ws
}

// lookupCheck checks a result's first bag, every 17th value, against the
// table's known values.
func lookupCheck(tab, dim int, mode client.Mode, idx, offs []int64, ws []float32) func([]float32) bool {
	return func(v []float32) bool {
		if len(v) != len(offs)*dim {
			return false
		}
		for i := 0; i < dim; i += 17 {
			var want float64
			end := len(idx)
			if len(offs) > 1 {
				end = int(offs[1])
			}
			for k := 0; k < end; k++ {
				w := 1.0
				if ws != nil {
					w = float64(ws[k])
				}
				want += w * float64(value(tab, int(idx[k]), i))
			}
			if mode == client.Mean {
				want /= float64(end)
			}
			if math.Abs(float64(v[i])-want) > 1e-3*(1+math.Abs(want)) {
				return false
			}
		}
		return true
	}
}

// debugLog prints every stream's counters once a second (DLRM_DEBUG).
func (p *pointRun) debugLog() {
	for {
		time.Sleep(time.Second)
		for si, r := range p.stats {
			r.mu.Lock()
			fmt.Fprintf(os.Stderr, "debug: stream %d submitted %d completed %d pending %d errs %d\n", si, r.submitted, len(r.lats), len(r.pending), r.errs)
			r.mu.Unlock()
		}
	}
}

// drain waits for the requests still in flight and returns the time the
// point took. Completions after the end still count toward latency (they
// were offered in the window) but not toward throughput past a grace time.
func (p *pointRun) drain() time.Duration {
	grace := time.Now().Add(2 * time.Second)
	for _, r := range p.stats {
		for {
			r.mu.Lock()
			n := len(r.pending)
			r.mu.Unlock()
			if n == 0 || time.Now().After(grace) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return time.Since(p.start)
}

// closeHandles closes every handle and waits (10 s at most) for the
// readers to see it.
func (p *pointRun) closeHandles() {
	for _, f := range p.files {
		// A close() of any descriptor of the handle wakes its blocked
		// reader with EOF; Go defers f.Close's close(2) until the Read
		// returns, so close a duplicate first.
		if d, err := unix.Dup(int(f.Fd())); err == nil {
			unix.Close(d)
		}
		f.Close()
	}
	done := make(chan struct{})
	go func() { p.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// result is stream s's rates and latency quantiles over elapsed.
func (r *streamStats) result(s stream, elapsed time.Duration) streamResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	sr := streamResult{Name: s.name, Batch: s.batch, Skew: s.skew.name, Offered: s.rate, Completed: len(r.lats),
		Errors: r.errs, Checked: r.checked, Backlog: len(r.pending)}
	sr.Achieved = float64(len(r.lats)) / elapsed.Seconds()
	sr.RowsPerS = float64(r.rows) / elapsed.Seconds()
	sr.BagsPerS = float64(r.bags) / elapsed.Seconds()
	if len(r.lats) > 0 {
		sr.MeanRows = float64(r.rows) / float64(len(r.lats))
	}
	// Requests never answered count as slow as the window.
	for range r.pending {
		r.lats = append(r.lats, elapsed)
	}
	sort.Slice(r.lats, func(i, j int) bool { return r.lats[i] < r.lats[j] })
	q := func(p float64) float64 {
		if len(r.lats) == 0 {
			return 0
		}
		return float64(r.lats[min(len(r.lats)-1, int(p*float64(len(r.lats))))]) / 1e3
	}
	sr.P50us, sr.P99us, sr.P999us = q(0.5), q(0.99), q(0.999)
	sr.Saturated = sr.Achieved < 0.9*s.rate || len(r.pending) > 0
	return sr
}

// ---------------------------------------------------------------------
// Per-row preads and the backing-file ceiling

// rowReads does random single-row reads with threads for d: through the
// mount (pread of one row of a table file), or straight from the backing
// files (the translation table from user.dnnfs.shards, one aligned 4 KiB
// O_DIRECT read per row: what the daemon's loaders do, without FUSE).
func rowReads(ts []table, dim int, threads int, d time.Duration, direct bool, ssdDirs []string) (float64, error) {
	type shardLoc struct {
		Shard    int    `json:"shard"`
		FirstRow uint64 `json:"first_row"`
		EndRow   uint64 `json:"end_row"`
		Dev      int    `json:"device"`
		Off      int64  `json:"offset"`
	}
	shards := make([][]shardLoc, len(ts))
	var fds []int
	if direct {
		for i := range ts {
			buf := make([]byte, 8<<20)
			n, err := unix.Getxattr(ts[i].path, "user.dnnfs.shards", buf)
			if err != nil {
				return 0, err
			}
			if err := json.Unmarshal(buf[:n], &shards[i]); err != nil {
				return 0, err
			}
		}
		for _, dir := range ssdDirs {
			fd, err := unix.Open(filepath.Join(dir, "dnnfs-tier.dat"), unix.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				fd, err = unix.Open(filepath.Join(dir, "dnnfs-tier.dat"), unix.O_RDONLY, 0)
			}
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			fds = append(fds, fd)
		}
	}
	files := make([]*os.File, len(ts))
	for i := range ts {
		f, err := os.Open(ts[i].path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		files[i] = f
	}
	rb := dim * 4
	var total atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 77))
			raw := make([]byte, 8192)
			off := (4096 - int(uintptr(unsafe.Pointer(&raw[0])))%4096) % 4096
			blk := raw[off : off+4096]
			row := make([]byte, rb)
			n := 0
			for time.Now().Before(end) {
				for k := 0; k < 64; k++ {
					ti := rng.IntN(len(ts))
					r := rng.IntN(ts[ti].rows)
					if !direct {
						files[ti].ReadAt(row, int64(r*rb))
					} else {
						s := shards[ti][sort.Search(len(shards[ti]), func(i int) bool { return shards[ti][i].EndRow > uint64(r) })]
						pos := s.Off + int64(uint64(r)-s.FirstRow)*int64(rb)
						a := pos / 4096 * 4096
						unix.Pread(fds[s.Dev-1], blk, a)
						if pos+int64(rb) > a+4096 { // row crosses a block
							unix.Pread(fds[s.Dev-1], blk, a+4096)
						}
					}
					n++
				}
			}
			total.Add(int64(n))
		}(w)
	}
	wg.Wait()
	return float64(total.Load()) / d.Seconds(), nil
}

// ---------------------------------------------------------------------

type report struct {
	When     string             `json:"when"`
	Config   map[string]any     `json:"config"`
	Points   []point            `json:"points"`
	Compare  map[string]float64 `json:"compare"`
	Fill     map[string]float64 `json:"fill"`
	Commands []string           `json:"commands"`
}

func run(c config) error {
	os.RemoveAll(c.work)
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(c.work)
	ssd, err := makeDevices(c)
	if err != nil {
		return err
	}
	rep := report{When: time.Now().UTC().Format(time.RFC3339), Compare: map[string]float64{}, Fill: map[string]float64{},
		Config: map[string]any{"tables": len(criteoRows), "cap": c.cap, "dim": c.dim, "dtype": "f32", "devices": c.devices,
			"model": c.model, "point": c.point.String(), "quick": c.quick, "cpus": nproc()}}
	ts := c.tables("emb")
	rep.Config["total_rows"] = sumRows(ts)
	rep.Config["total_bytes"] = sumRows(ts) * c.dim * 4

	// Fill under a native (unthrottled) mount.
	m, err := c.mountWith()
	if err != nil {
		return err
	}
	hts, err := fillAll(c, m, ts, &rep)
	if err != nil {
		m.stop()
		return err
	}
	if c.computeOnly {
		m.stop()
		if err := computePhase(c, ts, hts, &rep, logf); err != nil {
			return err
		}
		rep.Commands = []string{strings.Join(os.Args, " ")}
		return writeReport(c, rep)
	}
	err = nativePaths(c, m, ts, ssd, &rep)
	m.stop()
	if err != nil {
		return err
	}
	// 2. Device models: sweeps, skew, mixed small/large, size vs fifo.
	// The size scheduler's run measures the capacity the fifo one's
	// rates are set from.
	var capRows float64
	for _, sched := range []string{"size", "fifo"} {
		if err := schedulerPoints(c, sched, ts, &rep, &capRows); err != nil {
			return err
		}
	}
	// 3. The compute stage: the reduction on the loaders vs on elements.
	if err := computePhase(c, ts, hts, &rep, logf); err != nil {
		return err
	}
	if v := rep.Compare["small_p99_mixed_us_size"]; v > 0 {
		rep.Compare["fifo_over_size_small_p99_mixed"] = rep.Compare["small_p99_mixed_us_fifo"] / v
	}
	if v := rep.Compare["mixed_rows_s_fifo"]; v > 0 {
		rep.Compare["size_over_fifo_throughput_mixed"] = rep.Compare["mixed_rows_s_size"] / v
	}
	rep.Commands = []string{strings.Join(os.Args, " ")}
	return writeReport(c, rep)
}

func logf(f string, a ...any) { fmt.Fprintf(os.Stderr, "dlrm: "+f+"\n", a...) }

func sumRows(ts []table) int {
	var n int
	for _, t := range ts {
		n += t.rows
	}
	return n
}

// makeDevices makes the SSD-tier directories and the pool under c.work.
func makeDevices(c config) ([]string, error) {
	var ssd []string
	for i := 0; i < c.devices; i++ {
		d := filepath.Join(c.work, fmt.Sprintf("ssd%d", i))
		os.Mkdir(d, 0o755)
		ssd = append(ssd, d)
	}
	if out, err := exec.Command(c.bin, "mkfs", "--pool", filepath.Join(c.work, "pool"), "--size", "256MiB").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkfs: %v: %s", err, out)
	}
	return ssd, nil
}

// fillAll fills the tables ts through mount m, timing it, then, when the
// heavy compute load runs, its tables (the same row counts, f16, dim
// 128), which it returns.
func fillAll(c config, m *mount, ts []table, rep *report) ([]table, error) {
	totalRows := sumRows(ts)
	t0 := time.Now()
	if err := fill(m, ts, c.dim, "f32"); err != nil {
		return nil, err
	}
	fillS := time.Since(t0).Seconds()
	rep.Fill["seconds"] = fillS
	rep.Fill["MiB_s"] = float64(totalRows*c.dim*4) / (1 << 20) / fillS
	logf("filled %d tables, %d rows (%.1f GiB) in %.1fs", len(ts), totalRows, float64(totalRows*c.dim*4)/(1<<30), fillS)
	for i := range ts {
		ts[i].path = filepath.Join(m.mnt, ts[i].name)
	}
	var hts []table
	if strings.Contains(c.computeLoads, "heavy") {
		hts = c.tables("mh")
		t0 := time.Now()
		if err := fill(m, hts, heavyDim, "f16"); err != nil {
			return nil, err
		}
		for i := range hts {
			hts[i].path = filepath.Join(m.mnt, hts[i].name)
		}
		logf("filled %d f16 tables, dim %d, in %.1fs", len(hts), heavyDim, time.Since(t0).Seconds())
	}
	return hts, nil
}

// nativePaths is part 1: the request file vs per-row preads vs the
// backing files, on the native devices of mount m.
func nativePaths(c config, m *mount, ts []table, ssd []string, rep *report) error {
	threads := 8
	perRow, err := rowReads(ts, c.dim, threads, c.point, false, ssd)
	if err != nil {
		return err
	}
	ceiling, err := rowReads(ts, c.dim, threads, c.point, true, ssd)
	if err != nil {
		return err
	}
	m.resetStats()
	// Closed-ish loop through the request file: high offered rate of
	// batch-64 gathers; throughput is what completes.
	sat, err := runPoint(m, ts, c.dim, []stream{{name: "b64", batch: 64, rate: 1e6, skew: skew{"uniform", 0}, mode: client.Sum, closed: 32}}, c.point, c.seed)
	if err != nil {
		return err
	}
	st := m.status()
	rep.Compare["rows_s_request_file"] = sat[0].RowsPerS
	rep.Compare["rows_s_pread_per_row"] = perRow
	rep.Compare["rows_s_backing_direct"] = ceiling
	rep.Compare["request_file_over_pread"] = sat[0].RowsPerS / perRow
	rep.Compare["request_file_over_ceiling"] = sat[0].RowsPerS / ceiling
	rep.Compare["read_amplification_uniform_b64"] = st.ReadAmp
	rep.Points = append(rep.Points, point{Label: "native: request file, batch 64 sum, 32 in flight", Sched: "size", Streams: sat, Server: st})
	logf("native: request file %.0f rows/s, per-row pread %.0f rows/s, backing direct %.0f rows/s", sat[0].RowsPerS, perRow, ceiling)
	return nil
}

// schedPoints is part 2's points under one scheduler, on a mount with
// the device model.
type schedPoints struct {
	c     config
	m     *mount
	sched string
	ts    []table
	rep   *report
}

// schedulerPoints mounts with scheduler sched and the device model and
// runs its points; the size scheduler's also measure the capacity
// (*capRows) and sweep the batch sizes and skews.
func schedulerPoints(c config, sched string, ts []table, rep *report, capRows *float64) error {
	m, err := c.mountWith("--sched", sched)
	if err != nil {
		return err
	}
	m.stop()
	m.withModel(c.model)
	if err := m.start(); err != nil {
		return err
	}
	defer m.stop()
	s := &schedPoints{c: c, m: m, sched: sched, ts: ts, rep: rep}
	if sched == "size" {
		if *capRows, err = s.calibrate(); err != nil {
			return err
		}
		if err := s.sweeps(*capRows); err != nil {
			return err
		}
	}
	return s.smallUnderLarge(*capRows)
}

// pt runs one point with streams ss and records it under label.
func (s *schedPoints) pt(label string, ss []stream) ([]streamResult, error) {
	s.m.drain()
	s.m.resetStats()
	res, err := runPoint(s.m, s.ts, s.c.dim, ss, s.c.point, s.c.seed)
	if err != nil {
		return nil, err
	}
	st := s.m.status()
	s.rep.Points = append(s.rep.Points, point{Label: label, Sched: s.sched, Streams: res, Server: st})
	var parts []string
	for _, r := range res {
		parts = append(parts, fmt.Sprintf("%s %.0f/%.0f req/s p99 %.0fus", r.Name, r.Achieved, r.Offered, r.P99us))
	}
	logf("%s %s: %s", s.sched, label, strings.Join(parts, "; "))
	return res, nil
}

// calibrate returns the capacity, in rows/s: batch-64 lookups offered
// far beyond what the devices serve; what completes is the saturation
// rate.
func (s *schedPoints) calibrate() (float64, error) {
	res, err := s.pt("calibrate: batch 64, 32 in flight", []stream{{name: "b64", batch: 64, rate: 1e6, skew: skew{"uniform", 0}, mode: client.Sum, closed: 32}})
	if err != nil {
		return 0, err
	}
	capRows := res[0].RowsPerS
	s.rep.Compare["capacity_rows_s_model"] = capRows
	logf("capacity under the device model: %.0f rows/s", capRows)
	return capRows, nil
}

// sweeps raises the rate of each batch size (uniform) until it
// saturates, then runs the skews.
func (s *schedPoints) sweeps(capRows float64) error {
	for _, b := range []int{1, 4, 16, 64} {
		rate := 0.25 * capRows / (15 * float64(b))
		for k := 0; k < 6; k++ {
			res, err := s.pt(fmt.Sprintf("sweep batch %d", b), []stream{{name: fmt.Sprintf("b%d", b), batch: b, rate: rate, skew: skew{"uniform", 0}, mode: client.Sum}})
			if err != nil {
				return err
			}
			if res[0].Saturated {
				break
			}
			rate *= 1.5
		}
	}
	for _, sk := range []skew{{"zipf1.05", 1.05}, {"zipf1.09", 1.09}, {"zipf1.15", 1.15}} {
		for _, b := range []int{4, 64} {
			if _, err := s.pt("skew "+sk.name, []stream{{name: fmt.Sprintf("b%d", b), batch: b, rate: 0.5 * capRows / (15 * float64(b)), skew: sk, mode: client.Sum}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// smallUnderLarge runs small requests alone, then under a saturating
// large load. Small requests at 30% of capacity alone; then with large
// ones offering 100% more: the devices are saturated.
func (s *schedPoints) smallUnderLarge(capRows float64) error {
	small := stream{name: "small b4", batch: 4, rate: 0.3 * capRows / 60, skew: skew{"uniform", 0}, mode: client.Sum}
	large := stream{name: "large b64", batch: 64, rate: 1.0 * capRows / 960, skew: skew{"uniform", 0}, mode: client.Sum}
	alone, err := s.pt("small alone", []stream{small})
	if err != nil {
		return err
	}
	mixed, err := s.pt("small + large", []stream{small, large})
	if err != nil {
		return err
	}
	rep, sched := s.rep, s.sched
	rep.Compare["small_p99_alone_us_"+sched] = alone[0].P99us
	rep.Compare["small_p99_mixed_us_"+sched] = mixed[0].P99us
	rep.Compare["small_p99_mixed_over_alone_"+sched] = mixed[0].P99us / alone[0].P99us
	rep.Compare["mixed_rows_s_"+sched] = mixed[0].RowsPerS + mixed[1].RowsPerS
	st := rep.Points[len(rep.Points)-1].Server
	if len(st.Classes) > 0 {
		rep.Compare["server_small_queue_p99_us_"+sched] = st.Classes[0].Queue.P99
		rep.Compare["server_small_service_p99_us_"+sched] = st.Classes[0].Service.P99
	}
	return nil
}

func nproc() int {
	var s unix.CPUSet
	if unix.SchedGetaffinity(0, &s) == nil {
		return s.Count()
	}
	return 0
}

// computeVariants are the compute-stage settings compared: the reduction
// on the loader that read a lookup's last piece (as before the compute
// stage), and on 1 and 2 CPU processing elements.
var computeVariants = []struct{ name, arg string }{{"loader", "0"}, {"elements1", "1"}, {"elements2", "2"}}

// computeLoad is a load of the compute-stage comparison: its tables and
// its two closed-loop streams, small (latency) and large (throughput).
type computeLoad struct {
	name         string // light, heavy
	key          string // report keys: compute_<key><devices>_...
	ts           []table
	dim          int
	small, large stream
}

// computeLoads: light is the DLRM workload above (fp32, dim 64, plain
// sums of ~15 rows: a reduction of a few % of the loaders' time); heavy is
// a multi-hot DLRM (DLRM-v2 style: tens to hundreds of rows per bag, f16
// tables widened to f32, dim 128, weighted sums of ~40 rows), whose
// reduction is ~4x the light one's per lookup (BenchmarkReduce). Its small stream is batch
// 1 (~40 rows: the small size class, like the light load's batch 4).
func computeLoads(c config, ts, hts []table) []computeLoad {
	var out []computeLoad
	if strings.Contains(c.computeLoads, "light") {
		out = append(out, computeLoad{name: "light", key: "", ts: ts, dim: c.dim,
			small: stream{name: "small b4", batch: 4, rate: 1e6, skew: skew{"uniform", 0}, mode: client.Sum, closed: 8},
			large: stream{name: "large b64", batch: 64, rate: 1e6, skew: skew{"uniform", 0}, mode: client.Sum, closed: 16}})
	}
	if hts != nil {
		out = append(out, computeLoad{name: "heavy", key: "heavy_", ts: hts, dim: heavyDim,
			small: stream{name: "small b1", batch: 1, rate: 1e6, skew: skew{"uniform", 0}, mode: client.Sum, closed: 8, pooling: 40, weighted: true, dtype: client.F16},
			large: stream{name: "large b64", batch: 64, rate: 1e6, skew: skew{"uniform", 0}, mode: client.Sum, closed: 16, pooling: 40, weighted: true, dtype: client.F16}})
	}
	return out
}

// computePhase measures the mixed DLRM loads (a small and a large stream
// of sum lookups, closed loop) with each compute variant, interleaved
// over rounds (the machine is shared and noisy: each round runs every
// variant, the start rotating), and reports medians of pooled rows/s and
// of the small stream's p99, with the machine's CPU use and the loaders'
// time spent pooling.
//
// Each load runs on native devices (the CPU is the bottleneck) and under
// the device model (the loaders are: a reduction on a loader holds it);
// the heavy load also under -nvme-model, a faster device whose I/O leaves
// the reduction a larger share of a loader's time.
func computePhase(c config, ts, hts []table, rep *report, logf func(string, ...any)) error {
	for _, ld := range computeLoads(c, ts, hts) {
		devs := []struct{ name, model string }{{"native", ""}, {"model", c.model}}
		if ld.name == "heavy" && c.nvmeModel != "" {
			devs = append(devs, struct{ name, model string }{"nvme", c.nvmeModel})
			rep.Config["nvme_model"] = c.nvmeModel
		}
		for _, dev := range devs {
			if !strings.Contains(c.computeDevices, dev.name) {
				continue
			}
			if err := computeRun(c, ld, rep, logf, dev.name, dev.model); err != nil {
				return err
			}
		}
	}
	return nil
}

// cpuTimes is the machine's busy and total CPU time (/proc/stat, ticks).
func cpuTimes() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	for i, v := range f[1:] {
		var x float64
		fmt.Sscan(v, &x)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}

// procCPU is a process's user+system CPU seconds (/proc/PID/stat).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ut, st float64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return (ut + st) / 100 // USER_HZ
}

func computeRun(c config, ld computeLoad, rep *report, logf func(string, ...any), dev, model string) error {
	rows := map[string][]float64{}
	p99 := map[string][]float64{}
	busy := map[string][]float64{}
	daemon := map[string][]float64{}
	clientCPU := map[string][]float64{}
	pooling := map[string][]float64{}
	for round := 0; round < max(c.computeRounds, 1); round++ {
		for k := range computeVariants {
			v := computeVariants[(k+round)%len(computeVariants)]
			m, err := c.mountWith("--compute-elements", v.arg)
			if err != nil {
				return err
			}
			if model != "" {
				m.stop()
				m.withModel(model)
				if err := m.start(); err != nil {
					return err
				}
			}
			m.resetStats()
			b0, t0 := cpuTimes()
			d0, c0 := procCPU(m.cmd.Process.Pid), procCPU(os.Getpid())
			w0 := time.Now()
			res, err := runPoint(m, ld.ts, ld.dim, []stream{ld.small, ld.large}, c.point, c.seed+uint64(round))
			wall := time.Since(w0).Seconds()
			b1, t1 := cpuTimes()
			d1, c1 := procCPU(m.cmd.Process.Pid), procCPU(os.Getpid())
			st := m.status()
			m.stop()
			if err != nil {
				return err
			}
			pooled := res[0].RowsPerS + res[1].RowsPerS
			rows[v.name] = append(rows[v.name], pooled)
			p99[v.name] = append(p99[v.name], res[0].P99us)
			if t1 > t0 {
				busy[v.name] = append(busy[v.name], (b1-b0)/(t1-t0))
			}
			daemon[v.name] = append(daemon[v.name], (d1-d0)/wall)
			clientCPU[v.name] = append(clientCPU[v.name], (c1-c0)/wall)
			// CPU seconds per second pooling: on the loaders, on the elements.
			el := 0.0
			for _, e := range st.Compute.Elements {
				el += e.BusySeconds
			}
			pooling[v.name] = append(pooling[v.name], (st.Compute.OnLoaderSeconds+el)/wall)
			rep.Points = append(rep.Points, point{Label: fmt.Sprintf("compute %s load %s, %s devices (--compute-elements %s), round %d: %s + %s, closed loop", ld.name, v.name, dev, v.arg, round+1, ld.small.name, ld.large.name),
				Sched: "size", Streams: res, Server: st})
			logf("compute %s %s %s round %d: pooled %.0f rows/s, small p99 %.0fus, machine CPU %.0f%%, daemon %.2f cores, client %.2f, pooling %.3f cores (on loaders %.2fs) (errors %d/%d, checked %d/%d)",
				ld.name, dev, v.name, round+1, pooled, res[0].P99us, 100*busy[v.name][len(busy[v.name])-1], daemon[v.name][len(daemon[v.name])-1], clientCPU[v.name][len(clientCPU[v.name])-1],
				pooling[v.name][len(pooling[v.name])-1], st.Compute.OnLoaderSeconds, res[0].Errors, res[1].Errors, res[0].Checked, res[1].Checked)
		}
	}
	median := func(xs []float64) float64 {
		ys := append([]float64(nil), xs...)
		sort.Float64s(ys)
		if len(ys) == 0 {
			return 0
		}
		if len(ys)%2 == 1 {
			return ys[len(ys)/2]
		}
		return (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
	}
	k := "compute_" + ld.key + dev + "_"
	for _, v := range computeVariants {
		rep.Compare[k+"rows_s_"+v.name] = median(rows[v.name])
		rep.Compare[k+"small_p99_us_"+v.name] = median(p99[v.name])
		rep.Compare[k+"cpu_busy_"+v.name] = median(busy[v.name])
		rep.Compare[k+"daemon_cores_"+v.name] = median(daemon[v.name])
		rep.Compare[k+"client_cores_"+v.name] = median(clientCPU[v.name])
		rep.Compare[k+"pooling_cores_"+v.name] = median(pooling[v.name])
	}
	rep.Compare["compute_rounds"] = float64(max(c.computeRounds, 1))
	if base := rep.Compare[k+"rows_s_loader"]; base > 0 {
		for _, v := range computeVariants[1:] {
			rep.Compare[k+"rows_s_"+v.name+"_over_loader"] = rep.Compare[k+"rows_s_"+v.name] / base
			rep.Compare[k+"small_p99_"+v.name+"_over_loader"] = rep.Compare[k+"small_p99_us_"+v.name] / rep.Compare[k+"small_p99_us_loader"]
		}
	}
	return nil
}
