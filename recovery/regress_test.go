package recovery_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
	"github.com/dnnfs/dnnfs/pmem"
)

// Fresh blocks partly covered by a write: their zeroed parts must be
// durable before the transaction that maps them.
func TestReproStaleBytesAfterCrash(t *testing.T) {
	base := pmem.NewMemory(4 << 20)
	must(t, core.Format(base, 0, 0))
	sb := superOf(t, base)
	b := base.Bytes()
	for i := sb.DataStart.Off(); i < format.Off(len(b)); i++ {
		b[i] = 0xAA // a freed file's old data
	}
	rec := pmem.NewRecorder(b)
	fs, _, err := core.Open(rec, core.Options{})
	must(t, err)
	f, err := fs.Create(fs.Root(), "f", regMode)
	must(t, err)
	mustV[int](t)(fs.Write(f, 1000, pattern(100, 1), false)) // returns: durable
	img := sliceMedium(rec.Image(rec.Fences()))              // crash now
	fs2, in := mountLookup(t, img, "/f")
	got := make([]byte, 1000)
	mustV[int](t)(fs2.ReadAt(in, got, 0))
	for i, c := range got {
		if c != 0 {
			t.Fatalf("after a crash, byte %d of the file reads %#x (stale data of a freed block), want 0", i, c)
		}
	}
}

func TestReproXattrSpuriousENOSPC(t *testing.T) {
	fs, _ := pooltest.MustOpen(t, pooltest.Options{Size: 4 << 20})
	root := fs.Root()
	must(t, fs.Setxattr(root, "user.x", []byte("1"), 0)) // xattr region at the first data block
	a, err := fs.Create(root, "a", regMode)              // root's directory block right after it
	must(t, err)
	must(t, fs.Removexattr(root, "user.x")) // the first data block is free again
	st := fs.Statfs()
	t.Logf("%d of %d blocks free", st.Free, st.Blocks)
	if err := fs.Setxattr(a, "user.big", make([]byte, 5000), 0); err != nil {
		t.Fatalf("Setxattr of a 2-block region with %d free blocks: %v", st.Free, err)
	}
}
