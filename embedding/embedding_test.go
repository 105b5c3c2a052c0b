package embedding

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding/wire"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// testTier mounts a pool on a memory medium with an SSD tier of real
// backing files (one directory per device) under t.TempDir().
type testTier struct {
	t    *testing.T
	m    pmem.Medium
	p    *core.FS
	tier *Tier
	dirs []string
	opts Options
}

func newTestTier(t *testing.T, models []Model, sched SchedConfig) *testTier {
	t.Helper()
	tt := &testTier{t: t, m: pmemtest.NewMemory(t, 64<<20)}
	if err := core.Format(tt.m, 0, 0); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	tt.opts = Options{Sched: sched, ShardBytes: 16 << 10, ComputeElements: 2}
	for i, m := range models {
		dir := filepath.Join(base, fmt.Sprintf("ssd%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if m.Channels == 0 {
			m.Channels = 2
		}
		tt.dirs = append(tt.dirs, dir)
		tt.opts.Devices = append(tt.opts.Devices, DeviceSpec{Dir: dir, Model: m})
	}
	tt.open()
	t.Cleanup(func() { tt.close() })
	return tt
}

func (tt *testTier) open() {
	tt.t.Helper()
	p, _, err := core.Open(tt.m, core.Options{})
	if err != nil {
		tt.t.Fatal(err)
	}
	tier, err := Open(p, tt.opts)
	if err != nil {
		p.Close()
		tt.t.Fatal(err)
	}
	tt.p, tt.tier = p, tier
}

func (tt *testTier) close() {
	if tt.tier == nil {
		return
	}
	if err := tt.tier.Close(); err != nil {
		tt.t.Error(err)
	}
	if err := tt.p.Close(); err != nil {
		tt.t.Error(err)
	}
	tt.tier, tt.p = nil, nil
}

// table creates a table and fills it with random rows; it returns the
// rows' bytes.
func (tt *testTier) table(name string, rows uint64, dim uint32, dtype uint8, rng *rand.Rand) (*Table, []byte) {
	tt.t.Helper()
	in, err := tt.p.Create(tt.p.Root(), name, core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		tt.t.Fatal(err)
	}
	// About five shards, whatever the row size.
	shardBytes := max(int64(rows)*int64(dim)*int64(format.DtypeSize(dtype))/5, 1)
	if err := tt.tier.CreateTable(in, rows, dim, dtype, shardBytes); err != nil {
		tt.t.Fatal(err)
	}
	tb, ok := tt.tier.Table(in)
	if !ok {
		tt.t.Fatal("no DRAM table after CreateTable")
	}
	data := make([]byte, tb.hdr.Size())
	rb := int(tb.rowBytes)
	for r := 0; r < int(rows); r++ {
		row := data[r*rb : (r+1)*rb]
		for i := 0; i < int(dim); i++ {
			v := float32(rng.NormFloat64())
			putValue(row, dtype, i, v)
		}
	}
	// Write in uneven chunks: exercises unaligned and aligned paths.
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+rng.IntN(50000))
		if k, err := tb.WriteAt(data[off:off+n], int64(off)); err != nil || k != n {
			tt.t.Fatalf("WriteAt(%d, %d): %d, %v", off, n, k, err)
		}
		off += n
	}
	return tb, data
}

// f32ToF16 rounds toward zero (test data only needs exact round trips of
// the values it produces).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	}
	return sign | uint16(exp)<<10 | uint16(mant>>13)
}

func rowValue(data []byte, rb int, dtype uint8, r int64, i int) float32 {
	row := data[int(r)*rb:]
	switch dtype {
	case format.DtypeF16:
		return wire.F16ToFloat32(binary.LittleEndian.Uint16(row[2*i:]))
	case format.DtypeBF16:
		return math.Float32frombits(uint32(binary.LittleEndian.Uint16(row[2*i:])) << 16)
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
}

// The lookup modes as encode takes them.
const (
	modeGather = uint8(wire.Gather)
	modeSum    = uint8(wire.Sum)
	modeMean   = uint8(wire.Mean)
)

// encode builds a request in the wire format (independently of the
// decoder under test).
func encode(tag uint64, mode, dtype uint8, idx, offs []int64, w []float32) []byte {
	n, nb := len(idx), len(offs)
	total := 48 + 8*n + 8*nb
	var flags uint32
	if w != nil {
		flags = 1
		total += 4 * n
	}
	b := make([]byte, total)
	le := binary.LittleEndian
	le.PutUint32(b[0:], 0x514C4E44)
	le.PutUint16(b[4:], 1)
	b[6], b[7] = mode, dtype
	le.PutUint64(b[8:], tag)
	le.PutUint32(b[16:], flags)
	le.PutUint64(b[24:], uint64(n))
	le.PutUint64(b[32:], uint64(nb))
	le.PutUint64(b[40:], uint64(total))
	p := 48
	for _, v := range idx {
		le.PutUint64(b[p:], uint64(v))
		p += 8
	}
	for _, v := range offs {
		le.PutUint64(b[p:], uint64(v))
		p += 8
	}
	for _, v := range w {
		le.PutUint32(b[p:], math.Float32bits(v))
		p += 4
	}
	return b
}

// lookupSync runs one request and decodes the result.
func lookupSync(t *testing.T, tb *Table, req []byte) (status uint32, count int, dtype uint8, payload []byte) {
	t.Helper()
	r, err := tb.ParseLookup(req)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []byte, 1)
	tb.Lookup(r, func(res []byte) { ch <- res })
	res := <-ch
	le := binary.LittleEndian
	if le.Uint32(res) != wire.ResultMagic || le.Uint64(res[8:]) != r.Tag {
		t.Fatalf("bad result header % x", res[:32])
	}
	return le.Uint32(res[4:]), int(le.Uint32(res[24:])), res[28], res[wire.ResultHeaderSize:]
}

func TestLookupMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tt := newTestTier(t, []Model{{}, {}, {}}, DefaultSched)
	for _, dtype := range []uint8{format.DtypeF32, format.DtypeF16, format.DtypeBF16} {
		for _, dim := range []uint32{1, 7, 64} {
			rows := uint64(300 + rng.IntN(3000))
			tb, data := tt.table(fmt.Sprintf("t-%d-%d", dtype, dim), rows, dim, dtype, rng)
			if tb.hdr.Shards < 3 {
				t.Fatalf("want a table spread over shards, got %d", tb.hdr.Shards)
			}
			rb := int(tb.rowBytes)
			// Plain reads at random offsets equal the written bytes.
			for k := 0; k < 20; k++ {
				off := rng.IntN(len(data))
				n := 1 + rng.IntN(len(data)-off)
				got := make([]byte, n)
				if m, err := tb.ReadAt(got, int64(off)); err != nil || m != n || string(got) != string(data[off:off+n]) {
					t.Fatalf("ReadAt(%d, %d) = %d, %v; bytes equal %v", off, n, m, err, string(got) == string(data[off:off+n]))
				}
			}
			for k := 0; k < 30; k++ {
				nbags := 1 + rng.IntN(20)
				var idx, offs []int64
				for b := 0; b < nbags; b++ {
					offs = append(offs, int64(len(idx)))
					for j := rng.IntN(16); j > 0; j-- { // empty bags too
						idx = append(idx, int64(rng.IntN(int(rows))))
					}
				}
				mode := uint8(rng.IntN(3))
				var w []float32
				if mode == modeSum && rng.IntN(2) == 0 {
					for range idx {
						w = append(w, float32(rng.NormFloat64()))
					}
				}
				if mode == modeGather {
					offs = nil
				}
				st, count, odt, payload := lookupSync(t, tb, encode(uint64(k), mode, dtype, idx, offs, w))
				if st != 0 {
					t.Fatalf("status %d", st)
				}
				if mode == modeGather {
					if count != len(idx) || odt != dtype || len(payload) != len(idx)*rb {
						t.Fatalf("gather: count %d dtype %d payload %d", count, odt, len(payload))
					}
					for i, r := range idx {
						if string(payload[i*rb:(i+1)*rb]) != string(data[int(r)*rb:int(r+1)*rb]) {
							t.Fatalf("gather row %d (index %d) differs", i, r)
						}
					}
					continue
				}
				if count != nbags || odt != format.DtypeF32 || len(payload) != nbags*int(dim)*4 {
					t.Fatalf("pooled: count %d dtype %d payload %d", count, odt, len(payload))
				}
				for b := 0; b < nbags; b++ {
					end := len(idx)
					if b+1 < nbags {
						end = int(offs[b+1])
					}
					for i := 0; i < int(dim); i++ {
						var want float64
						for j := int(offs[b]); j < end; j++ {
							v := float64(rowValue(data, rb, dtype, idx[j], i))
							if w != nil {
								v *= float64(w[j])
							}
							want += v
						}
						if mode == modeMean && end > int(offs[b]) {
							want /= float64(end - int(offs[b]))
						}
						got := float64(math.Float32frombits(binary.LittleEndian.Uint32(payload[(b*int(dim)+i)*4:])))
						if math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
							t.Fatalf("mode %d bag %d value %d: got %v, want %v", mode, b, i, got, want)
						}
					}
				}
			}
		}
	}
	// Every device holds shards of the tables.
	for _, d := range tt.tier.Status().Devices {
		if d.Shards == 0 {
			t.Errorf("device %d holds no shard: placement did not spread", d.ID)
		}
	}
}

func TestBadRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tt := newTestTier(t, []Model{{}}, DefaultSched)
	tb, _ := tt.table("t", 100, 8, format.DtypeF32, rng)
	good := encode(1, modeSum, format.DtypeF32, []int64{1, 2}, []int64{0}, nil)
	if _, err := tb.ParseLookup(good); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field string
		req   []byte
	}{
		{"indices", encode(1, modeSum, format.DtypeF32, []int64{1, 100}, []int64{0}, nil)},
		{"indices", encode(1, modeSum, format.DtypeF32, []int64{-1}, []int64{0}, nil)},
		{"dtype", encode(1, modeSum, format.DtypeF16, []int64{1}, []int64{0}, nil)},
		{"offsets", encode(1, modeSum, format.DtypeF32, []int64{1, 2}, []int64{1}, nil)},
		{"offsets", encode(1, modeSum, format.DtypeF32, []int64{1, 2}, []int64{0, 2, 1}, nil)},
		{"offsets", encode(1, modeSum, format.DtypeF32, []int64{1, 2}, []int64{0, 3}, nil)},
		{"flags", encode(1, modeMean, format.DtypeF32, []int64{1}, []int64{0}, []float32{1})},
		{"mode", encode(1, 7, format.DtypeF32, []int64{1}, []int64{0}, nil)},
		{"length", good[:len(good)-8]},
		{"length", good[:20]},
		{"magic", append([]byte{0}, good[1:]...)},
		{"b", encode(1, modeGather, format.DtypeF32, []int64{1}, []int64{0}, nil)},
	}
	for i, c := range cases {
		_, err := tb.ParseLookup(c.req)
		var fe *wire.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("case %d: got %v, want a FieldError on %q", i, err, c.field)
		}
	}
}

// gateBacking blocks reads until released, so tests can fill the queues
// before any piece is served.
type gateBacking struct {
	backing
	gate chan struct{}
}

func (g *gateBacking) ReadAt(p []byte, off int64) (int, error) {
	<-g.gate
	return g.backing.ReadAt(p, off)
}

// TestRoundRobinOrder checks the documented guarantee on one loader: once
// the loader frees up, it serves the classes' queues in turn, so a small
// request is served within one round however many large pieces wait;
// with --sched=fifo it waits behind all of them.
func TestRoundRobinOrder(t *testing.T) {
	for _, tc := range []struct {
		mode    SchedMode
		weights [maxClasses]int
	}{{SizeAware, [maxClasses]int{1, 1, 1}}, {SizeAware, [maxClasses]int{4, 2, 1}}, {FIFO, [maxClasses]int{1, 1, 1}}} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%s-%v", mode, tc.weights), func(t *testing.T) {
			cfg := DefaultSched
			cfg.Mode = mode
			cfg.Weights = tc.weights
			cfg.MaxPiece = 4096
			tt := newTestTier(t, []Model{{Channels: 1}}, cfg)
			rng := rand.New(rand.NewPCG(5, 6))
			tb, _ := tt.table("t", 4096, 16, format.DtypeF32, rng) // 64-byte rows, 64 per block
			d := tt.tier.devs[0]
			g := &gateBacking{backing: d.io, gate: make(chan struct{})}
			d.io = g
			var mu sync.Mutex
			var order []int
			d.trace = func(p *piece) {
				mu.Lock()
				order = append(order, p.req.class)
				mu.Unlock()
			}
			var wg sync.WaitGroup
			read := func(rows int) {
				defer wg.Done()
				buf := make([]byte, rows*64)
				if _, err := tb.ReadAt(buf, 0); err != nil {
					t.Error(err)
				}
			}
			wait := func(n int) { // until n pieces are queued or served
				for {
					mu.Lock()
					k := len(order)
					mu.Unlock()
					if k+d.queueLen() >= n {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			wg.Add(1)
			go read(600 * 4) // large: 2400 rows, 38 pieces; its first blocks the loader
			wait(38)
			// The loader must hold a large piece (blocked on the gate)
			// before the other classes queue: queued alone, the large
			// pieces could still all be waiting, and the round would start
			// elsewhere.
			for {
				mu.Lock()
				k := len(order)
				mu.Unlock()
				if k >= 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			wg.Add(1)
			go read(200) // medium: 4 pieces
			wait(42)
			wg.Add(1)
			go read(10) // small: 1 piece
			wait(43)
			close(g.gate)
			wg.Wait()
			small := -1
			for i, c := range order {
				if c == 0 {
					small = i
				}
			}
			t.Logf("%s: service order %v", mode, order)
			if mode == SizeAware {
				// order[0] is the large piece that held the loader; the
				// next round starts with the small class.
				if small != 1 {
					t.Fatalf("small request served at position %d, want 1 (first of the next round)", small)
				}
				// No class runs longer than its weight while another
				// class has pieces waiting.
				left := [maxClasses]int{}
				for _, c := range order[1:] {
					left[c]++
				}
				run := 0
				for i := 1; i < len(order); i++ {
					c := order[i]
					if i > 1 && order[i-1] == c {
						run++
					} else {
						run = 1
					}
					left[c]--
					others := 0
					for k := range left {
						if k != c {
							others += left[k]
						}
					}
					if run > tc.weights[c] && others > 0 {
						t.Fatalf("class %d served %d times in a row (weight %d) while others waited: %v", c, run, tc.weights[c], order)
					}
				}
			} else if small != len(order)-1 {
				t.Fatalf("FIFO: small request served at %d of %d, want last", small, len(order))
			}
		})
	}
}

// faultBacking fails or shortens transfers touching [badOff, badEnd).
type faultBacking struct {
	backing
	badOff, badEnd int64
	short          bool
	delay          time.Duration
}

func (f *faultBacking) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(f.delay)
	if off < f.badEnd && off+int64(len(p)) > f.badOff {
		if f.short {
			n, _ := f.backing.ReadAt(p[:len(p)/2], off)
			return n, nil
		}
		return 0, syscall.EIO
	}
	return f.backing.ReadAt(p, off)
}

func TestLoaderFaultsReachOnlyAffectedRequests(t *testing.T) {
	for _, short := range []bool{false, true} {
		t.Run(fmt.Sprintf("short=%v", short), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			tt := newTestTier(t, []Model{{}, {}}, DefaultSched)
			tb, data := tt.table("t", 2000, 32, format.DtypeF32, rng) // 128-byte rows, 128 rows per shard
			bad := tb.Shards()[3]
			d := tt.tier.dev(format.DevID(bad.Dev))
			d.io = &faultBacking{backing: d.io, badOff: int64(bad.Off), badEnd: int64(bad.Off) + 4096, short: short}
			// The slow device: the other one, every read delayed.
			other := tt.tier.dev(format.DevID(3 - bad.Dev))
			other.io = &faultBacking{backing: other.io, delay: 2 * time.Millisecond, badEnd: -1}
			badRow := int64(bad.FirstRow) + 5 // in the first block of shard 3
			var wg sync.WaitGroup
			for k := 0; k < 60; k++ {
				wg.Add(1)
				go func(k int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(k), 9))
					idx := []int64{int64(r.IntN(2000)), int64(r.IntN(2000))}
					hit := k%3 == 0
					if hit {
						idx = append(idx, badRow)
					}
					touches := false
					for _, i := range idx {
						if i >= int64(bad.FirstRow) && i < int64(bad.FirstRow)+32 { // first block: 32 rows
							touches = true
						}
					}
					st, _, _, payload := lookupSync(t, tb, encode(uint64(k), modeGather, format.DtypeF32, idx, nil, nil))
					if touches {
						if st != uint32(syscall.EIO) {
							t.Errorf("request %d touches the bad block but got status %d", k, st)
						}
						return
					}
					if st != 0 {
						t.Errorf("request %d does not touch the bad block but got status %d", k, st)
						return
					}
					for i, r := range idx {
						if string(payload[i*128:(i+1)*128]) != string(data[r*128:(r+1)*128]) {
							t.Errorf("request %d row %d wrong", k, r)
						}
					}
				}(k)
			}
			wg.Wait()
			if st := tt.tier.Status(); st.Classes[0].Failed == 0 {
				t.Errorf("no failed request counted: %+v", st.Classes[0])
			}
		})
	}
}

func TestMovesUnderConcurrentLookups(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	tt := newTestTier(t, []Model{{}, {}, {}}, DefaultSched)
	tb, data := tt.table("t", 3000, 16, format.DtypeF32, rng) // 64-byte rows, 256 per shard
	rb := int(tb.rowBytes)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lookups sync.WaitGroup
	for w := 0; w < 4; w++ {
		lookups.Add(1)
		go func(w int) {
			defer lookups.Done()
			r := rand.New(rand.NewPCG(uint64(w), 13))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				idx := []int64{int64(r.IntN(3000)), int64(r.IntN(3000)), int64(r.IntN(3000))}
				st, _, _, payload := lookupSync(t, tb, encode(uint64(k), modeGather, format.DtypeF32, idx, nil, nil))
				if st != 0 {
					t.Errorf("lookup failed during moves: status %d", st)
					return
				}
				for i, row := range idx {
					if string(payload[i*rb:(i+1)*rb]) != string(data[int(row)*rb:int(row+1)*rb]) {
						t.Errorf("row %d read wrong during moves", row)
						return
					}
				}
			}
		}(w)
	}
	// Writers rewrite rows with the same bytes while shards move: a write
	// must reach the copy readers use after the move.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(14, 15))
		for k := 0; k < 200; k++ {
			row := r.IntN(3000)
			if _, err := tb.WriteAt(data[row*rb:(row+1)*rb], int64(row*rb)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for k := 0; k < 40; k++ {
		i := rng.IntN(len(tb.shards))
		var err error
		switch e := tb.shards[i].cur.Load().e; {
		case e.RDev != 0 && k%2 == 0:
			err = tt.tier.DropReplica(tb, i)
		case e.RDev == 0 && k%3 == 0:
			err = tt.tier.MoveShard(tb, i, 0, true)
		default:
			err = tt.tier.MoveShard(tb, i, 0, false)
		}
		if err != nil {
			t.Fatalf("move %d of shard %d: %v", k, i, err)
		}
	}
	wg.Wait()
	close(stop)
	lookups.Wait()
	want := tb.Shards()
	// After a remount the translation table is what readers last saw and
	// the data is intact.
	tt.close()
	tt.open()
	in, err := tt.p.Lookup(tt.p.Root(), "t")
	if err != nil {
		t.Fatal(err)
	}
	tb2, _ := tt.tier.Table(in)
	got := tb2.Shards()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("shard %d after remount %+v, before %+v", i, got[i], want[i])
		}
	}
	buf := make([]byte, len(data))
	if _, err := tb2.ReadAt(buf, 0); err != nil || string(buf) != string(data) {
		t.Fatalf("table differs after moves and remount (err %v)", err)
	}
	if st := tt.tier.Status(); st.Moves == 0 && st.Replicas == 0 {
		t.Fatalf("status shows no moves")
	}
}

// A reader pinned on a location that a replication superseded still reads
// the primary; moving the primary next must wait for that reader before
// the space is reused (a replication that did not wait left the reader
// behind: it read another shard's rows).
func TestMoveAfterReplicationWaitsForOlderReaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	tt := newTestTier(t, []Model{{}, {}, {}}, DefaultSched)
	tb, data := tt.table("t", 3000, 16, format.DtypeF32, rng) // 64-byte rows, 600 per shard
	rb := int(tb.rowBytes)
	const s = 1
	a := tt.tier.dev(tb.shards[s].cur.Load().e.Dev)
	var others []format.DevID
	for _, d := range tt.tier.devs {
		if d != a {
			others = append(others, d.ID)
		}
	}
	s2 := -1 // a full-size shard elsewhere, to reuse shard s's space on a
	for i := 0; i < len(tb.shards)-1; i++ {
		if tb.shards[i].cur.Load().e.Dev != a.ID {
			s2 = i
			break
		}
	}
	if s2 < 0 {
		t.Fatal("every shard is on one device")
	}
	// Hold the lookup's read of shard s on a until released.
	var armed atomic.Bool
	armed.Store(true)
	reached, release := make(chan struct{}), make(chan struct{})
	a.trace = func(p *piece) {
		if !p.write && armed.CompareAndSwap(true, false) {
			close(reached)
			<-release
		}
	}
	row := int64(s)*int64(tb.hdr.ShardRows) + 5
	r, err := tb.ParseLookup(encode(1, modeGather, format.DtypeF32, []int64{row}, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan []byte, 1)
	tb.Lookup(r, func(b []byte) { res <- b })
	<-reached
	moved := make(chan error, 1)
	go func() {
		err := tt.tier.MoveShard(tb, s, others[0], true) // replica: the new location shares the primary
		if err == nil {
			err = tt.tier.MoveShard(tb, s, others[1], false) // primary off a: its space is freed
		}
		if err == nil {
			err = tt.tier.MoveShard(tb, s2, a.ID, false) // and reused
		}
		moved <- err
	}()
	select {
	case err := <-moved:
		close(release)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(300 * time.Millisecond): // the moves wait for the reader, as they should
		close(release)
		if err := <-moved; err != nil {
			t.Fatal(err)
		}
	}
	b := <-res
	if st := binary.LittleEndian.Uint32(b[4:]); st != 0 {
		t.Fatalf("lookup status %d", st)
	}
	if got := b[wire.ResultHeaderSize:]; string(got) != string(data[int(row)*rb:int(row+1)*rb]) {
		t.Fatalf("row %d read wrong: the moves reused its space while it was being read", row)
	}
}

func TestSpaceMapBestFitAndRelease(t *testing.T) {
	s := newSpaceMap(1<<20, 5*4096)
	var punched [][2]int64
	s.punch = func(off, n int64) error { punched = append(punched, [2]int64{off, n}); return nil }
	a, _ := s.reserve(4096)
	b, _ := s.reserve(3 * 4096)
	c, _ := s.reserve(4096)
	d, _ := s.reserve(2 * 4096)
	_, _ = s.reserve(4096) // keeps the high-water mark above d
	if a != 4096 || b != 2*4096 || c != 5*4096 || d != 6*4096 {
		t.Fatalf("fresh reservations at %d %d %d %d", a, b, c, d)
	}
	s.release(b, 3*4096)
	s.release(d, 2*4096)
	// Best fit: a 2-block request takes d's hole, not b's.
	if off, _ := s.reserve(2 * 4096); off != d {
		t.Fatalf("best fit chose %d, want %d", off, d)
	}
	s.release(a, 4096) // coalesces with b's hole: 4 blocks retained, under the threshold
	if st := s.stats(); st.Retained != 4*4096 || len(punched) != 0 {
		t.Fatalf("retained %d, punched %v (threshold 5 blocks)", st.Retained, punched)
	}
	s.retain = 3 * 4096
	s.release(c, 4096) // one 5-block hole now, over the threshold: punched
	if st := s.stats(); st.Retained != 0 || len(punched) != 1 || punched[0] != [2]int64{4096, 5 * 4096} {
		t.Fatalf("retained %d, punched %v (threshold 3 blocks)", st.Retained, punched)
	}
	if _, ok := s.reserve(1 << 20); ok {
		t.Fatal("reserved beyond capacity")
	}
	if err := s.load([]extent{{off: 4096, n: 8192}, {off: 8192, n: 4096}}); err == nil {
		t.Fatal("overlapping used ranges loaded without error")
	}
}

// TestMigratorReplicatesHotShard: reads concentrated on one shard of a
// device while the other device idles make the migrator replicate that
// shard there; lookups stay correct and then use both copies.
func TestMigratorReplicatesHotShard(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	tt := newTestTier(t, []Model{{}, {}}, DefaultSched)
	tb, data := tt.table("t", 4000, 64, format.DtypeF32, rng) // 256-byte rows, 5 shards
	// Everything on device 1 first.
	for i := range tb.shards {
		if tb.shards[i].cur.Load().e.Dev != 1 {
			if err := tt.tier.MoveShard(tb, i, 1, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	hot := 2
	first, end := tb.hdr.ShardRange(hot)
	buf := make([]byte, (end-first)*uint64(tb.rowBytes))
	var read int64
	for read < 8<<20 {
		if _, err := tb.ReadAt(buf, int64(first)*tb.rowBytes); err != nil {
			t.Fatal(err)
		}
		read += int64(len(buf))
	}
	// Whatever the machine's speed, the pass sees 8 MiB in a 10 ms period
	// on device 1 and nothing on device 2.
	tt.tier.mig.every = 10 * time.Millisecond
	tt.tier.mig.last = time.Now().Add(-10 * time.Millisecond)
	tt.tier.balance()
	got := tb.shards[hot].cur.Load().e
	if got.RDev != 2 {
		t.Fatalf("after %d MiB of reads of shard %d on device 1: entry %+v, want a replica on device 2 (status %+v)",
			read>>20, hot, got, tt.tier.Status().Devices)
	}
	for i := range tb.shards {
		if e := tb.shards[i].cur.Load().e; i != hot && e.RDev != 0 {
			t.Errorf("cold shard %d replicated too: %+v", i, e)
		}
	}
	// Reads of the replicated shard stay correct.
	if _, err := tb.ReadAt(buf, int64(first)*tb.rowBytes); err != nil || string(buf) != string(data[int64(first)*tb.rowBytes:int64(end)*tb.rowBytes]) {
		t.Fatalf("replicated shard reads wrong (err %v)", err)
	}
	if st := tt.tier.Status(); st.Replications != 1 {
		t.Fatalf("status replications %d, want 1", st.Replications)
	}
}

// TestLargeNotStarvedBySmall: with the device kept saturated by small
// requests (a closed loop of 64 in flight), a large request still
// completes while the small load goes on: weighted round-robin gives the
// large class at least one piece per round.
func TestLargeNotStarvedBySmall(t *testing.T) {
	m := Model{Lat: 100 * time.Microsecond, Channels: 2, Sector: 512}
	tt := newTestTier(t, []Model{m}, DefaultSched)
	rng := rand.New(rand.NewPCG(31, 32))
	tb, _ := tt.table("t", 50000, 64, format.DtypeF32, rng)
	lookup := func(rows int, seed uint64, done func()) {
		r := rand.New(rand.NewPCG(seed, 1))
		idx := make([]int64, rows)
		for i := range idx {
			idx[i] = int64(r.IntN(50000))
		}
		req, err := tb.ParseLookup(encode(seed, modeSum, format.DtypeF32, idx, []int64{0}, nil))
		if err != nil {
			t.Error(err)
			return
		}
		tb.Lookup(req, func([]byte) { done() })
	}
	stop := make(chan struct{})
	slots := make(chan struct{}, 64)
	var smallDone sync.WaitGroup
	var small atomic.Int64
	go func() {
		for k := uint64(0); ; k++ {
			select {
			case <-stop:
				return
			case slots <- struct{}{}:
			}
			smallDone.Add(1)
			lookup(60, k, func() { small.Add(1); <-slots; smallDone.Done() })
		}
	}()
	for small.Load() < 64 { // the small class is saturating the device
		time.Sleep(time.Millisecond)
	}
	largeDone := make(chan int64, 1)
	lookup(600, 1<<40, func() { largeDone <- small.Load() })
	select {
	case atSmall := <-largeDone:
		t.Logf("large request (600 rows) completed while small requests kept going (%d small done by then)", atSmall)
	case <-time.After(2 * time.Minute):
		t.Fatalf("a large request did not complete under a saturating small load: starved")
	}
	close(stop)
	smallDone.Wait()
}

// putValue stores v as value i of a row of dtype.
func putValue(row []byte, dtype uint8, i int, v float32) {
	switch dtype {
	case format.DtypeF32:
		binary.LittleEndian.PutUint32(row[4*i:], math.Float32bits(v))
	case format.DtypeF16:
		binary.LittleEndian.PutUint16(row[2*i:], f32ToF16(v))
	case format.DtypeBF16:
		binary.LittleEndian.PutUint16(row[2*i:], uint16(math.Float32bits(v)>>16))
	}
}
