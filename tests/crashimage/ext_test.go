package crashimage_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/format"
)

// The state a tree snapshot does not show, recorded after every step and
// checked in every crash image next to the tree (script.extra):
// segmented-I/O sessions (DESIGN.md §Two-layer log), embedding tables and
// the SSD-tier registry.

// sessPhase is where a file's segmented session stands.
type sessPhase int

const (
	sessNone     sessPhase = iota // never started, or abandoned
	sessOpen                      // open: F_log_addr set
	sessFinished                  // closed as finished (F_flag = 1)
)

func (p sessPhase) String() string { return [...]string{"no session", "open", "finished"}[p] }

// sessGen is one session a script started: its layout and the bytes it
// writes (srcBytes of seed at the file offset).
type sessGen struct {
	threads int
	size    uint64
	seed    uint64
	segs    [][2]uint64
	src     []byte // srcBytes(seed, 0, size)
}

// sessState is a file's session after a step.
type sessState struct {
	ph  sessPhase
	gen int // index in ext.gens
	// tails: open, the persisted tails Session() reported (a crash may not
	// go back behind them); closed, the last ones, or the segment ends if
	// the session finished by completing every segment. Bytes before them
	// are durable. nil: nothing promised (a truncate or punch changed the
	// file under the session).
	tails []uint64
}

// tableWant is a table's descriptor after a step.
type tableWant struct {
	hdr    format.TableHeader
	shards []format.ShardEntry
}

// extState is the state after one step.
type extState struct {
	sess   map[core.Ino]sessState
	tables map[core.Ino]tableWant
	tier   []format.TierDevice
}

// ext records and checks the extra state of a script.
type ext struct {
	s      *script
	gens   []sessGen
	files  map[core.Ino]int // session files: the gen of their current or last session
	states []extState       // parallel to s.steps
	// completed: set by a step that closes a session by completing it
	// (the tails are then the segment ends).
	completed map[core.Ino]bool
	// broken: set by a step that changed a session file's bytes under its
	// session (truncate, punch): nothing is promised about them any more.
	broken map[core.Ino]bool

	mu       sync.Mutex
	observed map[int]map[core.Ino]obsTails // per fence: the tails a crash there showed
	checks   map[string]int                // what the checks saw, for the log
}

type obsTails struct {
	gen   int
	tails []uint64
}

// newExt installs the hooks on s; steps[0] (after Open) gets its state.
func newExt(s *script) *ext {
	x := &ext{s: s, files: map[core.Ino]int{}, completed: map[core.Ino]bool{}, broken: map[core.Ino]bool{},
		observed: map[int]map[core.Ino]obsTails{}, checks: map[string]int{}}
	s.afterRecord = x.record
	s.extra = x.check
	s.recoveryWrites = x.recoveryWrites
	x.record()
	return x
}

// record captures the state after the step just recorded (and fills in
// the states of steps recorded before the hooks were installed).
func (x *ext) record() {
	p := x.s.p
	tier, err := embedding.Meta{S: p}.TierDevices()
	if err != nil {
		x.s.t.Fatalf("after step %d: SSD-tier registry: %v", len(x.s.steps)-1, err)
	}
	st := extState{sess: map[core.Ino]sessState{}, tables: map[core.Ino]tableWant{}, tier: tier}
	var prev extState
	if len(x.states) > 0 {
		prev = x.states[len(x.states)-1]
	}
	for ino, gi := range x.files {
		in := p.Inode(ino)
		if in == nil { // unlinked: the file and its session are gone
			delete(x.files, ino)
			continue
		}
		ss := sessState{ph: sessNone, gen: gi}
		if old, ok := prev.sess[ino]; ok && old.gen == gi {
			ss.tails = old.tails
		}
		if info, ok := p.Session(in); ok {
			ss.ph = sessOpen
			ss.tails = nil
			for _, sg := range info.Segments {
				ss.tails = append(ss.tails, sg.Tail)
			}
		} else if _, ff, _, _, _ := rawSessionFields(p.Medium().Bytes(), p.Superblock(), ino); ff == 1 {
			ss.ph = sessFinished
		}
		if x.completed[ino] {
			ss.tails = nil
			for _, sg := range x.gens[gi].segs {
				ss.tails = append(ss.tails, sg[1])
			}
		}
		if x.broken[ino] {
			ss.tails = nil
		}
		st.sess[ino] = ss
	}
	clear(x.completed)
	clear(x.broken)
	for _, in := range p.Tables() {
		hdr, _ := in.Table()
		shards, err := embedding.Meta{S: p}.TableShards(in)
		if err != nil {
			x.s.t.Fatalf("after step %d: table %d: %v", len(x.s.steps)-1, in.Ino, err)
		}
		st.tables[in.Ino] = tableWant{hdr, shards}
	}
	for len(x.states) < len(x.s.steps) {
		x.states = append(x.states, st)
	}
}

// close closes the pool like script.close; its state is the last step's.
func (x *ext) close() {
	x.s.close()
	for len(x.states) < len(x.s.steps) {
		x.states = append(x.states, x.states[len(x.states)-1])
	}
}

// rawSessionFields reads an inode's session fields from the media.
func rawSessionFields(b []byte, sb format.Superblock, ino core.Ino) (threads, fflag uint32, flog format.Blk, size uint64, mode uint32) {
	off := sb.InodeOff(ino)
	d, err := format.DecodeInode(b[off : off+format.InodeSize])
	if err != nil {
		return 0, 0, 0, 0, 0
	}
	return d.SessionFields()
}

// srcBytes returns the bytes [off, off+n) of the source seed names: each
// byte depends on its file offset only, so any part can be checked alone.
func srcBytes(seed uint64, off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := (uint64(off)+uint64(i))/8*0x9e3779b97f4a7c15 ^ seed*0xbf58476d1ce4e5b9
		x ^= x >> 29
		b[i] = byte(x>>(8*((uint64(off)+uint64(i))%8))) | 1 // never zero
	}
	return b
}

// check compares the recovered pool p with the state after step c, for a
// crash after fence k (evicted: before fence k+1, with early evictions).
func (x *ext) check(p *core.FS, k, c int, evicted bool) error {
	want := x.states[c]
	got, err := embedding.Meta{S: p}.TierDevices()
	if err != nil {
		return fmt.Errorf("SSD-tier registry: %v", err)
	}
	if !slices.Equal(got, want.tier) {
		// A step that registers several devices (the tier attaching new
		// directories) does so one at a time: in flight, any prefix.
		lo := candidates(x.s, k)[0]
		prefix := func(a, b []format.TierDevice) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }
		if c == lo || !prefix(got, want.tier) || !prefix(x.states[lo].tier, got) {
			return fmt.Errorf("SSD-tier registry %+v, want %+v", got, want.tier)
		}
		x.count("images with a part of the devices registered")
	}
	if err := x.checkTables(p, want); err != nil {
		return err
	}
	return x.checkSessions(p, k, c, evicted)
}

// checkTables: every table the step left is whole, with its translation
// table; no other inode is a table.
func (x *ext) checkTables(p *core.FS, want extState) error {
	seen := 0
	for _, in := range p.Tables() {
		w, ok := want.tables[in.Ino]
		if !ok {
			return fmt.Errorf("inode %d is a table, want none there", in.Ino)
		}
		seen++
		hdr, _ := in.Table()
		if hdr != w.hdr {
			return fmt.Errorf("table %d: header %+v, want %+v", in.Ino, hdr, w.hdr)
		}
		shards, err := embedding.Meta{S: p}.TableShards(in)
		if err != nil {
			return fmt.Errorf("table %d: translation table: %v", in.Ino, err)
		}
		if !slices.Equal(shards, w.shards) {
			for i := range shards {
				if i < len(w.shards) && shards[i] != w.shards[i] {
					return fmt.Errorf("table %d: shard %d is %+v, want %+v (a move is old or new, whole)", in.Ino, i, shards[i], w.shards[i])
				}
			}
			return fmt.Errorf("table %d: %d shards, want %d", in.Ino, len(shards), len(w.shards))
		}
	}
	if seen != len(want.tables) {
		return fmt.Errorf("%d tables, want %d", seen, len(want.tables))
	}
	if seen > 0 {
		x.count("images with tables checked")
	}
	return nil
}

// checkSessions: each session file shows the step's session phase; an
// open session's tails are not behind what had been persisted when the
// crash came, not past the segment, and every byte before them is the
// session's; no other file has a session open. The tails of an eviction
// image (evicted) are not fence k's: they are not compared with the next
// fence's.
func (x *ext) checkSessions(p *core.FS, k, c int, evicted bool) error {
	want := x.states[c]
	// The tails promised at fence k: those of the last step that had
	// returned by then (the step in flight only adds to them).
	var floor extState
	if lo := candidates(x.s, k)[0]; lo >= 0 {
		floor = x.states[lo]
	}
	b, sb := p.Medium().Bytes(), p.Superblock()
	obs := map[core.Ino]obsTails{}
	for _, in := range p.Inodes() {
		if _, ok := p.Session(in); ok {
			if w, ok := want.sess[in.Ino]; !ok || w.ph != sessOpen {
				return fmt.Errorf("inode %d has a session open, want none", in.Ino)
			}
		}
	}
	for ino, w := range want.sess {
		in := p.Inode(ino)
		if in == nil {
			return fmt.Errorf("session file %d is gone", ino)
		}
		info, open := p.Session(in)
		threads, ff, flog, size, _ := rawSessionFields(b, sb, ino)
		switch {
		case open && w.ph != sessOpen:
			return fmt.Errorf("inode %d: an open session, want %s", ino, w.ph)
		case !open && flog != 0:
			return fmt.Errorf("inode %d: F_log_addr %d set but no session loaded", ino, flog)
		case !open && ff == 1 && w.ph != sessFinished:
			return fmt.Errorf("inode %d: a finished session (F_flag 1), want %s", ino, w.ph)
		case !open && ff == 0 && w.ph != sessNone:
			return fmt.Errorf("inode %d: no session (F_flag 0, Process_num %d), want %s", ino, threads, w.ph)
		case !open && ff == 0 && (threads != 0 || size != 0):
			return fmt.Errorf("inode %d: no session but Process_num %d, session size %d", ino, threads, size)
		}
		if w.gen < 0 {
			continue
		}
		g := x.gens[w.gen]
		tails := w.tails
		if open {
			x.count("open sessions checked")
			if info.Threads != g.threads || info.Size != g.size || info.Done || len(info.Segments) != len(g.segs) {
				return fmt.Errorf("inode %d: session %+v, want %d threads over %d bytes", ino, info, g.threads, g.size)
			}
			var min []uint64
			if f, ok := floor.sess[ino]; ok && f.ph == sessOpen && f.gen == w.gen {
				min = f.tails
			}
			tails = nil
			for i, sg := range info.Segments {
				if sg.Start != g.segs[i][0] || sg.Start+sg.Length != g.segs[i][1] {
					return fmt.Errorf("inode %d: segment %d is [%d, +%d), want [%d, %d)", ino, i, sg.Start, sg.Length, g.segs[i][0], g.segs[i][1])
				}
				if sg.Tail < g.segs[i][0] || sg.Tail > g.segs[i][1] {
					return fmt.Errorf("inode %d: segment %d: resume point %d outside the segment [%d, %d)", ino, i, sg.Tail, g.segs[i][0], g.segs[i][1])
				}
				if min != nil && sg.Tail < min[i] {
					return fmt.Errorf("inode %d: segment %d: resume point %d is behind the tail %d persisted before the crash", ino, i, sg.Tail, min[i])
				}
				if sg.Done && sg.Tail != g.segs[i][1] {
					return fmt.Errorf("inode %d: segment %d done with its tail at %d, not its end %d", ino, i, sg.Tail, g.segs[i][1])
				}
				tails = append(tails, sg.Tail)
			}
			obs[ino] = obsTails{w.gen, tails}
		} else if w.ph == sessFinished {
			x.count("finished sessions checked")
		}
		// Every byte before a resume point is durable and the session's.
		if tails == nil {
			continue
		}
		data := make([]byte, in.Attr().Size)
		if _, err := p.ReadAt(in, data, 0); err != nil {
			return fmt.Errorf("inode %d: read: %v", ino, err)
		}
		for i, sg := range g.segs {
			lo, hi := sg[0], tails[i]
			if hi > uint64(len(data)) {
				return fmt.Errorf("inode %d: segment %d: resume point %d past the file's %d bytes", ino, i, hi, len(data))
			}
			if bytes.Equal(data[lo:hi], g.src[lo:hi]) {
				continue
			}
			j := lo
			for data[j] == g.src[j] {
				j++
			}
			return fmt.Errorf("inode %d (%s): segment %d: byte %d is not the session's, but the resume point is %d: the tail passed bytes that are not durable",
				ino, w.ph, i, j, hi)
		}
	}
	if evicted {
		return nil
	}
	// Tails never go back from one fence to the next.
	x.mu.Lock()
	defer x.mu.Unlock()
	if prev, ok := x.observed[k-1]; ok {
		for ino, o := range obs {
			if po, ok := prev[ino]; ok && po.gen == o.gen {
				for i := range o.tails {
					if o.tails[i] < po.tails[i] {
						return fmt.Errorf("inode %d: segment %d: resume point %d is behind the %d a crash one fence earlier showed", ino, i, o.tails[i], po.tails[i])
					}
				}
			}
		}
	}
	x.observed[k] = obs
	return nil
}

func (x *ext) count(what string) {
	x.mu.Lock()
	x.checks[what]++
	x.mu.Unlock()
}

// recoveryWrites says whether Open of img will finish a segment or close
// a session (DESIGN.md §Two-layer log, mount-time recovery): a segment's
// Tail_ptr at its end with P_flag still 0, or every P_flag set.
func (x *ext) recoveryWrites(img []byte) bool {
	sb, _, err := core.ReadSuperblock(sliceMedium(img))
	if err != nil {
		return false
	}
	for ino := range x.files {
		_, _, flog, _, _ := rawSessionFields(img, sb, ino)
		if flog == 0 || !sb.ValidData(flog, 1) {
			continue
		}
		hdr, err := format.DecodeFLogHeader(img[flog.Off():])
		if err != nil || !sb.ValidData(flog, uint64(hdr.Blocks)) || !sb.ValidData(hdr.PLog, uint64(hdr.PBlocks)) {
			return true // let the re-crash checks see what Open makes of it
		}
		all := true
		for i := 0; i < int(hdr.Count); i++ {
			e, err := format.DecodeFEntry(img[flog.Off()+format.FLHeader+format.Off(i*format.FLEntry):])
			if err != nil {
				return true // let the re-crash checks see what Open makes of it
			}
			tail := binary.LittleEndian.Uint64(img[hdr.PLog.Off()+format.Off(i*format.PLogLine):])
			if e.PFlag == 0 && tail == e.PartHead+e.PLength {
				x.count("images whose Open finishes a segment (then crashed at each of its fences)")
				return true
			}
			all = all && e.PFlag == 1
		}
		if all {
			x.count("images whose Open closes a finished session (then crashed at each of its fences)")
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------
// Steps.

// remount closes the pool cleanly and opens it again with opts (open
// sessions stay open across it).
func (x *ext) remount(opts core.Options) {
	s := x.s
	s.t.Helper()
	s.do("remount", nil, func() error {
		if err := s.p.Close(); err != nil {
			return err
		}
		p, _, err := core.Open(s.tee, opts)
		if err != nil {
			return err
		}
		s.p = p
		return nil
	})
}

// start opens a write session of threads segments over size bytes.
func (x *ext) start(path string, threads int, size uint64, seed uint64) {
	s := x.s
	s.t.Helper()
	in := s.lookup(path)
	segLen := size / uint64(threads) / format.BlockSize * format.BlockSize
	g := sessGen{threads: threads, size: size, seed: seed, src: srcBytes(seed, 0, int(size))}
	for i := 0; i < threads; i++ {
		end := uint64(i+1) * segLen
		if i == threads-1 {
			end = size
		}
		g.segs = append(g.segs, [2]uint64{uint64(i) * segLen, end})
	}
	x.gens = append(x.gens, g)
	x.files[in.Ino] = len(x.gens) - 1
	s.do(fmt.Sprintf("start session on %s (%d threads, %d bytes)", path, threads, size), nil, func() error {
		return s.p.StartSession(in, threads, size, format.SessionWrite)
	})
}

// sw writes [off, off+n) of the session's bytes: progress of the segments
// it covers.
func (x *ext) sw(path string, off, n uint64) {
	s := x.s
	s.t.Helper()
	in := s.lookup(path)
	g := x.gens[x.files[in.Ino]]
	_, wasOpen := s.p.Session(in)
	s.writeIno(fmt.Sprintf("session write %s [%d,%d)", path, off, off+n), in, int64(off), g.src[off:off+n])
	if _, open := s.p.Session(in); wasOpen && !open {
		// Every segment completed: the session closed by itself, with
		// every byte durable. Fix up the state just recorded.
		x.completed[in.Ino] = true
		x.states = x.states[:len(x.states)-1]
		x.record()
	}
}

// finish is FinishSession (dnnfs recover --finish).
func (x *ext) finish(path string) {
	s := x.s
	s.t.Helper()
	s.do("finish session on "+path, nil, func() error { return s.p.FinishSession(s.lookup(path)) })
}

// abandon is AbandonSession (setfattr -x user.dnnfs.session).
func (x *ext) abandon(path string) {
	s := x.s
	s.t.Helper()
	s.do("abandon session on "+path, nil, func() error { return s.p.AbandonSession(s.lookup(path)) })
}

// breaks notes that the next step changes path's bytes under its session.
func (x *ext) breaks(path string) { x.broken[x.s.lookup(path).Ino] = true }

// register adds an SSD-tier device.
func (x *ext) register(name string, id byte) {
	s := x.s
	s.t.Helper()
	s.do("register SSD-tier device "+name, nil, func() error {
		got, err := embedding.Meta{S: s.p}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{id, 0xd, 0xe, 0xf}, Path: "/ssd/" + name})
		if err == nil && got != format.DevID(id) {
			err = fmt.Errorf("device id %d, want %d", got, id)
		}
		return err
	})
}

// createTable makes the empty file path a table.
func (x *ext) createTable(path string, rows uint64, dim uint32, dtype uint8, shardRows uint64, place func(i int) format.ShardEntry) {
	s := x.s
	s.t.Helper()
	hdr, err := format.NewTableHeader(rows, dim, dtype, shardRows)
	if err != nil {
		s.t.Fatal(err)
	}
	shards := make([]format.ShardEntry, hdr.Shards)
	for i := range shards {
		shards[i] = place(i)
	}
	s.do(fmt.Sprintf("create table %s (%d shards, %d descriptor blocks)", path, hdr.Shards, hdr.Blocks), nil, func() error {
		return embedding.Meta{S: s.p}.CreateTable(s.lookup(path), hdr, shards)
	})
}

// setShard rewrites shard i of the table at path with what change makes
// of its entry (a move, a replica added or dropped: embedding/migrate.go).
func (x *ext) setShard(path string, i int, what string, change func(e *format.ShardEntry)) {
	s := x.s
	s.t.Helper()
	s.do(fmt.Sprintf("%s: shard %d of %s", what, i, path), nil, func() error {
		in := s.lookup(path)
		shards, err := embedding.Meta{S: s.p}.TableShards(in)
		if err != nil {
			return err
		}
		e := shards[i]
		e.Gen++
		change(&e)
		return embedding.Meta{S: s.p}.SetShard(in, i, e)
	})
}

// logChecks reports what the extra checks saw.
func (x *ext) logChecks(t interface{ Logf(string, ...any) }) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t.Logf("session and table checks run on the crash images (per candidate state tried): %v", x.checks)
}
