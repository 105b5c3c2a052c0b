package embedding

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/embedding/wire"
	"github.com/dnnfs/dnnfs/format"
)

// simElement is a simulated accelerator kind: it runs fewer ops than a
// CPU element, is slower or faster by a factor (it runs the kernel factor
// times; 0 = once), and each run waits for a token on gate (nil: none),
// after reporting the request's tag on started, so a test decides when an
// element is busy and when it finishes.
type simElement struct {
	k       string
	opset   OpSet
	factor  int
	gate    chan struct{}
	started chan uint64
}

func (e *simElement) kind() string { return e.k }
func (e *simElement) ops() OpSet   { return e.opset }
func (e *simElement) run(r *computeRequest) []byte {
	if e.started != nil {
		e.started <- r.tag
	}
	if e.gate != nil {
		<-e.gate
	}
	res := reduceFast(r)
	for i := 1; i < e.factor; i++ {
		res = reduceFast(r)
	}
	return res
}

// randCompute builds a compute request over random rows of dtype: mode,
// weights and bag sizes (empty bags included) at random.
func randCompute(rng *rand.Rand, tag uint64, mode wire.Mode, dtype uint8, dim int, weighted bool) *computeRequest {
	nrows := 1 + rng.IntN(40)
	rb := dim * format.DtypeSize(dtype)
	rows := make([]byte, nrows*rb)
	for r := 0; r < nrows; r++ {
		for i := 0; i < dim; i++ {
			v := float32(rng.NormFloat64() * 3)
			row := rows[r*rb:]
			putValue(row, dtype, i, v)
		}
	}
	uniq := make([]int64, nrows)
	for i := range uniq {
		uniq[i] = int64(i*7 + rng.IntN(7)) // sorted, distinct
	}
	req := &wire.Request{Tag: tag, Mode: mode, Dtype: wire.Dtype(dtype)}
	nbags := 1 + rng.IntN(8)
	for b := 0; b < nbags; b++ {
		req.Offsets = append(req.Offsets, int64(len(req.Indices)))
		for j := rng.IntN(12); j > 0; j-- { // empty bags too
			req.Indices = append(req.Indices, uniq[rng.IntN(nrows)])
		}
	}
	if mode == wire.Gather {
		req.Offsets = nil
	}
	if weighted {
		for range req.Indices {
			req.Weights = append(req.Weights, float32(rng.NormFloat64()))
		}
	}
	return &computeRequest{tag: tag, ops: opsFor(req, dtype), req: req, dtype: dtype, dim: dim, rb: rb, uniq: uniq, rows: rows}
}

// TestComputeKernelMatchesLoaderPath: the CPU elements' unrolled kernels
// give the loader path's bytes for every mode, dtype, weighting and bag
// shape, at dims around the unroll width.
func TestComputeKernelMatchesLoaderPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	n := 0
	for _, dtype := range []uint8{format.DtypeF32, format.DtypeF16, format.DtypeBF16} {
		for _, dim := range []int{1, 7, 8, 9, 16, 63, 64, 129} {
			for _, mode := range []wire.Mode{wire.Gather, wire.Sum, wire.Mean} {
				for _, weighted := range []bool{false, true} {
					if weighted && mode == wire.Gather {
						continue
					}
					for k := 0; k < 5; k++ {
						r := randCompute(rng, uint64(n), mode, dtype, dim, weighted)
						n++
						want, got := reduceRef(r), reduceFast(r)
						if !bytes.Equal(want, got) {
							t.Fatalf("dtype %d dim %d %s weighted %v: kernel result differs from the loader path's (%d vs %d bytes)",
								dtype, dim, mode, weighted, len(got), len(want))
						}
						// As a lookup builds it: only the rows used, placed by dedup.
						d := *r
						d.uniq, d.at = dedup(r.req.Indices, uint64(r.uniq[len(r.uniq)-1]+1))
						d.rows = nil
						for _, idx := range d.uniq {
							u := r.pos(idx)
							d.rows = append(d.rows, r.rows[u*r.rb:(u+1)*r.rb]...)
						}
						if got := reduceFast(&d); !bytes.Equal(want, got) {
							t.Fatalf("dtype %d dim %d %s weighted %v: kernel result over dedup's rows differs from the loader path's", dtype, dim, mode, weighted)
						}
						if _, err := wire.DecodeResult(got); err != nil {
							t.Fatalf("kernel result does not decode: %v", err)
						}
					}
				}
			}
		}
	}
}

// TestLookupOnElementsMatchesLoader runs the same lookups through the
// tier with the reduction on CPU elements and on the loader: the results
// are byte-identical.
func TestLookupOnElementsMatchesLoader(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	tt := newTestTier(t, []Model{{}, {}}, DefaultSched)
	if tt.tier.compute == nil || len(tt.tier.compute.els) != 2 {
		t.Fatalf("test tier without its 2 compute elements")
	}
	elems := tt.tier.compute
	defer func() { tt.tier.compute = elems }() // closed with the tier
	if elems.inlineRows != DefaultSched.Small {
		t.Fatalf("the tier computes lookups of up to %d rows on the loader, want the small class's %d", elems.inlineRows, DefaultSched.Small)
	}
	elems.inlineRows = 0 // these lookups are small: on the elements all the same
	for _, dtype := range []uint8{format.DtypeF32, format.DtypeF16, format.DtypeBF16} {
		rows := uint64(2000)
		tb, _ := tt.table(fmt.Sprintf("t%d", dtype), rows, 24, dtype, rng)
		for k := 0; k < 40; k++ {
			mode := uint8(k % 3)
			var idx, offs []int64
			for b := 0; b < 1+rng.IntN(10); b++ {
				offs = append(offs, int64(len(idx)))
				for j := rng.IntN(10); j > 0; j-- {
					idx = append(idx, int64(rng.IntN(int(rows))))
				}
			}
			var w []float32
			if mode == modeSum && k%2 == 0 {
				for range idx {
					w = append(w, float32(rng.NormFloat64()))
				}
			}
			if mode == modeGather {
				offs = nil
			}
			req := encode(uint64(k), mode, dtype, idx, offs, w)
			tt.tier.compute = elems
			_, _, _, onElems := lookupSync(t, tb, req)
			tt.tier.compute = nil
			_, _, _, onLoader := lookupSync(t, tb, req)
			if !bytes.Equal(onElems, onLoader) {
				t.Fatalf("dtype %d mode %d: result on elements differs from the loader's", dtype, mode)
			}
		}
	}
	tt.tier.compute = elems
	cs := tt.tier.Status().Compute
	var runs uint64
	for _, e := range cs.Elements {
		runs += e.Completions
		if e.Kind != "cpu" || e.Queued != 0 || e.Outstanding != 0 || e.Completions > 0 && e.BusySeconds == 0 {
			t.Errorf("idle element's status: %+v", e)
		}
	}
	if len(cs.Elements) != 2 || runs != 3*40 {
		t.Fatalf("status shows %d elements with %d completions, want 2 with %d", len(cs.Elements), runs, 3*40)
	}
}

// policyRig is a compute scheduler of gated simulated elements.
type policyRig struct {
	t       *testing.T
	s       *computeSched
	sims    []*simElement
	results chan *computeRequest
	rng     *rand.Rand
}

func newPolicyRig(t *testing.T, sims []*simElement, ranks []int) *policyRig {
	els := make([]element, len(sims))
	for i, e := range sims {
		e.gate, e.started = make(chan struct{}), make(chan uint64, 16)
		els[i] = e
	}
	g := &policyRig{t: t, s: newComputeSched(els, ranks), sims: sims, results: make(chan *computeRequest, 64), rng: rand.New(rand.NewPCG(45, 46))}
	t.Cleanup(func() {
		for _, e := range sims {
			close(e.gate) // every run passes from now on
		}
		g.s.close()
	})
	return g
}

// submit places a pooled request of mode with the given tag.
func (g *policyRig) submit(tag uint64, mode wire.Mode) *computeRequest {
	r := randCompute(g.rng, tag, mode, format.DtypeF32, 16, false)
	want := reduceRef(r)
	r.done = func(res []byte) {
		if !bytes.Equal(res, want) {
			g.t.Errorf("tag %d: wrong result", tag)
		}
		g.results <- r
	}
	g.s.submit(r)
	return r
}

// started waits for element i to start the request tagged tag.
func (g *policyRig) started(i int, tag uint64) {
	g.t.Helper()
	select {
	case got := <-g.sims[i].started:
		if got != tag {
			g.t.Fatalf("element %d (%s) started tag %d, want %d", i, g.sims[i].k, got, tag)
		}
	case <-time.After(time.Minute): // a hang, not a measurement
		g.t.Fatalf("element %d (%s) never started tag %d", i, g.sims[i].k, tag)
	}
}

// finish lets element i complete its running request, tagged tag.
func (g *policyRig) finish(i int, tag uint64) {
	g.t.Helper()
	g.sims[i].gate <- struct{}{}
	select {
	case r := <-g.results:
		if r.tag != tag {
			g.t.Fatalf("completed tag %d, want %d", r.tag, tag)
		}
	case <-time.After(time.Minute):
		g.t.Fatalf("tag %d never completed", tag)
	}
}

// TestComputePlacementFallsBackToIdle: the seed's figure 8 — two
// preferred accelerator elements that pool but not average, and a less
// preferred CPU element that runs everything. Requests go to an idle
// preferred element; when both are busy, to the idle CPU element; when
// every element is busy, to the preferred one with the least outstanding
// work; completions on the ready queue make an element idle again.
func TestComputePlacementFallsBackToIdle(t *testing.T) {
	accOps := OpSum | OpWeighted | OpConvert
	g := newPolicyRig(t, []*simElement{
		{k: "accel", opset: accOps, factor: 1},
		{k: "accel", opset: accOps, factor: 1},
		{k: "cpu-sim", opset: OpsAll, factor: 3},
	}, []int{0, 0, 1})
	g.submit(1, wire.Sum)
	g.started(0, 1) // idle preferred
	g.submit(2, wire.Sum)
	g.started(1, 2) // the other idle preferred
	g.submit(3, wire.Sum)
	g.started(2, 3) // both preferred busy: the idle, less preferred CPU
	r4 := g.submit(4, wire.Sum)
	r5 := g.submit(5, wire.Sum)
	if r4.placed != g.s.els[0] || r5.placed != g.s.els[1] {
		t.Fatalf("with every element busy, requests 4 and 5 went to elements %d and %d, want the preferred 0 and 1 (least outstanding)",
			r4.placed.idx, r5.placed.idx)
	}
	r6 := g.submit(6, wire.Mean) // only the CPU element averages
	if r6.placed != g.s.els[2] {
		t.Fatalf("a mean went to element %d, which cannot run it", r6.placed.idx)
	}
	// Element 1 finishes tag 2 and starts tag 5; element 0 finishes tag 1
	// and starts 4; then, with their queues empty, element 0 finishes 4:
	// the ready queue shows it idle, so the next request goes there.
	g.finish(1, 2)
	g.started(1, 5)
	g.finish(0, 1)
	g.started(0, 4)
	g.finish(0, 4)
	r7 := g.submit(7, wire.Sum)
	if r7.placed != g.s.els[0] {
		t.Fatalf("request 7 went to element %d; element 0 reported its completions and is idle", r7.placed.idx)
	}
	g.started(0, 7)
	g.finish(0, 7)
	g.finish(1, 5)
	g.finish(2, 3)
	g.started(2, 6)
	g.finish(2, 6)
	for i, e := range g.s.els {
		if e.steals.Load() != 0 {
			t.Errorf("element %d stole %d requests; nothing waited in a queue it could take from while idle", i, e.steals.Load())
		}
	}
}

// TestComputeQueueBySizeClass: an element's queue is per size class, taken
// in weighted round-robin as the devices' queues are: a medium lookup
// placed behind large ones on a busy element runs before them, and a
// large one still runs between mediums (no starvation).
func TestComputeQueueBySizeClass(t *testing.T) {
	g := newPolicyRig(t, []*simElement{{k: "cpu-sim", opset: OpsAll}}, []int{0})
	g.s.classOf, g.s.weights = DefaultSched.class, [maxClasses]int{16, 2, 1}
	submit := func(tag uint64, bags int) {
		r := benchCompute(g.rng, format.DtypeF32, 16, bags, 10, 50, false)
		r.tag = tag
		want := reduceRef(r)
		r.done = func(res []byte) {
			if !bytes.Equal(res, want) {
				g.t.Errorf("tag %d: wrong result", tag)
			}
			g.results <- r
		}
		g.s.submit(r)
	}
	const large, medium = 64, 20 // bags of 10 rows: 640 rows (large), 200 (medium)
	submit(1, large)
	g.started(0, 1)
	submit(2, large)
	submit(3, large)
	submit(4, medium)
	submit(5, medium)
	submit(6, medium)
	// The medium class's turn (2 picks) comes first, then a large one's,
	// then the mediums' again.
	order := []uint64{1, 4, 5, 2, 6, 3}
	for i := 0; i+1 < len(order); i++ {
		g.finish(0, order[i])
		g.started(0, order[i+1])
	}
	g.finish(0, order[len(order)-1])
}

// TestComputeSupersetTakesFromOthersQueue: the seed's 820-3 — an element
// that runs a superset of another's ops takes from that element's queue
// when its own is empty; the other never takes from the superset's.
func TestComputeSupersetTakesFromOthersQueue(t *testing.T) {
	g := newPolicyRig(t, []*simElement{
		{k: "accel", opset: OpSum},
		{k: "cpu-sim", opset: OpsAll},
	}, []int{0, 1})
	g.submit(1, wire.Sum)
	g.started(0, 1) // accel busy
	g.submit(2, wire.Mean)
	g.started(1, 2) // cpu busy with the only mean
	r3 := g.submit(3, wire.Sum)
	if r3.placed != g.s.els[0] {
		t.Fatalf("request 3 placed on element %d, want the preferred 0 (all busy)", r3.placed.idx)
	}
	r4 := g.submit(4, wire.Mean)
	if r4.placed != g.s.els[1] {
		t.Fatalf("a mean placed on element %d", r4.placed.idx)
	}
	// The CPU finishes 2, runs its own 4, finishes it; with its own queue
	// empty it takes 3 from the busy accelerator's queue.
	g.finish(1, 2)
	g.started(1, 4)
	g.finish(1, 4)
	g.started(1, 3)
	if n := g.s.els[1].steals.Load(); n != 1 {
		t.Fatalf("superset element took %d requests from the other's queue, want 1", n)
	}
	g.s.mu.Lock()
	g.s.drainReadyLocked()
	o0, o1 := g.s.els[0].outst, g.s.els[1].outst
	g.s.mu.Unlock()
	if o0 != 1 || o1 != 1 {
		t.Fatalf("outstanding after the take: accel %d, cpu %d; want 1 and 1 (the taken request counts on its taker)", o0, o1)
	}
	g.finish(1, 3)
	// A mean waiting on the CPU's queue is never taken by the accelerator.
	g.submit(5, wire.Mean)
	g.started(1, 5)
	g.submit(6, wire.Mean)
	g.finish(0, 1) // the accelerator is free and its queue empty
	g.finish(1, 5)
	g.started(1, 6)
	g.finish(1, 6)
	if n := g.s.els[0].steals.Load(); n != 0 {
		t.Fatalf("the accelerator took %d requests it cannot run", n)
	}
}

// TestLoadersFreeWhileComputeSaturated: with the only compute element
// held shut, more pooled lookups than the device has loaders all finish
// reading, and plain reads (the small I/O class) still complete: no
// reduction holds a loader.
func TestLoadersFreeWhileComputeSaturated(t *testing.T) {
	tt := newTestTier(t, []Model{{Channels: 2}}, DefaultSched)
	rng := rand.New(rand.NewPCG(47, 48))
	tb, data := tt.table("t", 4096, 32, format.DtypeF32, rng)
	sim := &simElement{k: "cpu-sim", opset: OpsAll, gate: make(chan struct{}), started: make(chan uint64, 64)}
	orig := tt.tier.compute
	s := newComputeSched([]element{sim}, []int{0})
	submitted := make(chan struct{}, 64)
	s.queued = func() { submitted <- struct{}{} }
	tt.tier.compute = s
	defer func() {
		close(sim.gate)
		s.close()
		tt.tier.compute = orig
	}()
	const lookups = 12 // > 2 loaders
	results := make(chan []byte, lookups)
	for k := 0; k < lookups; k++ {
		idx := make([]int64, 64)
		for i := range idx {
			idx[i] = int64(rng.IntN(4096))
		}
		r, err := tb.ParseLookup(encode(uint64(k), modeSum, format.DtypeF32, idx, []int64{0, 20}, nil))
		if err != nil {
			t.Fatal(err)
		}
		tb.Lookup(r, func(res []byte) { results <- res })
	}
	// Every lookup reaches the compute stage: its reads are done.
	for n := 0; n < lookups; n++ {
		select {
		case <-submitted:
		case <-time.After(time.Minute): // a hang, not a measurement
			t.Fatalf("only %d of %d lookups reached the compute stage with the element shut: loaders held", n, lookups)
		}
	}
	if len(results) != 0 {
		t.Fatalf("%d results with the compute element shut", len(results))
	}
	// Small plain reads go through the same loaders and complete.
	for k := 0; k < 20; k++ {
		off := rng.IntN(len(data) - 4096)
		buf := make([]byte, 1+rng.IntN(4096))
		if n, err := tb.ReadAt(buf, int64(off)); err != nil || n != len(buf) || !bytes.Equal(buf, data[off:off+len(buf)]) {
			t.Fatalf("small read with compute saturated: %d, %v", n, err)
		}
	}
	if len(results) != 0 {
		t.Fatalf("%d results with the compute element shut", len(results))
	}
	for k := 0; k < lookups; k++ {
		sim.gate <- struct{}{}
	}
	var tags []uint64
	for k := 0; k < lookups; k++ {
		res := <-results
		r, err := wire.DecodeResult(res)
		if err != nil || r.Err() != nil {
			t.Fatalf("result: %v %v", err, r.Err())
		}
		tags = append(tags, r.Tag)
	}
	slices.Sort(tags)
	for k, tag := range tags {
		if tag != uint64(k) {
			t.Fatalf("result tags %v", tags)
		}
	}
}

// benchCompute is a batch of bags bags of pooling rows each over nuniq
// distinct random rows of dtype at dim, weighted or not.
func benchCompute(rng *rand.Rand, dtype uint8, dim, bags, pooling, nuniq int, weighted bool) *computeRequest {
	rb := dim * format.DtypeSize(dtype)
	rows := make([]byte, nuniq*rb)
	for r := 0; r < nuniq; r++ {
		for i := 0; i < dim; i++ {
			v := float32(rng.NormFloat64() * 0.05) // trained embeddings are small
			row := rows[r*rb:]
			putValue(row, dtype, i, v)
		}
	}
	uniq := make([]int64, nuniq)
	for i := range uniq {
		uniq[i] = int64(i*1000 + rng.IntN(1000)) // sorted, distinct, spread like a big table's
	}
	req := &wire.Request{Tag: 1, Mode: wire.Sum, Dtype: wire.Dtype(dtype)}
	for b := 0; b < bags; b++ {
		req.Offsets = append(req.Offsets, int64(len(req.Indices)))
		for k := 0; k < pooling; k++ {
			req.Indices = append(req.Indices, uniq[rng.IntN(nuniq)])
			if weighted {
				req.Weights = append(req.Weights, float32(rng.Float64()))
			}
		}
	}
	return &computeRequest{tag: 1, ops: opsFor(req, dtype), req: req, dtype: dtype, dim: dim, rb: rb, uniq: uniq, rows: rows}
}

// BenchmarkReduce compares the reference reduction with the CPU kernel on
// the DLRM benchmark's two loads (tests/dlrm): light, 64 bags of 15 rows,
// dim 64, plain sum, per dtype; heavy, 64 bags of 40 rows, dim 128,
// weighted sum, per dtype (f16 is the heavy load's table dtype).
// go test ./embedding -run XXX -bench Reduce
func BenchmarkReduce(b *testing.B) {
	for _, load := range []struct {
		name         string
		dim, pooling int
		weighted     bool
	}{{"light", 64, 15, false}, {"heavy", 128, 40, true}} {
		for _, dtype := range []uint8{format.DtypeF32, format.DtypeF16, format.DtypeBF16} {
			rng := rand.New(rand.NewPCG(49, 50))
			r := benchCompute(rng, dtype, load.dim, 64, load.pooling, 64*load.pooling*9/10, load.weighted)
			for _, k := range []struct {
				name string
				f    func(*computeRequest) []byte
			}{{"ref", reduceRef}, {"kernel", reduceFast}} {
				b.Run(fmt.Sprintf("%s/%s/%s", load.name, wire.Dtype(dtype), k.name), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						k.f(r)
					}
					b.ReportMetric(float64(len(r.req.Indices))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		}
	}
}

// TestSmallLookupsOnTheLoader: a lookup of the small size class is computed
// on the loader that read it even with elements idle (a hand-off costs more
// than its reduction, and it must not wait behind a large one); a larger
// one goes to an element.
func TestSmallLookupsOnTheLoader(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	tt := newTestTier(t, []Model{{}, {}}, DefaultSched)
	cs := tt.tier.compute
	tb, _ := tt.table("t", 4000, 16, format.DtypeF32, rng)
	lookup := func(rows int) {
		idx := make([]int64, rows)
		for i := range idx {
			idx[i] = int64(rng.IntN(4000))
		}
		lookupSync(t, tb, encode(uint64(rows), modeSum, format.DtypeF32, idx, []int64{0}, nil))
	}
	elementRuns := func() (n uint64) {
		for _, e := range tt.tier.Status().Compute.Elements {
			n += e.Completions
		}
		return n
	}
	inline0, runs0 := cs.inline.Load(), elementRuns()
	lookup(DefaultSched.Small)
	if cs.inline.Load() != inline0+1 || elementRuns() != runs0 {
		t.Fatalf("a lookup of %d rows: on the loader %d -> %d, on elements %d -> %d; want it on the loader", DefaultSched.Small, inline0, cs.inline.Load(), runs0, elementRuns())
	}
	lookup(DefaultSched.Small + 1)
	if cs.inline.Load() != inline0+1 || elementRuns() != runs0+1 {
		t.Fatalf("a lookup of %d rows: on the loader %d -> %d, on elements %d -> %d; want it on an element", DefaultSched.Small+1, inline0, cs.inline.Load(), runs0, elementRuns())
	}
}

// TestDedupPlaces: dedup gives the sorted distinct indices and each
// index's place among them, with packed keys and with the fallback for
// tables too large to pack (rows near 2^63).
func TestDedupPlaces(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	for _, rows := range []uint64{1, 7, 1000, 1 << 40, 1<<63 - 1} {
		for _, n := range []int{0, 1, 2, 3, 100, 5000} {
			idx := make([]int64, n)
			for i := range idx {
				idx[i] = int64(rng.Uint64N(rows))
			}
			uniq, at := dedup(idx, rows)
			want := slices.Clone(idx)
			slices.Sort(want)
			want = slices.Compact(want)
			if !slices.Equal(uniq, want) {
				t.Fatalf("rows %d, %d indices: distinct indices %v, want %v", rows, n, uniq, want)
			}
			if len(at) != n {
				t.Fatalf("rows %d, %d indices: %d places", rows, n, len(at))
			}
			for k, u := range at {
				if uniq[u] != idx[k] {
					t.Fatalf("rows %d: index %d (%d) placed at %d, which holds %d", rows, k, idx[k], u, uniq[u])
				}
			}
		}
	}
}

// BenchmarkDedup: the distinct rows and each index's place, by dedup vs
// the sort-compact-then-binary-search it replaced (a heavy batch: 2560
// indices over a 2M-row table).
func BenchmarkDedup(b *testing.B) {
	rng := rand.New(rand.NewPCG(55, 56))
	idx := make([]int64, 2560)
	for i := range idx {
		idx[i] = rng.Int64N(2_000_000)
	}
	b.Run("dedup", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dedup(idx, 2_000_000)
		}
	})
	b.Run("sort-search", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			uniq := slices.Clone(idx)
			slices.Sort(uniq)
			uniq = slices.Compact(uniq)
			r := &computeRequest{req: &wire.Request{Indices: idx}, uniq: uniq}
			r.positions()
		}
	})
}
