package recovery_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
)

// TestReproLinkIntoRemovedDir links a file into a directory that was
// removed, its inode number already reused by a new symlink: the pool must
// still mount afterwards (DESIGN §Inode lifetime).
func TestReproLinkIntoRemovedDir(t *testing.T) {
	fs, m := pooltest.MustOpen(t, pooltest.Options{Size: 4 << 20})
	root := fs.Root()
	d := mustV[*core.Inode](t)(fs.Create(root, "d", dirMode))
	f := mustV[*core.Inode](t)(fs.Create(root, "f", regMode))
	must(t, fs.Rmdir(root, "d"))
	s := mustV[*core.Inode](t)(fs.Create(root, "s", core.NewInode{Mode: format.ModeLnk | 0o777, Target: "f"}))
	t.Logf("removed dir %d, new symlink %d", d.Ino, s.Ino)
	t.Logf("Link into the removed directory: %v", fs.Link(f, d, "x"))
	for _, p := range check(t, m).Problems {
		t.Log(p)
	}
	must(t, fs.Close())
	if _, _, err := core.Open(m, core.Options{}); err != nil {
		t.Fatalf("remount: %v", err)
	}
}
