package core

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// treeState is the logical state of a pool: for each path, its type,
// size, link count, xattrs and a hash of its bytes.
func treeState(t *testing.T, fs *FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walkDir func(dir *Inode, path string)
	walkDir = func(dir *Inode, path string) {
		for pos := uint64(0); ; {
			e, ok := fs.ReadDir(dir, pos)
			if !ok {
				return
			}
			pos = e.Next
			in := fs.Inode(e.Ino)
			if in == nil {
				t.Fatalf("%s/%s: entry names free inode %d", path, e.Name, e.Ino)
			}
			p := path + "/" + e.Name
			out[p] = describe(t, fs, in)
			if in.IsDir() {
				walkDir(in, p)
			}
		}
	}
	walkDir(fs.Root(), "")
	return out
}

func describe(t *testing.T, fs *FS, in *Inode) string {
	t.Helper()
	a := in.Attr()
	var xs []string
	for _, name := range fs.Listxattr(in) {
		v, err := fs.Getxattr(in, name)
		if err != nil {
			t.Fatalf("getxattr %d %s: %v", in.Ino, name, err)
		}
		xs = append(xs, fmt.Sprintf("%s=%x", name, sha256.Sum256(v)))
	}
	sort.Strings(xs)
	s := fmt.Sprintf("mode %o size %d nlink %d xattrs %v", a.Mode, a.Size, a.Nlink, xs)
	if a.Mode&format.ModeType == format.ModeReg {
		s += fmt.Sprintf(" data %x", sha256.Sum256(fileBytes(t, fs, in)))
	}
	return s
}

func fileBytes(t *testing.T, fs *FS, in *Inode) []byte {
	t.Helper()
	b := make([]byte, in.Attr().Size)
	if _, err := fs.ReadAt(in, b, 0); err != nil {
		t.Fatalf("read inode %d: %v", in.Ino, err)
	}
	return b
}

func diffStates(got, want map[string]string, skip string) []string {
	var d []string
	for p, w := range want {
		if p == skip {
			continue
		}
		if g, ok := got[p]; !ok {
			d = append(d, p+": missing")
		} else if g != w {
			d = append(d, fmt.Sprintf("%s: %s, want %s", p, g, w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			d = append(d, p+": unexpected")
		}
	}
	sort.Strings(d)
	return d
}

// injectFixture is a pool with a file /a (the target of the operation
// under test), a bystander /b, and a directory /d one entry short of a
// second directory block.
type injectFixture struct {
	fs   *FS
	f    *pmem.Faulty
	rec  *pmem.Recorder
	a, d *Inode
}

const aSize = 4*bs - 1000 // the last block partly used: growth clears its tail

func newInjectFixture(t *testing.T) *injectFixture {
	t.Helper()
	fs, f, rec, _ := faultyPoolOf(t, 4<<20) // small: every case copies it a few times
	x := &injectFixture{fs: fs, f: f, rec: rec}
	x.a = fileWith(t, fs, "a", bytes.Repeat([]byte{1}, aSize))
	fileWith(t, fs, "b", bytes.Repeat([]byte{2}, 3*bs+5))
	var err error
	if x.d, err = fs.Create(fs.Root(), "d", NewInode{Mode: format.ModeDir | 0o755}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < format.DirentsPerBlock; i++ {
		if _, err := fs.Create(x.d, fmt.Sprintf("e%02d", i), NewInode{Mode: format.ModeReg | 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Setxattr(x.a, "user.k", []byte("value"), 0); err != nil {
		t.Fatal(err)
	}
	return x
}

// injectOp is an operation on the fixture; lo, hi bound the bytes of /a
// it may store into in place (which a failure may leave lost).
type injectOp struct {
	name   string
	kinds  []pmem.Op
	run    func(x *injectFixture) error
	lo, hi int64
}

var injectOps = []injectOp{
	{"overwrite", []pmem.Op{pmem.OpWrite}, func(x *injectFixture) error {
		_, err := x.fs.Write(x.a, bs+100, bytes.Repeat([]byte{7}, bs), false)
		return err
	}, bs + 100, 2*bs + 100},
	// Delayed commit: the write only stores; fsync (TestDelayedCommit*) persists it.
	{"extending write", []pmem.Op{pmem.OpWrite}, func(x *injectFixture) error {
		_, err := x.fs.Write(x.a, aSize-10, bytes.Repeat([]byte{8}, 3*bs), false)
		return err
	}, aSize - 10, aSize},
	{"fallocate", []pmem.Op{pmem.OpPunch, pmem.OpWrite, pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		return x.fs.Fallocate(x.a, 2*bs, 6*bs, 0)
	}, 0, 0},
	{"punch hole", []pmem.Op{pmem.OpWrite, pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		return x.fs.Fallocate(x.a, 100, 2*bs, FallocPunchHole|FallocKeepSize)
	}, 100, 2*bs + 100},
	{"truncate up", []pmem.Op{pmem.OpWrite, pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		return x.fs.Truncate(x.a, 6*bs)
	}, 0, 0},
	{"truncate down", []pmem.Op{pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		return x.fs.Truncate(x.a, bs+7)
	}, 0, 0},
	{"create growing a directory", []pmem.Op{pmem.OpFallocate, pmem.OpPunch, pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		_, err := x.fs.Create(x.d, "new", NewInode{Mode: format.ModeReg | 0o644})
		return err
	}, 0, 0},
	{"rename", []pmem.Op{pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		return x.fs.Rename(x.fs.Root(), "b", x.d, "e03", 0)
	}, 0, 0},
	{"setxattr", []pmem.Op{pmem.OpFlush, pmem.OpFence}, func(x *injectFixture) error {
		return x.fs.Setxattr(x.a, "user.big", bytes.Repeat([]byte{9}, 3000), 0)
	}, 0, 0},
}

// TestInjectedMediumFailures fails, in turn, the n-th operation of each
// kind an operation issues (write, fallocate, punch, flush, fence; plain
// and torn writes), for every n the operation reaches. Either the
// operation fails (ErrIO, or ErrNoSpace for a full pool file) and nothing
// else changed: other files, the namespace, /a's size and attributes;
// /a's bytes only in the range the operation stored into, and if they
// are not what is durable, fsync reports ErrIO. Or the failure came after its
// commit point and the operation succeeded with its full effect. Both the
// crash image at the failure and the pool after Close pass recovery.Check
// and mount to that state.
func TestInjectedMediumFailures(t *testing.T) {
	total := 0
	for _, op := range injectOps {
		// The state after the operation, on a pool that does not fail.
		ref := newInjectFixture(t)
		before := treeState(t, ref.fs)
		if err := op.run(ref); err != nil {
			t.Fatalf("%s without faults: %v", op.name, err)
		}
		after := treeState(t, ref.fs)
		type variant struct {
			kind pmem.Op
			torn bool
			err  error
		}
		var variants []variant
		for _, k := range op.kinds {
			variants = append(variants, variant{k, false, nil})
			if k == pmem.OpWrite || k == pmem.OpFlush {
				variants = append(variants, variant{k, true, nil})
			}
			if k == pmem.OpFallocate || k == pmem.OpWrite {
				variants = append(variants, variant{k, false, pmem.ErrNoSpace})
			}
		}
		for _, v := range variants {
			for n := 1; ; n++ {
				name := fmt.Sprintf("%s/%s-%d", op.name, v.kind, n)
				if v.torn {
					name += "-torn"
				}
				if v.err != nil {
					name += "-nospace"
				}
				x := newInjectFixture(t)
				x.f.Inject(pmem.Injection{Ops: v.kind, Nth: n, Torn: v.torn, Err: v.err})
				err := op.run(x)
				fired := len(x.f.Failures()) > 0
				if !fired {
					if err != nil {
						t.Errorf("%s: failed with no fault: %v", name, err)
					}
					if n == 1 {
						t.Errorf("%s: the operation issues no %s", name, v.kind)
					}
					break
				}
				total++
				checkInjected(t, name, x, op, err, v.err != nil, before, after)
			}
		}
	}
	t.Logf("%d injected failures checked", total)
}

func checkInjected(t *testing.T, name string, x *injectFixture, op injectOp, opErr error, noSpace bool, before, after map[string]string) {
	t.Helper()
	fs := x.fs
	want, skip := after, ""
	if opErr != nil {
		want, skip = before, "/a"
		switch {
		case errors.Is(opErr, ErrIO):
		case noSpace && errors.Is(opErr, ErrNoSpace):
		default:
			t.Errorf("%s: error %v, want ErrIO (or ErrNoSpace)", name, opErr)
		}
	}
	crash := x.rec.Image(x.rec.Fences())
	x.f.Heal()

	// The crash image at the failure.
	if probs := checkProblems(t, pmem.NewRecorder(crash)); len(probs) > 0 {
		t.Errorf("%s: crash image: recovery.Check:\n  %s", name, strings.Join(probs, "\n  "))
	}
	var durable []byte // /a's bytes in the crash image
	cfs, _, err := Open(pmem.NewRecorder(crash), Options{})
	if err != nil {
		t.Errorf("%s: crash image: Open: %v", name, err)
	} else {
		cgot := treeState(t, cfs)
		if d := diffStates(cgot, want, "/a"); len(d) > 0 {
			t.Errorf("%s: crash image differs:\n  %s", name, strings.Join(d, "\n  "))
		}
		durable = fileBytes(t, cfs, cfs.Inode(x.a.Ino))
		if opErr != nil {
			checkTarget(t, name+": crash image", cgot["/a"], before["/a"], durable, op)
		}
	}

	// The live pool: nothing but /a's bytes in [lo, hi) changed, and if
	// they are not what is durable, fsync says so.
	got := treeState(t, fs)
	if d := diffStates(got, want, skip); len(d) > 0 {
		t.Errorf("%s (op error %v): live state differs:\n  %s", name, opErr, strings.Join(d, "\n  "))
	}
	if opErr != nil {
		b := fileBytes(t, fs, x.a)
		checkTarget(t, name+": live", got["/a"], before["/a"], b, op)
		ferr := fs.Fsync(x.a)
		if durable != nil && !bytes.Equal(b, durable) && !errors.Is(ferr, ErrIO) {
			t.Errorf("%s: /a's bytes are not what is durable and fsync says %v, want ErrIO", name, ferr)
		}
		// Rewrite what the failure may have lost, as an application would.
		old := bytes.Repeat([]byte{1}, aSize)
		if _, err := fs.Write(x.a, 0, old, false); err != nil {
			t.Fatalf("%s: rewrite: %v", name, err)
		}
		if err := fs.Fsync(x.a); err != nil {
			t.Errorf("%s: fsync after rewriting: %v", name, err)
		}
	}

	// Close and reopen: clean, and the state of the live pool.
	live := treeState(t, fs)
	if err := fs.Close(); err != nil {
		t.Errorf("%s: Close: %v", name, err)
		return
	}
	if probs := checkProblems(t, x.rec); len(probs) > 0 {
		t.Errorf("%s: after Close: recovery.Check:\n  %s", name, strings.Join(probs, "\n  "))
	}
	rfs, rep, err := Open(x.rec, Options{})
	if err != nil {
		t.Fatalf("%s: reopen: %v", name, err)
	}
	if !rep.WasClean {
		t.Errorf("%s: reopen: not clean", name)
	}
	if d := diffStates(treeState(t, rfs), live, ""); len(d) > 0 {
		t.Errorf("%s: reopened state differs:\n  %s", name, strings.Join(d, "\n  "))
	}
}

// checkTarget: /a's description differs from before only in its bytes
// b, and those only within [op.lo, op.hi), which a failed operation may
// leave old, new or mixed.
func checkTarget(t *testing.T, name, got, want string, b []byte, op injectOp) {
	t.Helper()
	if got == want {
		return
	}
	meta := func(s string) string { return s[:strings.Index(s, " data ")] }
	if meta(got) != meta(want) {
		t.Errorf("%s: /a is %s, want %s", name, got, want)
		return
	}
	for i, c := range b {
		if c != 1 && (int64(i) < op.lo || int64(i) >= op.hi) {
			t.Errorf("%s: /a byte %d is %d, outside the range [%d, %d) the operation stored into", name, i, c, op.lo, op.hi)
			return
		}
	}
}

// checkProblems runs recovery.Check; orphans are no problem (a mount frees
// them).
func checkProblems(t *testing.T, m pmem.Medium) []string {
	t.Helper()
	rep, err := recovery.Check(m)
	if err != nil {
		return []string{err.Error()}
	}
	var probs []string
	for _, p := range rep.Problems {
		if !strings.Contains(strings.ToLower(p.What), "orphan") {
			probs = append(probs, p.String())
		}
	}
	return probs
}
