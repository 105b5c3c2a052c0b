package crashimage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// step is one completed operation of a script: the fence count when it
// returned, and the logical state right after it.
type step struct {
	name   string
	fences int  // rec.Fences() after the operation returned
	snap   tree // logical state after the operation
	// durable: what a crash right after the operation may show besides
	// unsure bytes: snap without the writes not committed yet (DESIGN.md
	// §Delayed commit), read by mounting a copy of the mapping.
	durable tree
	unsure  unsureMap // data bytes not promised durable after the operation
	// inflight: bytes the operation changes in place (stores into blocks
	// that were already mapped), which a crash while it runs may show old,
	// new or mixed. Only overwrites are atomic nowhere: metadata still is.
	inflight unsureMap
	// setup: a preparatory step whose own crash points are not examined
	// (there are too many of them; the steps after it are).
	setup bool
	ops   int // script.countOps() after the operation, if set
}

// script runs operations on a Recorder-backed pool and remembers, after
// each one, the fence count and the logical state. steps[0] is the state
// right after Open (the empty tree, or whatever the setup made).
type script struct {
	t        testing.TB
	rec      *pmem.Recorder
	tee      *tee // records the same flushes as rec, for fast incremental images
	p        *core.FS
	unsure   unsureMap
	inflight unsureMap // of the operation being run
	setup    bool      // steps being recorded are setup steps
	steps    []step
	countOps func() int      // medium operations so far (inject_test.go), or nil
	mountOps map[pmem.Op]int // inject_test.go: operations of each kind by the end of Open
	// fmtFences is the fence count after Format (crash points before it are
	// inside mkfs); openFences after Open.
	fmtFences, openFences int
	// Hooks of the sweeps of state the tree does not show (sessions,
	// tables, the SSD-tier registry; ext_test.go): afterRecord runs after
	// each step is recorded, extra checks a recovered pool against step c
	// for a crash after fence k (evicted: an eviction image of the crash
	// before fence k+1, evict_test.go), recoveryWrites says Open of img
	// will store (a session to finish or close).
	afterRecord    func()
	extra          func(p *core.FS, k, c int, evicted bool) error
	recoveryWrites func(img []byte) bool
	recrashes      atomic.Int64 // crash images inside recovery checked
}

const poolSize = 4 << 20 // format.MinPoolSize: every image is copied

// newScript formats a Recorder-backed pool of size bytes and opens it.
func newScript(t testing.TB, size int) *script {
	t.Helper()
	return newScriptOn(t, size, nil)
}

// newScriptOn formats and opens a pool on a Recorder of size bytes, seen
// through wrap if wrap is not nil (a medium that misbehaves, to test the
// test).
func newScriptOn(t testing.TB, size int, wrap func(pmem.Medium) pmem.Medium) *script {
	t.Helper()
	rec := pmem.NewTrackingRecorder(make([]byte, size)) // eviction sweeps: evict_test.go
	tm := newTee(rec)
	var m pmem.Medium = tm
	if wrap != nil {
		m = wrap(tm)
	}
	if err := core.Format(m, 0, 0); err != nil {
		t.Fatalf("Format: %v", err)
	}
	s := &script{t: t, rec: rec, tee: tm, unsure: unsureMap{}, fmtFences: rec.Fences()}
	p, _, err := core.Open(m, core.Options{CommitInterval: -1})
	if err != nil {
		t.Fatalf("Open after Format: %v", err)
	}
	s.p = p
	s.openFences = rec.Fences()
	s.record("open")
	return s
}

func (s *script) record(name string) {
	s.t.Helper()
	snap, err := snapshot(s.p)
	if err != nil {
		s.t.Fatalf("after %s: snapshot: %v", name, err)
	}
	durable := snap
	if s.p.PendingFiles() > 0 {
		if durable, err = mappingSnapshot(s.rec.Bytes()); err != nil {
			s.t.Fatalf("after %s: the mapping: %v", name, err)
		}
	}
	// Forget inodes that are gone (their numbers may be reused).
	for ino := range s.unsure {
		if s.p.Inode(ino) == nil {
			delete(s.unsure, ino)
		}
	}
	s.steps = append(s.steps, step{name: name, fences: s.rec.Fences(), snap: snap, durable: durable, unsure: s.unsure.clone(),
		inflight: s.inflight, setup: s.setup})
	if s.countOps != nil {
		s.steps[len(s.steps)-1].ops = s.countOps()
	}
	s.inflight = nil
	if s.afterRecord != nil {
		s.afterRecord()
	}
}

// changesInPlace notes that the running operation stores into [off, end) of
// ino in place.
func (s *script) changesInPlace(ino core.Ino, off, end uint64) {
	if s.inflight == nil {
		s.inflight = unsureMap{}
	}
	s.inflight[ino] = s.inflight[ino].add(off, end)
}

// do runs one operation that must succeed (wantErr nil) or fail with
// wantErr, and records the step.
func (s *script) do(name string, wantErr error, fn func() error) {
	s.t.Helper()
	err := fn()
	switch {
	case wantErr == nil && err != nil:
		s.t.Fatalf("step %d %s: %v", len(s.steps), name, err)
	case wantErr != nil && !errors.Is(err, wantErr):
		s.t.Fatalf("step %d %s: got error %v, want %v", len(s.steps), name, err, wantErr)
	}
	s.record(name)
}

// lookup resolves an absolute path.
func (s *script) lookup(path string) *core.Inode {
	s.t.Helper()
	in := s.p.Root()
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" {
			continue
		}
		next, err := s.p.Lookup(in, name)
		if err != nil {
			s.t.Fatalf("lookup %s: %s: %v", path, name, err)
		}
		in = next
	}
	return in
}

func split(path string) (dir, name string) {
	i := strings.LastIndex(path, "/")
	dir = path[:i]
	if dir == "" {
		dir = "/"
	}
	return dir, path[i+1:]
}

// pattern returns n deterministic pseudo-random bytes for seed.
func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32() | 1) // never zero: zeros would hide lost data
	}
	return b
}

// ---------------------------------------------------------------------
// Operations. Each updates the unsure model the way the durability
// contract describes it.

func (s *script) create(path string, perm uint32) {
	s.t.Helper()
	dir, name := split(path)
	s.do("create "+path, nil, func() error {
		_, err := s.p.Create(s.lookup(dir), name, core.NewInode{Mode: format.ModeReg | perm, UID: 1000, GID: 1000})
		return err
	})
}

func (s *script) mkdir(path string) {
	s.t.Helper()
	dir, name := split(path)
	s.do("mkdir "+path, nil, func() error {
		_, err := s.p.Create(s.lookup(dir), name, core.NewInode{Mode: format.ModeDir | 0o755})
		return err
	})
}

func (s *script) symlink(path, target string) {
	s.t.Helper()
	dir, name := split(path)
	s.do("symlink "+path, nil, func() error {
		_, err := s.p.Create(s.lookup(dir), name, core.NewInode{Mode: format.ModeLnk | 0o777, Target: target})
		return err
	})
}

// writeIno writes to an inode (which may be an open orphan).
func (s *script) writeIno(name string, in *core.Inode, off int64, data []byte) {
	s.t.Helper()
	s.do(name, nil, func() error {
		s.changesInPlace(in.Ino, uint64(off), uint64(off)+uint64(len(data)))
		n, err := s.p.Write(in, off, data, false)
		if err != nil {
			return err
		}
		if n != len(data) {
			return fmt.Errorf("wrote %d of %d bytes", n, len(data))
		}
		// Promised by fsync only. A write that allocates or extends
		// shows in the durable tree once a commit of the file maps it.
		s.unsure[in.Ino] = s.unsure[in.Ino].add(uint64(off), uint64(off)+uint64(len(data)))
		return nil
	})
}

// mappingSnapshot is the tree a pool shows when mounted from a copy of
// the bytes of its mapping: every store kept (a crash of the daemon, not
// the machine), the DRAM-only state of the live pool lost.
func mappingSnapshot(b []byte) (tree, error) {
	p, _, err := core.Open(pmem.MemoryOver(append([]byte(nil), b...)), core.Options{CommitInterval: -1})
	if err != nil {
		return nil, err
	}
	return snapshot(p)
}

func (s *script) write(path string, off int64, n int, seed uint64) {
	s.t.Helper()
	in := s.lookup(path)
	s.writeIno(fmt.Sprintf("write %s [%d,%d)", path, off, off+int64(n)), in, off, pattern(seed, n))
}

func (s *script) truncate(path string, size uint64) {
	s.t.Helper()
	in := s.lookup(path)
	s.do(fmt.Sprintf("truncate %s %d", path, size), nil, func() error {
		if err := s.p.Truncate(in, size); err != nil {
			return err
		}
		s.unsure[in.Ino] = s.unsure[in.Ino].remove(size, 1<<62)
		return nil
	})
}

func (s *script) fallocate(path string, off, n uint64, mode uint32) {
	s.t.Helper()
	in := s.lookup(path)
	s.do(fmt.Sprintf("fallocate %s [%d,%d) mode %d", path, off, off+n, mode), nil, func() error {
		size := in.Attr().Size
		if mode&core.FallocPunchHole != 0 {
			// Partial blocks at the edges are cleared in place.
			s.changesInPlace(in.Ino, off, min(off+n, size))
		}
		if err := s.p.Fallocate(in, off, n, mode); err != nil {
			return err
		}
		if mode&core.FallocPunchHole != 0 {
			s.unsure[in.Ino] = s.unsure[in.Ino].remove(off, min(off+n, size))
		}
		return nil
	})
}

func (s *script) fsync(path string) {
	s.t.Helper()
	in := s.lookup(path)
	s.do("fsync "+path, nil, func() error {
		if err := s.p.Fsync(in); err != nil {
			return err
		}
		delete(s.unsure, in.Ino)
		return nil
	})
}

func (s *script) rename(from, to string, flags uint32, wantErr error) {
	s.t.Helper()
	fd, fn := split(from)
	td, tn := split(to)
	s.do(fmt.Sprintf("rename %s %s flags %d", from, to, flags), wantErr, func() error {
		return s.p.Rename(s.lookup(fd), fn, s.lookup(td), tn, flags)
	})
}

func (s *script) link(target, path string, wantErr error) {
	s.t.Helper()
	dir, name := split(path)
	s.do(fmt.Sprintf("link %s %s", target, path), wantErr, func() error {
		return s.p.Link(s.lookup(target), s.lookup(dir), name)
	})
}

func (s *script) unlink(path string) {
	s.t.Helper()
	dir, name := split(path)
	s.do("unlink "+path, nil, func() error { return s.p.Unlink(s.lookup(dir), name) })
}

func (s *script) rmdir(path string, wantErr error) {
	s.t.Helper()
	dir, name := split(path)
	s.do("rmdir "+path, wantErr, func() error { return s.p.Rmdir(s.lookup(dir), name) })
}

func (s *script) setxattr(path, name string, value []byte, flags uint32, wantErr error) {
	s.t.Helper()
	s.do(fmt.Sprintf("setxattr %s %s (%d bytes)", path, name, len(value)), wantErr, func() error {
		return s.p.Setxattr(s.lookup(path), name, value, flags)
	})
}

func (s *script) removexattr(path, name string) {
	s.t.Helper()
	s.do(fmt.Sprintf("removexattr %s %s", path, name), nil, func() error {
		return s.p.Removexattr(s.lookup(path), name)
	})
}

func (s *script) chmod(path string, perm uint32) {
	s.t.Helper()
	s.do(fmt.Sprintf("chmod %s %o", path, perm), nil, func() error {
		return s.p.Setattr(s.lookup(path), core.SetAttr{Mode: &perm})
	})
}

func (s *script) utimens(path string) {
	s.t.Helper()
	at, mt := time.Unix(1e9, 5), time.Unix(1.5e9, 7)
	s.do("utimens "+path, nil, func() error {
		return s.p.Setattr(s.lookup(path), core.SetAttr{Atime: &at, Mtime: &mt})
	})
}

// close closes the pool cleanly; the tree is unchanged and every byte is
// durable afterwards.
func (s *script) close() {
	s.t.Helper()
	last := s.steps[len(s.steps)-1].snap
	if err := s.p.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	s.unsure = unsureMap{}
	s.steps = append(s.steps, step{name: "close", fences: s.rec.Fences(), snap: last, durable: last, unsure: unsureMap{}})
}
