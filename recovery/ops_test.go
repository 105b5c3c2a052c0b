package recovery_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// checkMounted checks the media of a mounted pool (every operation is a
// committed transaction, so they are consistent between operations); files
// open and unlinked are orphans, legitimately.
func checkMounted(t *testing.T, m pmem.Medium, what string) {
	t.Helper()
	a, err := recovery.Analyze(m, false)
	must(t, err)
	var rest []recovery.Problem
	for _, p := range a.Rep.Problems {
		if !strings.Contains(p.What, "orphan") {
			rest = append(rest, p)
		}
	}
	a.Rep.Problems = rest
	if !a.Rep.Clean() {
		t.Fatalf("%s:%s", what, problems(a.Rep))
	}
}

// TestRandomOpsKeepPoolConsistent runs random namespace and data
// operations through the pool API and checks the media after each one.
func TestRandomOpsKeepPoolConsistent(t *testing.T) {
	seeds, ops := 6, 400
	if testing.Short() || raceEnabled {
		seeds, ops = 2, 200
	}
	for seedN := 1; seedN <= seeds; seedN++ {
		r := rand.New(rand.NewPCG(uint64(seedN), 99))
		fs, m := pooltest.MustOpen(t, pooltest.Options{Size: 4 << 20})
		dirs := []*core.Inode{fs.Root()}
		var open []*core.Inode
		name := func() string { return fmt.Sprintf("n%d", r.IntN(12)) }
		lookup := func(d *core.Inode, reg bool) *core.Inode {
			in, err := fs.Lookup(d, name())
			if err != nil || (reg && in.Mode()&format.ModeType != format.ModeReg) {
				return nil
			}
			return in
		}
		for op := 0; op < ops; op++ {
			d := dirs[r.IntN(len(dirs))]
			var desc string
			switch r.IntN(14) {
			case 0, 1:
				n := name()
				desc = "create " + n
				if in, err := fs.Create(d, n, regMode); err == nil {
					_, err = fs.Write(in, int64(r.IntN(40000)), pattern(r.IntN(9000)+1, 1), false)
					desc += fmt.Sprintf(", write: %v", err)
				}
			case 2:
				n := name()
				in, err := fs.Create(d, n, dirMode)
				desc = fmt.Sprintf("mkdir %d/%s: %v", d.Ino, n, err)
				if err == nil {
					dirs = append(dirs, in)
				}
			case 3:
				n := name()
				desc = fmt.Sprintf("unlink %d/%s: %v", d.Ino, n, fs.Unlink(d, n))
			case 4:
				n := name()
				desc = fmt.Sprintf("rmdir %d/%s: %v", d.Ino, n, fs.Rmdir(d, n))
			case 5, 6:
				d2 := dirs[r.IntN(len(dirs))]
				n1, n2, fl := name(), name(), uint32(r.IntN(3))
				desc = fmt.Sprintf("rename %d/%s -> %d/%s flags %d: %v", d.Ino, n1, d2.Ino, n2, fl, fs.Rename(d, n1, d2, n2, fl))
			case 7:
				d2 := dirs[r.IntN(len(dirs))]
				// Not into a removed directory: core.Link does not check
				// for one and would write the dead directory's inode over
				// its reused slot.
				if in := lookup(d, false); in != nil && !in.IsDir() && d2.Attr().Nlink > 0 {
					n := name()
					desc = fmt.Sprintf("link %d -> %d/%s: %v", in.Ino, d2.Ino, n, fs.Link(in, d2, n))
				}
			case 8:
				if in := lookup(d, true); in != nil {
					desc = fmt.Sprintf("truncate %d: %v", in.Ino, fs.Truncate(in, uint64(r.IntN(50000))))
				}
			case 9:
				if in := lookup(d, false); in != nil {
					desc = fmt.Sprintf("setxattr %d: %v", in.Ino, fs.Setxattr(in, name(), make([]byte, r.IntN(9000)), 0))
				}
			case 10:
				if in := lookup(d, true); in != nil {
					mode := uint32(r.IntN(2) * (core.FallocPunchHole | core.FallocKeepSize))
					desc = fmt.Sprintf("fallocate %d mode %d: %v", in.Ino, mode, fs.Fallocate(in, uint64(r.IntN(30000)), uint64(r.IntN(30000)+1), mode))
				}
			case 11:
				n := name()
				_, err := fs.Create(d, n, core.NewInode{Mode: format.ModeLnk | 0o777, Target: "t"})
				desc = fmt.Sprintf("symlink %d/%s: %v", d.Ino, n, err)
			case 12:
				if in := lookup(d, false); in != nil && !in.IsDir() {
					fs.Opened(in)
					open = append(open, in)
					desc = fmt.Sprintf("open %d", in.Ino)
				}
			case 13:
				if len(open) > 0 {
					i := r.IntN(len(open))
					desc = fmt.Sprintf("release %d: %v", open[i].Ino, fs.Released(open[i]))
					open = append(open[:i], open[i+1:]...)
				}
			}
			checkMounted(t, m, fmt.Sprintf("seed %d op %d (%s)", seedN, op, desc))
		}
		must(t, fs.Close())
		requireClean(t, m)
		requireMount(t, m)
	}
}

// TestNoSpaceKeepsPoolConsistent fills the pool: every operation that
// fails for want of space must leave the media as they were.
func TestNoSpaceKeepsPoolConsistent(t *testing.T) {
	fs, m := pooltest.MustOpen(t, pooltest.Options{Size: 4 << 20})
	d, err := fs.Create(fs.Root(), "d", dirMode)
	must(t, err)
	failed := 0
	count := func(err error) {
		if err != nil {
			failed++
		}
	}
	for i := 0; i < 300; i++ {
		f, err := fs.Create(d, fmt.Sprintf("f%03d", i), regMode)
		if count(err); err != nil {
			continue
		}
		_, err = fs.Write(f, 0, pattern(3*format.BlockSize, byte(i)), false)
		count(err)
		count(fs.Setxattr(f, "user.v", make([]byte, 100+i*20), 0))
		_, err = fs.Create(d, fmt.Sprintf("l%03d", i), core.NewInode{Mode: format.ModeLnk | 0o777, Target: "x"})
		count(err)
		_, err = fs.Create(d, fmt.Sprintf("d%03d", i), dirMode)
		count(err)
		if i%7 == 0 {
			count(fs.Fallocate(f, 0, 40*format.BlockSize, 0))
		}
		checkMounted(t, m, fmt.Sprintf("file %d", i))
	}
	if failed == 0 {
		t.Fatal("the pool never filled up")
	}
	for i := 0; i < 300; i += 3 {
		fs.Unlink(d, fmt.Sprintf("f%03d", i))
	}
	for i := 0; i < 300; i++ {
		fs.Create(d, fmt.Sprintf("g%03d", i), regMode)
	}
	must(t, fs.Close())
	requireClean(t, m)
	requireMount(t, m)
}
