package recovery_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

const testPoolSize = 8 << 20

var (
	regMode = core.NewInode{Mode: format.ModeReg | 0o644, UID: 1000, GID: 1000}
	dirMode = core.NewInode{Mode: format.ModeDir | 0o755, UID: 1000, GID: 1000}
)

// sample describes the files buildPool made.
type sample struct {
	ino map[string]format.Ino // path -> inode
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustV[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		must(t, err)
		return v
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// populate makes a small tree through the pool API:
//
//	/a              regular file, 3 blocks, xattr user.color; hard link /dir/a2
//	/dir/           20 files f00..f19 (two directory blocks), sub/, frag
//	/dir/sub/       deep/ (empty)
//	/dir/frag       24 one-block extents (an overflow block)
//	/link           symlink -> a
//	/renamed        was /dir/f20
//	/sparse         1 MiB hole then a block, fallocated tail (KEEP_SIZE)
func populate(t testing.TB, fs *core.FS) *sample {
	s := &sample{ino: map[string]format.Ino{}}
	root := fs.Root()
	create := func(dir *core.Inode, name, path string, ni core.NewInode) *core.Inode {
		in, err := fs.Create(dir, name, ni)
		must(t, err)
		s.ino[path] = in.Ino
		return in
	}
	a := create(root, "a", "/a", regMode)
	mustV[int](t)(fs.Write(a, 0, pattern(10000, 1), false))
	must(t, fs.Setxattr(a, "user.color", []byte("blue"), 0))
	dir := create(root, "dir", "/dir", dirMode)
	must(t, fs.Link(a, dir, "a2"))
	sub := create(dir, "sub", "/dir/sub", dirMode)
	create(sub, "deep", "/dir/sub/deep", dirMode)
	for i := 0; i <= 20; i++ {
		create(dir, fmt.Sprintf("f%02d", i), fmt.Sprintf("/dir/f%02d", i), regMode)
	}
	must(t, fs.Rename(dir, "f20", root, "renamed", 0))
	s.ino["/renamed"] = s.ino["/dir/f20"]
	delete(s.ino, "/dir/f20")
	frag := create(dir, "frag", "/dir/frag", regMode)
	for i := 0; i < 24; i++ {
		mustV[int](t)(fs.Write(frag, int64(2*i)*format.BlockSize, pattern(format.BlockSize, byte(i)), false))
	}
	create(root, "link", "/link", core.NewInode{Mode: format.ModeLnk | 0o777, Target: "a"})
	sp := create(root, "sparse", "/sparse", regMode)
	mustV[int](t)(fs.Write(sp, 1<<20, pattern(100, 9), false))
	must(t, fs.Fallocate(sp, 2<<20, 3*format.BlockSize, core.FallocKeepSize))
	return s
}

var (
	builtOnce   sync.Once
	builtImage  pmem.Medium
	builtSample *sample
)

// buildPool returns a copy of a pool formatted, populated and unmounted
// cleanly (built once per test binary).
func buildPool(t testing.TB) (pmem.Medium, *sample) {
	builtOnce.Do(func() {
		m := pmem.NewMemory(testPoolSize)
		must(t, core.Format(m, 1000, 1000))
		fs, _, err := core.Open(m, core.Options{})
		must(t, err)
		s := populate(t, fs)
		must(t, fs.Close())
		builtImage, builtSample = m, s
	})
	if builtImage == nil {
		t.Fatal("building the sample pool failed")
	}
	return clone(builtImage), builtSample
}

func clone(m pmem.Medium) pmem.Medium {
	c := pmem.NewMemory(m.Size())
	copy(c.Bytes(), m.Bytes())
	return c
}

// check runs Check and verifies that it did not store into the medium.
func check(t testing.TB, m pmem.Medium) *recovery.Report {
	t.Helper()
	before := bytes.Clone(m.Bytes())
	r, err := recovery.Check(m)
	if !bytes.Equal(before, m.Bytes()) {
		t.Fatal("Check changed the medium")
	}
	must(t, err)
	return r
}

func problems(r *recovery.Report) string {
	var b strings.Builder
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "\n\t%s (repairable %v)", p, p.Repairable)
	}
	return b.String()
}

func requireClean(t testing.TB, m pmem.Medium) *recovery.Report {
	t.Helper()
	r := check(t, m)
	if !r.Clean() {
		t.Fatalf("want a clean pool, got:%s", problems(r))
	}
	return r
}

// requireProblem checks that some problem's line contains all of parts.
func requireProblem(t testing.TB, r *recovery.Report, parts ...string) recovery.Problem {
	t.Helper()
	for _, p := range r.Problems {
		s := p.String()
		ok := true
		for _, part := range parts {
			ok = ok && strings.Contains(s, part)
		}
		if ok {
			return p
		}
	}
	t.Fatalf("no problem mentions %q; got:%s", parts, problems(r))
	return recovery.Problem{}
}

// repairClean repairs, then requires a clean check and a mount.
func repairClean(t testing.TB, m pmem.Medium) *recovery.Report {
	t.Helper()
	r, err := recovery.Repair(m)
	must(t, err)
	for _, l := range r.Repaired {
		t.Log("repaired:", l)
	}
	if !r.Clean() {
		t.Fatalf("not clean after Repair:%s", problems(r))
	}
	requireClean(t, m)
	requireMount(t, m)
	return r
}

// requireMount mounts a copy of m with the pool code and unmounts it.
func requireMount(t testing.TB, m pmem.Medium) {
	t.Helper()
	c := clone(m)
	fs, _, err := core.Open(c, core.Options{})
	if err != nil {
		t.Fatalf("core.Open of a pool Check calls clean: %v", err)
	}
	must(t, fs.Close())
}

func superOf(t testing.TB, m pmem.Medium) format.Superblock {
	sb, err := format.DecodeSuperblock(m.Bytes(), m.Size())
	if err != nil {
		sb, err = format.DecodeSuperblock(m.Bytes()[format.BlockSize:], m.Size())
	}
	must(t, err)
	return sb
}

func getInode(t testing.TB, m pmem.Medium, ino format.Ino) (format.Inode, format.Off) {
	sb := superOf(t, m)
	off := sb.InodeOff(ino)
	d, err := format.DecodeInode(m.Bytes()[off:])
	must(t, err)
	return d, off
}

func putInode(t testing.TB, m pmem.Medium, ino format.Ino, d format.Inode) {
	sb := superOf(t, m)
	d.Encode(m.Bytes()[sb.InodeOff(ino):])
}

// slotOf finds name in directory dir and returns the slot's byte offset.
func slotOf(t testing.TB, m pmem.Medium, dir format.Ino, name string) format.Off {
	t.Helper()
	off, ok := findSlot(t, m, dir, func(de format.Dirent, used bool) bool { return used && de.Name == name })
	if !ok {
		t.Fatalf("no entry %q in directory %d", name, dir)
	}
	return off
}

// freeSlot returns the offset of a free slot in a mapped block of dir.
func freeSlot(t testing.TB, m pmem.Medium, dir format.Ino) format.Off {
	t.Helper()
	off, ok := findSlot(t, m, dir, func(_ format.Dirent, used bool) bool { return !used })
	if !ok {
		t.Fatalf("no free slot in directory %d", dir)
	}
	return off
}

func findSlot(t testing.TB, m pmem.Medium, dir format.Ino, match func(format.Dirent, bool) bool) (format.Off, bool) {
	d, _ := getInode(t, m, dir)
	exts := d.Inline[:min(int(d.Extents), format.InlineExtents)]
	for k := uint64(0); k < d.Size/format.BlockSize; k++ {
		phys, ok := recovery.LookupExtent(exts, k)
		if !ok {
			continue
		}
		for s := uint64(0); s < format.DirentsPerBlock; s++ {
			off := phys.Off() + format.Off(s*format.DirentSize)
			de, used, err := format.DecodeDirent(m.Bytes()[off:])
			if err == nil && match(de, used) {
				return off, true
			}
		}
	}
	return 0, false
}

func putDirent(m pmem.Medium, off format.Off, de format.Dirent) {
	de.Encode(m.Bytes()[off:])
}

// mountLookup mounts a copy and resolves path.
func mountLookup(t testing.TB, m pmem.Medium, path string) (*core.FS, *core.Inode) {
	t.Helper()
	fs, _, err := core.Open(clone(m), core.Options{})
	must(t, err)
	in := fs.Root()
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" {
			continue
		}
		in, err = fs.Lookup(in, name)
		if err != nil {
			t.Fatalf("lookup %q in %s: %v", name, path, err)
		}
	}
	return fs, in
}
