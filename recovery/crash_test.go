package recovery_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// TestCrashImagesAreConsistent runs every kind of metadata operation on a
// Recorder and checks the pool a crash after each fence would leave: with
// the journal replayed (in Check's overlay), it must be consistent, and
// the pool code must mount it. This is the checker testing the mount code's
// persist ordering, fence by fence.
func TestCrashImagesAreConsistent(t *testing.T) {
	base := pmem.NewMemory(4 << 20)
	must(t, core.Format(base, 0, 0))
	rec := newRecorder(base.Bytes())
	fs, _, err := core.Open(rec, core.Options{TailInterval: format.BlockSize})
	must(t, err)
	marks := make([]string, rec.Fences()) // marks[k]: the operation running at fence k+1
	for i := range marks {
		marks[i] = "mount"
	}
	step := func(name string, f func()) {
		before := rec.Fences()
		f()
		for i := before; i < rec.Fences(); i++ {
			marks = append(marks, name)
		}
	}
	root := fs.Root()
	var a, d, sub, frag *core.Inode
	step("create", func() { a = mustV[*core.Inode](t)(fs.Create(root, "a", regMode)) })
	step("write into holes", func() { mustV[int](t)(fs.Write(a, 0, pattern(3*format.BlockSize+5, 1), false)) })
	step("overwrite", func() { mustV[int](t)(fs.Write(a, 10, pattern(100, 2), false)) })
	step("fsync", func() { must(t, fs.Fsync(a)) })
	step("mkdir", func() { d = mustV[*core.Inode](t)(fs.Create(root, "d", dirMode)) })
	step("mkdir sub", func() { sub = mustV[*core.Inode](t)(fs.Create(d, "sub", dirMode)) })
	step("symlink", func() {
		mustV[*core.Inode](t)(fs.Create(d, "ln", core.NewInode{Mode: format.ModeLnk | 0o777, Target: "../a"}))
	})
	step("link", func() { must(t, fs.Link(a, sub, "a-link")) })
	step("setxattr", func() { must(t, fs.Setxattr(a, "user.k", []byte("v"), 0)) })
	step("setxattr grow", func() { must(t, fs.Setxattr(a, "user.big", make([]byte, 6000), 0)) })
	step("removexattr", func() { must(t, fs.Removexattr(a, "user.k")) })
	for i := 0; i < 16; i++ { // the directory grows a second block
		step("create many", func() { mustV[*core.Inode](t)(fs.Create(d, fmt.Sprintf("f%d", i), regMode)) })
	}
	step("fragment", func() {
		frag = mustV[*core.Inode](t)(fs.Create(d, "frag", regMode))
		for i := 0; i < 12; i++ { // an extent overflow block
			mustV[int](t)(fs.Write(frag, int64(2*i)*format.BlockSize, pattern(10, byte(i)), false))
		}
	})
	step("truncate down", func() { must(t, fs.Truncate(frag, 5*format.BlockSize+1)) })
	step("truncate up", func() { must(t, fs.Truncate(frag, 40*format.BlockSize)) })
	step("fallocate", func() { must(t, fs.Fallocate(frag, 0, 30*format.BlockSize, 0)) })
	step("punch", func() {
		must(t, fs.Fallocate(frag, 3*format.BlockSize+7, 10*format.BlockSize, core.FallocPunchHole|core.FallocKeepSize))
	})
	step("rename", func() { must(t, fs.Rename(d, "f3", root, "moved", 0)) })
	step("rename replace", func() { must(t, fs.Rename(d, "f4", root, "moved", 0)) })
	step("rename exchange", func() { must(t, fs.Rename(root, "a", d, "sub", core.RenameExchange)) })
	step("rename dir", func() { must(t, fs.Rename(root, "a", d, "sub-back", 0)) }) // "a" is the directory now
	step("unlink", func() { must(t, fs.Unlink(d, "f5")) })
	step("unlink last link", func() { must(t, fs.Unlink(sub, "a-link")); must(t, fs.Unlink(d, "sub")) })
	step("unlink open", func() {
		f := mustV[*core.Inode](t)(fs.Lookup(d, "f6"))
		fs.Opened(f)
		must(t, fs.Unlink(d, "f6"))
		must(t, fs.Released(f))
	})
	step("mkdir+rmdir", func() {
		mustV[*core.Inode](t)(fs.Create(root, "tmp", dirMode))
		must(t, fs.Rmdir(root, "tmp"))
	})
	step("chmod", func() {
		mode := uint32(0o600)
		must(t, fs.Setattr(frag, core.SetAttr{Mode: &mode}))
	})
	var s1, s2 *core.Inode
	step("session start", func() {
		s1 = mustV[*core.Inode](t)(fs.Create(root, "s1", regMode))
		must(t, fs.StartSession(s1, 3, 12*format.BlockSize, format.SessionWrite))
	})
	step("session writes", func() {
		for i := 0; i < 12; i++ { // every segment finishes: the session closes
			mustV[int](t)(fs.WriteAs(core.Caller{TID: uint32(100 + i/4)}, s1, int64(i)*format.BlockSize, pattern(format.BlockSize, byte(i)), false))
		}
	})
	step("session left open", func() {
		s2 = mustV[*core.Inode](t)(fs.Create(root, "s2", regMode))
		must(t, fs.StartSession(s2, 2, 8*format.BlockSize, format.SessionWrite))
		for i := 0; i < 3; i++ {
			mustV[int](t)(fs.WriteAs(core.Caller{TID: 7}, s2, int64(i)*format.BlockSize, pattern(format.BlockSize, 1), false))
		}
	})
	step("truncate abandons a session", func() {
		s3 := mustV[*core.Inode](t)(fs.Create(root, "s3", regMode))
		must(t, fs.StartSession(s3, 2, 4*format.BlockSize, format.SessionWrite))
		mustV[int](t)(fs.WriteAs(core.Caller{TID: 8}, s3, 0, pattern(format.BlockSize, 3), false))
		must(t, fs.Truncate(s3, format.BlockSize))
	})
	var tab *core.Inode
	step("register SSD-tier device", func() {
		mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{1}, Path: "/ssd/a"}))
	})
	step("register second device", func() {
		mustV[format.DevID](t)(embedding.Meta{S: fs}.RegisterTierDevice(format.TierDevice{UUID: [16]byte{2}, Path: "/ssd/b"}))
	})
	step("create table", func() {
		tab = makeTable(t, fs, "tab", 1000, 16, format.DtypeF32, 300,
			[]format.ShardEntry{{Dev: 1, Off: 4096}, {Dev: 2, Off: 4096}, {Dev: 1, Off: 1 << 20}, {Dev: 2, Off: 1 << 20}})
		makeTable(t, fs, "tab2", 10, 4, format.DtypeBF16, 10, []format.ShardEntry{{Dev: 2, Off: 2 << 20}})
	})
	step("move shard", func() {
		must(t, embedding.Meta{S: fs}.SetShard(tab, 2, format.ShardEntry{Dev: 2, Off: 3 << 20, Gen: 1, RDev: 1, ROff: 3 << 20}))
	})
	step("unlink table", func() { must(t, fs.Unlink(root, "tab")) })
	step("unmount", func() { must(t, fs.Close()) })

	n := rec.Fences()
	pending := 0
	// Images are built incrementally (fence k's flushes onto image k-1);
	// Check reads each in place, the mount code gets a copy.
	img := sliceMedium(rec.Image(0))
	mounted := make(sliceMedium, len(img))
	mountEvery := 1
	if testing.Short() || raceEnabled {
		mountEvery = 7
	}
	for k := 0; k <= n; k++ {
		if k > 0 {
			rec.apply(img, k)
		}
		r, err := recovery.Check(img)
		what := "before the first fence"
		if k > 0 {
			what = marks[k-1]
		}
		if err != nil {
			t.Fatalf("crash after fence %d/%d (%s): %v", k, n, what, err)
		}
		if what == "unlink open" {
			// The file is open: a crash leaves it an orphan, legitimately.
			var rest []recovery.Problem
			for _, p := range r.Problems {
				if !strings.Contains(p.What, "orphan") {
					rest = append(rest, p)
				}
			}
			r.Problems = rest
		}
		if !r.Clean() {
			t.Errorf("crash after fence %d/%d (%s):%s", k, n, what, problems(r))
			continue
		}
		if r.JournalPending {
			pending++
		}
		if k%mountEvery != 0 && k != n {
			continue
		}
		// The mount code agrees.
		copy(mounted, img)
		pfs, _, err := core.Open(mounted, core.Options{})
		if err != nil {
			t.Errorf("crash after fence %d/%d (%s): Check is clean, core.Open: %v", k, n, what, err)
			continue
		}
		must(t, pfs.Close())
	}
	if !bytes.Equal(img, rec.Image(n)) {
		t.Fatal("the incremental images drifted from pmem.Recorder's")
	}
	// The last image has s2's session open: its logs are checked and owned.
	an, err := recovery.Analyze(img, true)
	must(t, err)
	owned := 0
	for _, c := range an.Claims {
		if c.Ino == s2.Ino && strings.HasPrefix(c.What, "session") {
			owned++
		}
	}
	if owned != 2 {
		t.Errorf("the open session's F_log and P_log are not claimed (%d claims)", owned)
	}
	if an.Rep.Tables != 1 || an.Rep.TierDevices != 2 {
		t.Errorf("the last image has %d tables and %d SSD-tier devices, want 1 and 2", an.Rep.Tables, an.Rep.TierDevices)
	}
	if pending == 0 {
		t.Error("no crash image had a committed transaction pending")
	}
	t.Logf("%d crash images, %d with a transaction pending", n+1, pending)
}

// recorder is pmem.Recorder's crash model (a store is durable once a flush
// of its cache line is followed by a fence) with the fences kept, so that
// images can be built one fence at a time instead of from scratch.
type recorder struct {
	*pmem.Recorder
	pending []rspan
	fences  [][]rspan
}

type rspan struct {
	off  int64
	data []byte
}

func newRecorder(initial []byte) *recorder {
	return &recorder{Recorder: pmem.NewRecorder(initial)}
}

func (r *recorder) Flush(off, n int64) error {
	size := int64(len(r.Bytes()))
	if n <= 0 || off >= size {
		return nil
	}
	start := max(off, 0) &^ (pmem.CacheLine - 1)
	end := min((min(off+n, size)+pmem.CacheLine-1)&^(pmem.CacheLine-1), size)
	r.pending = append(r.pending, rspan{start, append([]byte(nil), r.Bytes()[start:end]...)})
	return r.Recorder.Flush(off, n)
}

func (r *recorder) Fence() error {
	r.fences = append(r.fences, r.pending)
	r.pending = nil
	return r.Recorder.Fence()
}

func (r *recorder) Persist(off, n int64) error { r.Flush(off, n); return r.Fence() }

// Punch goes through r's own Persist, so the zeros are recorded here too.
func (r *recorder) Punch(off, n int64) error { return pmem.PunchByStores(r, off, n) }

// apply turns image k-1 into image k.
func (r *recorder) apply(img []byte, k int) {
	for _, s := range r.fences[k-1] {
		copy(img[s.off:], s.data)
	}
}

// sliceMedium is a DRAM medium over an existing image (no copy).
type sliceMedium []byte

func (m sliceMedium) Bytes() []byte                { return m }
func (m sliceMedium) Size() int64                  { return int64(len(m)) }
func (m sliceMedium) Flush(off, n int64) error     { return nil }
func (m sliceMedium) Fence() error                 { return nil }
func (m sliceMedium) Fallocate(off, n int64) error { return nil }
func (m sliceMedium) Punch(off, n int64) error     { return pmem.PunchByStores(m, off, n) }
func (m sliceMedium) WriteAt(p []byte, off int64) error {
	copy(m[off:off+int64(len(p))], p)
	return nil
}
func (m sliceMedium) Persist(off, n int64) error { return nil }
func (m sliceMedium) Kind() pmem.Kind            { return pmem.Memory }
func (m sliceMedium) Close() error               { return nil }
