package recovery_test

import (
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// specialPool is a clean pool holding one node of every special type and
// an O_TMPFILE-style file that was given a name.
func specialPool(t *testing.T) (pmem.Medium, map[string]format.Ino) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	ino := map[string]format.Ino{}
	for _, c := range []struct {
		name string
		mode uint32
		rdev uint32
	}{
		{"fifo", format.ModeFifo | 0o640, 0},
		{"sock", format.ModeSock | 0o755, 0},
		{"null", format.ModeChr | 0o666, 1<<8 | 3},
		{"loop", format.ModeBlk | 0o600, 7<<8 | 200},
	} {
		in, err := fs.Create(fs.Root(), c.name, core.NewInode{Mode: c.mode, Rdev: c.rdev})
		must(t, err)
		ino[c.name] = in.Ino
	}
	tmp, err := fs.CreateTmpfile(fs.Root(), core.NewInode{Mode: format.ModeReg | 0o600})
	must(t, err)
	fs.Opened(tmp)
	mustV[int](t)(fs.Write(tmp, 0, pattern(5000, 3), false))
	must(t, fs.Link(tmp, fs.Root(), "published"))
	must(t, fs.Released(tmp))
	ino["published"] = tmp.Ino
	must(t, fs.Close())
	return m, ino
}

func TestSpecialFilesAreClean(t *testing.T) {
	m, ino := specialPool(t)
	r := requireClean(t, m)
	if r.Inodes != 6 || r.Files != 5 {
		t.Errorf("report %+v", r)
	}
	fs, _ := mountLookup(t, m, "/null")
	defer fs.Close()
	for name, want := range map[string]uint32{"fifo": format.ModeFifo | 0o640, "sock": format.ModeSock | 0o755,
		"null": format.ModeChr | 0o666, "loop": format.ModeBlk | 0o600, "published": format.ModeReg | 0o600} {
		a := fs.Inode(ino[name]).Attr()
		if a.Mode != want || a.Nlink != 1 || a.Size != 0 && name != "published" {
			t.Errorf("%s after remount: mode %#o nlink %d size %d, want mode %#o", name, a.Mode, a.Nlink, a.Size, want)
		}
	}
	if a := fs.Inode(ino["null"]).Attr(); a.Rdev != 1<<8|3 {
		t.Errorf("null: rdev %#x", a.Rdev)
	}
	if a := fs.Inode(ino["published"]).Attr(); a.Size != 5000 {
		t.Errorf("published tmpfile: size %d", a.Size)
	}
}

func TestSpecialFileFields(t *testing.T) {
	m, ino := specialPool(t)
	d, _ := getInode(t, m, ino["fifo"])
	d.Size, d.Rdev = 12, 5
	putInode(t, m, ino["fifo"], d)
	d, _ = getInode(t, m, ino["loop"])
	d.Extents, d.Inline[0] = 1, format.Extent{Logical: 0, Phys: superOf(t, m).DataStart + 100, Len: 1}
	putInode(t, m, ino["loop"], d)
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["fifo"]), "a FIFO has size 12")
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["fifo"]), "a FIFO has device number 0x5")
	requireProblem(t, r, fmt.Sprintf("inode %d", ino["loop"]), "block device maps data blocks")
	repairClean(t, m)
	d, _ = getInode(t, m, ino["fifo"])
	if d.Size != 0 || d.Rdev != 0 || d.Mode != format.ModeFifo|0o640 {
		t.Errorf("repaired FIFO: %+v", d)
	}
}
