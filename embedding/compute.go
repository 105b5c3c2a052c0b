package embedding

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dnnfs/dnnfs/embedding/wire"
	"github.com/dnnfs/dnnfs/format"
)

// The compute stage (DESIGN.md §Compute stage): once the loaders have read
// a lookup's rows, the follow-up computation on them (gather, pooling,
// dtype conversion) is a compute request that the compute scheduler
// places on a processing element, so a loader only reads.

// OpSet is a set of operations: what a compute request needs, or what a
// processing element can run.
type OpSet uint8

const (
	// OpGather copies each index's row into the result, in the table's dtype.
	OpGather OpSet = 1 << iota
	// OpSum adds each bag's rows into one float32 vector.
	OpSum
	// OpMean divides a bag's sum by its row count.
	OpMean
	// OpWeighted scales each row by its per-sample weight before the sum.
	OpWeighted
	// OpConvert widens f16 and bf16 rows to float32 (any pooling of them).
	OpConvert

	// OpsAll is every op: what a CPU element runs.
	OpsAll = OpGather | OpSum | OpMean | OpWeighted | OpConvert
)

// Has reports whether s holds every op of o.
func (s OpSet) Has(o OpSet) bool { return s&o == o }

func (s OpSet) String() string {
	names := []string{"gather", "sum", "mean", "weighted", "convert"}
	out := ""
	for i, n := range names {
		if s&(1<<i) != 0 {
			if out != "" {
				out += ","
			}
			out += n
		}
	}
	return out
}

// computeRequest is the follow-up of one lookup: its rows as the loaders
// read them (one copy per distinct index, in index order) and what to do
// with them.
type computeRequest struct {
	tag   uint64 // the lookup's (callers' tags repeat across handles: id is the scheduler's)
	id    uint64 // assigned by the compute scheduler, unique; the ready queue names it
	ops   OpSet
	req   *wire.Request
	dtype uint8
	dim   int
	rb    int
	uniq  []int64 // the distinct indices, sorted
	at    []int32 // per index, its row's place in uniq and rows (nil: found by binary search)
	rows  []byte  // len(uniq) rows
	done  func(result []byte)
	// release, if set, recycles rows once the result is computed.
	release func()

	placed *computeElement // the element whose queue holds or held it
	enq    time.Time
	class  int // size class of its rows (the scheduler's): which of an element's queues
}

// opsFor is what a lookup of mode over dtype rows needs.
func opsFor(r *wire.Request, dtype uint8) OpSet {
	if r.Mode == wire.Gather {
		return OpGather
	}
	ops := OpSum
	if r.Mode == wire.Mean {
		ops |= OpMean
	}
	if r.Weights != nil {
		ops |= OpWeighted
	}
	if dtype != format.DtypeF32 {
		ops |= OpConvert
	}
	return ops
}

// element is a processing element: a kind, the ops it can run, and run,
// which computes a request's encoded result. run is called by the
// element's worker goroutine only, one request at a time.
type element interface {
	kind() string
	ops() OpSet
	run(r *computeRequest) []byte
}

// cpuElement is one CPU worker: the unrolled kernels below.
type cpuElement struct{}

func (cpuElement) kind() string                 { return "cpu" }
func (cpuElement) ops() OpSet                   { return OpsAll }
func (cpuElement) run(r *computeRequest) []byte { return reduceFast(r) }

// ComputeAuto sizes the CPU elements from the cores (DefaultComputeElements).
const ComputeAuto = -1

// DefaultComputeElements is the CPU elements a mount gets by default:
// GOMAXPROCS minus one core for the FUSE server (request decoding and the
// copies of results to the kernel) minus half a core per device for its
// loaders (they mostly wait on the device, but copy rows out of the read
// buffers). None when no core is left: an element without a core of its
// own only adds a hand-off, and as one goroutine among the loaders on
// saturated cores it serialises every large lookup's reduction (2 cores, 2
// devices, DLRM benchmark: 1 element gave 0.57-0.58x the loaders' pooled
// rows/s when the machine was oversubscribed, never a gain above noise;
// DESIGN.md §Compute stage).
func DefaultComputeElements(devices int) int {
	return max(0, runtime.GOMAXPROCS(0)-1-(devices+1)/2)
}

// ParseComputeElements reads --compute-elements: auto, or a count (0 runs
// the follow-up computation on the loader that finished the lookup).
func ParseComputeElements(s string) (int, error) {
	if s == "auto" {
		return ComputeAuto, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 256 {
		return 0, fmt.Errorf("--compute-elements %q: want auto or a count from 0 (on the loaders) to 256", s)
	}
	return n, nil
}

// computeElement is an element with its queue, worker and counters.
type computeElement struct {
	idx  int
	el   element
	ops  OpSet
	rank int // preference: lower is placed on first
	// pending is per size class, taken in weighted round-robin as a
	// device's pieces are (classQueues): a medium lookup does not wait
	// behind every large reduction placed before it.
	pending classQueues[*computeRequest]
	running bool       // its worker is running a request (not waiting for one)
	wake    *sync.Cond // on computeSched.mu
	outst   int        // the scheduler's view: placed, minus completions drained from the ready queue
	busyNs  atomic.Int64
	runs    atomic.Uint64 // completions
	steals  atomic.Uint64 // requests taken from another element's queue
	// victims are the elements whose queues this one may take from when
	// its own is empty: those whose ops it can all run (the seed's rule).
	victims []*computeElement
}

// completion is one ready-queue entry: which request finished, where.
type completion struct {
	id uint64
	on *computeElement
}

// computeSched places compute requests on processing elements. Lock
// order (DESIGN.md §Lock order): mu, then readyMu; both leaves otherwise.
type computeSched struct {
	mu      sync.Mutex
	els     []*computeElement
	nextID  uint64
	closing bool
	workers sync.WaitGroup

	readyMu sync.Mutex
	ready   []completion // the ready queue: elements report here, the scheduler drains it

	inline   atomic.Uint64 // requests run on the loader (no elements, or cheap)
	inlineNs atomic.Int64  // the loaders' time computing them
	// inlineRows: a request of at most this many rows (the small size
	// class) is computed on the loader that read it, whose reduction
	// costs less than a hand-off; it never waits in an element's queue
	// behind a large reduction. 0: every request goes to an element.
	inlineRows int
	// classOf is a request's size class by its rows (nil: all class 0);
	// weights are the classes' picks per turn (0 counts as 1).
	classOf func(rows int) int
	weights [maxClasses]int
	wait    hist   // submit to an element's start
	queued  func() // tests: called once a request is on an element's queue
}

// newComputeSched starts a worker per element; ranks give the
// preference (lower first).
func newComputeSched(els []element, ranks []int) *computeSched {
	s := &computeSched{}
	for i, e := range els {
		ce := &computeElement{idx: i, el: e, ops: e.ops(), rank: ranks[i]}
		ce.wake = sync.NewCond(&s.mu)
		s.els = append(s.els, ce)
	}
	for _, a := range s.els {
		for _, b := range s.els {
			if a != b && a.ops.Has(b.ops) && a.ops != b.ops {
				a.victims = append(a.victims, b)
			}
		}
	}
	for _, ce := range s.els {
		s.workers.Add(1)
		go s.worker(ce)
	}
	return s
}

func cpuElements(n int) ([]element, []int) {
	els := make([]element, n)
	ranks := make([]int, n)
	for i := range els {
		els[i] = cpuElement{}
	}
	return els, ranks
}

// drainReadyLocked applies the ready queue's completions to the elements'
// outstanding counts. Caller holds s.mu.
func (s *computeSched) drainReadyLocked() {
	s.readyMu.Lock()
	rq := s.ready
	s.ready = nil
	s.readyMu.Unlock()
	for _, c := range rq {
		c.on.outst--
	}
}

// submit places r (the seed's figures 14, 15a/15b): on an idle element of
// the most preferred rank that can run it; else on an idle element of a
// less preferred rank; else on the preferred element with the least
// outstanding work. Without elements the computation runs here, on the
// calling loader, as before the compute stage.
func (s *computeSched) submit(r *computeRequest) {
	if s == nil || len(s.els) == 0 || s.inlineRows > 0 && len(r.req.Indices) <= s.inlineRows {
		s.inlineRun(r)
		return
	}
	s.mu.Lock()
	s.drainReadyLocked()
	var best, idle *computeElement
	for _, e := range s.els {
		if !e.ops.Has(r.ops) {
			continue
		}
		if best == nil || e.rank < best.rank || e.rank == best.rank && e.outst < best.outst {
			best = e
		}
		if e.outst == 0 && (idle == nil || e.rank < idle.rank) {
			idle = e
		}
	}
	if best == nil {
		s.mu.Unlock()
		s.inlineRun(r) // no element runs these ops
		return
	}
	e := best
	if e.outst > 0 && idle != nil {
		e = idle
	}
	s.nextID++
	r.id = s.nextID
	r.enq = time.Now()
	r.placed = e
	e.outst++
	if s.classOf != nil {
		r.class = s.classOf(len(r.req.Indices))
	}
	e.pending.push(r.class, r)
	e.wake.Signal()
	// It waits behind e's running request: a superset element with an
	// empty queue may take it.
	if e.running {
		for _, o := range s.els {
			if o != e && o.pending.n == 0 && o.ops.Has(e.ops) && o.ops != e.ops {
				o.wake.Signal()
			}
		}
	}
	s.mu.Unlock()
	if s.queued != nil {
		s.queued()
	}
}

func (s *computeSched) inlineRun(r *computeRequest) {
	start := time.Now()
	res := reduceFast(r)
	if r.release != nil {
		r.release()
	}
	if s != nil {
		s.inline.Add(1)
		s.inlineNs.Add(int64(time.Since(start)))
	}
	r.done(res)
}

// take is an element's next request: the next of its own queues
// (classQueues.pop), else the next of the element with the most queued that it
// may take from and that is busy (an idle one takes its own). nil once
// closing and no work is left for it.
func (s *computeSched) take(e *computeElement) *computeRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.running = false
	for {
		if e.pending.n > 0 {
			e.running = true
			return e.pending.pop(&s.weights)
		}
		var v *computeElement
		for _, o := range e.victims {
			if o.running && o.pending.n > 0 && (v == nil || o.pending.n > v.pending.n) {
				v = o
			}
		}
		if v != nil {
			r := v.pending.pop(&s.weights)
			s.drainReadyLocked()
			// The work moves: the victim's count drops, the thief's rises.
			v.outst--
			e.outst++
			r.placed = e
			e.steals.Add(1)
			e.running = true
			return r
		}
		if s.closing {
			return nil
		}
		e.wake.Wait()
	}
}

func (s *computeSched) worker(e *computeElement) {
	defer s.workers.Done()
	for {
		r := s.take(e)
		if r == nil {
			return
		}
		start := time.Now()
		s.wait.add(start.Sub(r.enq))
		res := e.el.run(r)
		if r.release != nil {
			r.release()
		}
		e.busyNs.Add(int64(time.Since(start)))
		e.runs.Add(1)
		s.readyMu.Lock()
		s.ready = append(s.ready, completion{id: r.id, on: r.placed})
		s.readyMu.Unlock()
		r.done(res)
	}
}

// close runs the queued requests, then stops the workers. Call it after
// the loaders have stopped (they submit).
func (s *computeSched) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closing = true
	for _, e := range s.els {
		e.wake.Broadcast()
	}
	s.mu.Unlock()
	s.workers.Wait()
}

// ElementStatus is one processing element of the compute stage.
type ElementStatus struct {
	Index       int     `json:"index"`
	Kind        string  `json:"kind"`
	Ops         string  `json:"ops"`
	Rank        int     `json:"rank"`        // preference, lower first
	Queued      int     `json:"queued"`      // requests waiting on its queue
	Outstanding int     `json:"outstanding"` // the scheduler's view: queued + running
	BusySeconds float64 `json:"busy_seconds"`
	Completions uint64  `json:"completions"`
	Taken       uint64  `json:"taken_from_others"` // from another element's queue
}

// ComputeStatus is the compute stage: its elements, the requests that ran
// on the loaders (no elements: --compute-elements 0), and the wait from
// placement to an element's start.
type ComputeStatus struct {
	Elements []ElementStatus `json:"elements"`
	OnLoader uint64          `json:"on_loader"`
	// OnLoaderSeconds is the loaders' time computing them: time a loader
	// did not read.
	OnLoaderSeconds float64 `json:"on_loader_seconds"`
	Wait            Latency `json:"wait"`
}

func (s *computeSched) status() ComputeStatus {
	if s == nil {
		return ComputeStatus{Elements: []ElementStatus{}}
	}
	cs := ComputeStatus{Elements: []ElementStatus{}, OnLoader: s.inline.Load(),
		OnLoaderSeconds: float64(s.inlineNs.Load()) / 1e9, Wait: s.wait.summary()}
	s.mu.Lock()
	s.drainReadyLocked()
	for _, e := range s.els {
		cs.Elements = append(cs.Elements, ElementStatus{Index: e.idx, Kind: e.el.kind(), Ops: e.ops.String(), Rank: e.rank,
			Queued: e.pending.n, Outstanding: e.outst, BusySeconds: float64(e.busyNs.Load()) / 1e9,
			Completions: e.runs.Load(), Taken: e.steals.Load()})
	}
	s.mu.Unlock()
	return cs
}

// dedup returns the distinct indices, sorted, and for each index the place
// of its row among them: one sort of (index, place) keys and one pass,
// instead of a binary search per index when the rows are reduced. Indices
// are below rows (the request was checked).
func dedup(indices []int64, rows uint64) (uniq []int64, at []int32) {
	at = make([]int32, len(indices))
	b := bits.Len(uint(len(indices)))
	if bits.Len64(rows)+b > 64 { // the keys do not fit: sort, then search
		uniq = slices.Clone(indices)
		slices.Sort(uniq)
		uniq = slices.Compact(uniq)
		for k, idx := range indices {
			u, _ := slices.BinarySearch(uniq, idx)
			at[k] = int32(u)
		}
		return uniq, at
	}
	keys := make([]uint64, len(indices))
	for k, idx := range indices {
		keys[k] = uint64(idx)<<b | uint64(k)
	}
	slices.Sort(keys)
	mask := uint64(1)<<b - 1
	uniq = make([]int64, 0, len(indices))
	for _, key := range keys {
		idx := int64(key >> b)
		if len(uniq) == 0 || uniq[len(uniq)-1] != idx {
			uniq = append(uniq, idx)
		}
		at[key&mask] = int32(len(uniq) - 1)
	}
	return uniq, at
}

// positions is at, computed by binary search if the request came without.
func (r *computeRequest) positions() []int32 {
	if r.at == nil {
		r.at = make([]int32, len(r.req.Indices))
		for k, idx := range r.req.Indices {
			r.at[k] = int32(r.pos(idx))
		}
	}
	return r.at
}

// pos is where idx is in the sorted distinct indices.
func (r *computeRequest) pos(idx int64) int {
	return sort.Search(len(r.uniq), func(i int) bool { return r.uniq[i] >= idx })
}

func (r *computeRequest) bag(b int) (int64, int64) {
	a, e := r.req.Offsets[b], int64(len(r.req.Indices))
	if b+1 < len(r.req.Offsets) {
		e = r.req.Offsets[b+1]
	}
	return a, e
}

func (r *computeRequest) gather() []byte {
	rb := r.rb
	n := len(r.req.Indices)
	out := make([]byte, wire.ResultHeaderSize+n*rb)
	payload := out[wire.ResultHeaderSize:]
	for i, u := range r.positions() {
		copy(payload[i*rb:(i+1)*rb], r.rows[int(u)*rb:(int(u)+1)*rb])
	}
	wire.PutResultHeader(out, r.tag, 0, n, wire.Dtype(r.dtype))
	return out
}

// reduceRef is the computation as the loaders ran it before the compute
// stage (a binary search per index, accumulate per value): the tests hold
// the kernel, which now runs on the loaders too, to its bytes.
func reduceRef(r *computeRequest) []byte {
	if r.req.Mode == wire.Gather {
		return r.gather()
	}
	dim := r.dim
	acc := make([]float32, dim)
	out := make([]byte, len(r.req.Offsets)*dim*4)
	for bag := range r.req.Offsets {
		a, b := r.bag(bag)
		clear(acc)
		for k := a; k < b; k++ {
			u := r.pos(r.req.Indices[k])
			w := float32(1)
			if r.req.Weights != nil {
				w = r.req.Weights[k]
			}
			accumulate(acc, r.rows[u*r.rb:(u+1)*r.rb], r.dtype, w)
		}
		if r.req.Mode == wire.Mean && b > a {
			inv := 1 / float32(b-a)
			for i := range acc {
				acc[i] *= inv
			}
		}
		o := out[bag*dim*4:]
		for i, v := range acc {
			le.PutUint32(o[4*i:], math.Float32bits(v))
		}
	}
	return wire.EncodeResult(r.tag, 0, len(r.req.Offsets), wire.F32, out)
}

// accumulate adds w * row (in dtype) into acc.
func accumulate(acc []float32, row []byte, dtype uint8, w float32) {
	switch dtype {
	case format.DtypeF32:
		for i := range acc {
			acc[i] += w * math.Float32frombits(le.Uint32(row[4*i:]))
		}
	case format.DtypeF16:
		for i := range acc {
			acc[i] += w * wire.F16ToFloat32(le.Uint16(row[2*i:]))
		}
	case format.DtypeBF16:
		for i := range acc {
			acc[i] += w * wire.BF16ToFloat32(le.Uint16(row[2*i:]))
		}
	}
}

// reduceFast is the CPU kernel, on the elements and on the loaders: the
// same operations in the same order per output value as reduceRef (so the
// same bytes), but a bag is pooled eight output values at a time with
// the eight sums in registers across all its rows (no load and store of
// the accumulator per row), each row found by its precomputed place, and
// f16 widened through a table. Go has no SIMD intrinsics; the unrolled,
// bounds-check-free loops are what the compiler schedules best.
func reduceFast(r *computeRequest) []byte {
	if r.req.Mode == wire.Gather {
		return r.gather()
	}
	dim := r.dim
	nb := len(r.req.Offsets)
	out := make([]byte, wire.ResultHeaderSize+nb*dim*4)
	payload := out[wire.ResultHeaderSize:]
	acc := make([]float32, dim)
	at := r.positions()
	var f16 *[1 << 16]float32
	if r.dtype == format.DtypeF16 {
		f16 = f16Table()
	}
	for bag := 0; bag < nb; bag++ {
		a, b := r.bag(bag)
		var ws []float32
		if r.req.Weights != nil {
			ws = r.req.Weights[a:b]
		}
		switch r.dtype {
		case format.DtypeF32:
			poolF32(acc, r.rows, r.rb, at[a:b], ws)
		case format.DtypeF16:
			poolF16(acc, r.rows, r.rb, at[a:b], ws, f16)
		case format.DtypeBF16:
			poolBF16(acc, r.rows, r.rb, at[a:b], ws)
		}
		if r.req.Mode == wire.Mean && b > a {
			inv := 1 / float32(b-a)
			for i := range acc {
				acc[i] *= inv
			}
		}
		o := payload[bag*dim*4 : (bag+1)*dim*4]
		for i, v := range acc {
			le.PutUint32(o[4*i:], math.Float32bits(v))
		}
	}
	wire.PutResultHeader(out, r.tag, 0, nb, wire.F32)
	return out
}

// poolF32 sets acc to the weighted sum (ws nil: weights 1) of the f32 rows
// at places at, each value summed in row order from zero as reduceRef does.
func poolF32(acc []float32, rows []byte, rb int, at []int32, ws []float32) {
	n := len(acc)
	if ws != nil {
		ws = ws[:len(at)]
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		var a0, a1, a2, a3, a4, a5, a6, a7 float32
		for k, u := range at {
			w := float32(1)
			if ws != nil {
				w = ws[k]
			}
			o := int(u)*rb + 4*i
			s := rows[o : o+32 : o+32]
			a0 += w * math.Float32frombits(le.Uint32(s[0:]))
			a1 += w * math.Float32frombits(le.Uint32(s[4:]))
			a2 += w * math.Float32frombits(le.Uint32(s[8:]))
			a3 += w * math.Float32frombits(le.Uint32(s[12:]))
			a4 += w * math.Float32frombits(le.Uint32(s[16:]))
			a5 += w * math.Float32frombits(le.Uint32(s[20:]))
			a6 += w * math.Float32frombits(le.Uint32(s[24:]))
			a7 += w * math.Float32frombits(le.Uint32(s[28:]))
		}
		a := acc[i : i+8 : i+8]
		a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = a0, a1, a2, a3, a4, a5, a6, a7
	}
	for ; i < n; i++ {
		var v float32
		for k, u := range at {
			w := float32(1)
			if ws != nil {
				w = ws[k]
			}
			v += w * math.Float32frombits(le.Uint32(rows[int(u)*rb+4*i:]))
		}
		acc[i] = v
	}
}

// poolF16 is poolF32 for f16 rows, widened through tab.
func poolF16(acc []float32, rows []byte, rb int, at []int32, ws []float32, tab *[1 << 16]float32) {
	n := len(acc)
	if ws != nil {
		ws = ws[:len(at)]
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		var a0, a1, a2, a3, a4, a5, a6, a7 float32
		for k, u := range at {
			w := float32(1)
			if ws != nil {
				w = ws[k]
			}
			o := int(u)*rb + 2*i
			s := rows[o : o+16 : o+16]
			a0 += w * tab[le.Uint16(s[0:])]
			a1 += w * tab[le.Uint16(s[2:])]
			a2 += w * tab[le.Uint16(s[4:])]
			a3 += w * tab[le.Uint16(s[6:])]
			a4 += w * tab[le.Uint16(s[8:])]
			a5 += w * tab[le.Uint16(s[10:])]
			a6 += w * tab[le.Uint16(s[12:])]
			a7 += w * tab[le.Uint16(s[14:])]
		}
		a := acc[i : i+8 : i+8]
		a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = a0, a1, a2, a3, a4, a5, a6, a7
	}
	for ; i < n; i++ {
		var v float32
		for k, u := range at {
			w := float32(1)
			if ws != nil {
				w = ws[k]
			}
			v += w * tab[le.Uint16(rows[int(u)*rb+2*i:])]
		}
		acc[i] = v
	}
}

// poolBF16 is poolF32 for bf16 rows (the upper half of a float32).
func poolBF16(acc []float32, rows []byte, rb int, at []int32, ws []float32) {
	n := len(acc)
	if ws != nil {
		ws = ws[:len(at)]
	}
	bf := func(s []byte) float32 { return math.Float32frombits(uint32(le.Uint16(s)) << 16) }
	i := 0
	for ; i+8 <= n; i += 8 {
		var a0, a1, a2, a3, a4, a5, a6, a7 float32
		for k, u := range at {
			w := float32(1)
			if ws != nil {
				w = ws[k]
			}
			o := int(u)*rb + 2*i
			s := rows[o : o+16 : o+16]
			a0 += w * bf(s[0:])
			a1 += w * bf(s[2:])
			a2 += w * bf(s[4:])
			a3 += w * bf(s[6:])
			a4 += w * bf(s[8:])
			a5 += w * bf(s[10:])
			a6 += w * bf(s[12:])
			a7 += w * bf(s[14:])
		}
		a := acc[i : i+8 : i+8]
		a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = a0, a1, a2, a3, a4, a5, a6, a7
	}
	for ; i < n; i++ {
		var v float32
		for k, u := range at {
			w := float32(1)
			if ws != nil {
				w = ws[k]
			}
			v += w * bf(rows[int(u)*rb+2*i:])
		}
		acc[i] = v
	}
}

var (
	f16Once sync.Once
	f16Tab  *[1 << 16]float32
)

// f16Table is every f16 value widened by wire.F16ToFloat32 (256 KiB, built
// on first use).
func f16Table() *[1 << 16]float32 {
	f16Once.Do(func() {
		t := new([1 << 16]float32)
		for h := range t {
			t[h] = wire.F16ToFloat32(uint16(h))
		}
		f16Tab = t
	})
	return f16Tab
}
