package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// seekLayout builds one file of a SEEK_DATA/SEEK_HOLE case in dir.
type seekLayout struct {
	name  string
	build func(t *testing.T, fd int)
}

const blk = 4096

var seekLayouts = []seekLayout{
	{"empty", func(t *testing.T, fd int) {}},
	{"dense", func(t *testing.T, fd int) { pwriteFull(t, fd, randBytes(1, 3*blk+10), 0) }},
	{"sparse", func(t *testing.T, fd int) {
		pwriteFull(t, fd, randBytes(2, 100), 0)
		pwriteFull(t, fd, randBytes(3, 10), 5*blk+7)
		pwriteFull(t, fd, randBytes(4, blk), 6*blk)
		must(t, retry(func() error { return unix.Ftruncate(fd, 12*blk+123) }))
	}},
	{"leading-hole", func(t *testing.T, fd int) { pwriteFull(t, fd, []byte{1}, 3*blk) }},
	{"truncated-up", func(t *testing.T, fd int) { must(t, retry(func() error { return unix.Ftruncate(fd, 5*blk+1) })) }},
	{"punched", func(t *testing.T, fd int) {
		pwriteFull(t, fd, randBytes(5, 8*blk), 0)
		must(t, retry(func() error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 2*blk, 3*blk)
		}))
		must(t, retry(func() error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 7*blk, blk)
		}))
	}},
	// fallocate's blocks are holes until written, block by block.
	{"fallocated", func(t *testing.T, fd int) {
		must(t, retry(func() error { return unix.Fallocate(fd, 0, 0, 4*blk) }))
		pwriteFull(t, fd, []byte{1}, blk+5)
	}},
	{"fallocated-mixed", func(t *testing.T, fd int) {
		pwriteFull(t, fd, randBytes(8, blk), 0)
		must(t, retry(func() error { return unix.Fallocate(fd, 0, blk, 3*blk) }))
		pwriteFull(t, fd, randBytes(9, 2*blk), 3*blk+100)
		must(t, retry(func() error { return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 6*blk, 4*blk) }))
		pwriteFull(t, fd, []byte{2}, 9*blk)
	}},
	{"fallocated-overwritten", func(t *testing.T, fd int) {
		must(t, retry(func() error { return unix.Fallocate(fd, 0, 0, 3*blk) }))
		pwriteFull(t, fd, randBytes(10, 3*blk), 0)
	}},
}

// seekAnswers probes SEEK_DATA and SEEK_HOLE at every block edge (and one
// byte either side) up to past the end of the file, and far past it.
func seekAnswers(t *testing.T, path string) []string {
	t.Helper()
	fd := openFd(t, path, unix.O_RDONLY, 0)
	defer closeFd(t, fd)
	size := fstat(t, fd).Size
	offs := []int64{size - 1, size, size + 1, 1 << 40}
	for b := int64(0); b <= size/blk+1; b++ {
		offs = append(offs, b*blk, b*blk+1, b*blk+blk-1)
	}
	var out []string
	for _, off := range offs {
		if off < 0 {
			continue
		}
		for _, w := range []struct {
			name   string
			whence int
		}{{"SEEK_DATA", unix.SEEK_DATA}, {"SEEK_HOLE", unix.SEEK_HOLE}} {
			var got int64
			err := retry(func() (err error) { got, err = unix.Seek(fd, off, w.whence); return err })
			if err != nil {
				out = append(out, fmt.Sprintf("%s at %d: %s", w.name, off, errnoName(errnoOf(err))))
			} else {
				out = append(out, fmt.Sprintf("%s at %d: %d", w.name, off, got))
			}
		}
	}
	return out
}

// TestSeekDataHole: lseek SEEK_DATA and SEEK_HOLE answer exactly as on
// tmpfs: ENXIO at or past the end of the file (so SEEK_HOLE at 0 of an
// empty file too), holes at block granularity from the extent map, the
// end of the file an implicit hole, punched blocks holes, fallocated
// blocks holes until a write reaches them; the same after a remount.
func TestSeekDataHole(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	for _, l := range seekLayouts {
		for _, root := range []string{fs.Path(), ref} {
			fd := openFd(t, filepath.Join(root, l.name), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644)
			l.build(t, fd)
			closeFd(t, fd)
		}
	}
	compare := func(when string) {
		for _, l := range seekLayouts {
			got, want := seekAnswers(t, fs.Path(l.name)), seekAnswers(t, filepath.Join(ref, l.name))
			if len(got) != len(want) {
				t.Fatalf("%s%s: %d answers on dnnfs, %d on tmpfs (sizes differ?)", l.name, when, len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("%s%s: dnnfs %s; tmpfs %s", l.name, when, got[i], want[i])
				}
			}
			if g, w := fileSHA(t, fs.Path(l.name)), fileSHA(t, filepath.Join(ref, l.name)); g != w {
				t.Errorf("%s%s: content differs from tmpfs", l.name, when)
			}
		}
	}
	compare("")
	fs = fs.Remount(t)
	compare(" after a remount")
}

// TestSparseCopies: cp (default and --sparse=always) and tar -S copy a
// sparse file on dnnfs into sparse files with the same bytes and the same
// data/hole map.
func TestSparseCopies(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	src := fs.Path("src")
	fd := openFd(t, src, unix.O_RDWR|unix.O_CREAT, 0o644)
	pwriteFull(t, fd, randBytes(6, 2*blk), 1<<20)
	pwriteFull(t, fd, randBytes(7, blk), 9<<20)
	must(t, retry(func() error { return unix.Ftruncate(fd, 24<<20) }))
	closeFd(t, fd)
	srcMap := seekAnswers(t, src)
	srcBlocks := lstat(t, src).Blocks

	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	must(t, os.Mkdir(fs.Path("untar"), 0o755))
	run(fs.Path(), "cp", "src", "cp-default")
	run(fs.Path(), "cp", "--sparse=always", "src", "cp-always")
	archive := filepath.Join(t.TempDir(), "a.tar")
	run(fs.Path(), "tar", "-S", "-cf", archive, "src")
	run(fs.Path("untar"), "tar", "-S", "-xf", archive)

	for _, name := range []string{"cp-default", "cp-always", "untar/src"} {
		p := fs.Path(name)
		if got, want := fileSHA(t, p), fileSHA(t, src); got != want {
			t.Errorf("%s: content differs from the source", name)
		}
		if b := lstat(t, p).Blocks; b > srcBlocks {
			t.Errorf("%s: %d blocks allocated, the sparse source has %d", name, b, srcBlocks)
		}
		got := seekAnswers(t, p)
		for i := range got {
			if i < len(srcMap) && got[i] != srcMap[i] {
				t.Errorf("%s: %s; the source %s", name, got[i], srcMap[i])
				break
			}
		}
	}
}
