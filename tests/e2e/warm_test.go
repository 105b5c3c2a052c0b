package e2e_test

import (
	"os"
	"testing"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestWarmBlocksAcrossCrash: a checkpoint saved over another leaves the
// old one's blocks warm (status warm_bytes, -o warm-bytes/warm-decay
// parsed), the next save reuses them (the warm bytes drop to zero with
// nothing punched), and after a kill -9 the next mount finds the blocks
// freed before the crash still warm and its decay punches them; the new
// file never reads old bytes, and fsck stays clean (the harness checks).
func TestWarmBlocksAcrossCrash(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "64MiB"), "-o", "warm-bytes=16MiB,warm-decay=1h")
	save := func(seed uint64, n int) []byte {
		t.Helper()
		data := randBytes(seed, n)
		writeFileSync(t, fs.Path("ckpt.tmp"), data, 0o644)
		must(t, rename(fs.Path("ckpt.tmp"), fs.Path("ckpt")))
		return data
	}
	save(1, 4<<20)
	save(2, 4<<20) // frees the first
	if w := statusCount(t, fs, "warm_bytes"); w != 4<<20 {
		t.Fatalf("warm_bytes %d after replacing a 4 MiB checkpoint, want 4 MiB", w)
	}
	save(3, 4<<20) // takes the first one's blocks, frees the second's
	if w, p := statusCount(t, fs, "warm_bytes"), statusCount(t, fs, "warm_punched_cap_bytes"); w != 4<<20 || p != 0 {
		t.Fatalf("after a third save: warm_bytes %d, punched by the cap %d; want 4 MiB and 0 (the save reused the warm blocks)", w, p)
	}
	// A new file written sparsely over warm blocks reads zeros between.
	f, err := os.Create(fs.Path("sparse"))
	must(t, err)
	_, err = f.WriteAt([]byte("x"), 1<<20+5)
	must(t, err)
	must(t, f.Truncate(2<<20))
	must(t, f.Close())
	got := readFile(t, fs.Path("sparse"))
	want := make([]byte, 2<<20)
	want[1<<20+5] = 'x'
	wantBytes(t, "a sparse file over warm blocks", got, want)

	last := save(4, 4<<20)
	fs.Kill(t)
	fs.Args = []string{"--warm-decay", "10ms"}
	fs = fs.Remount(t)
	wantBytes(t, "the checkpoint after the crash", readFile(t, fs.Path("ckpt")), last)
	if !eventually(func() bool { return statusCount(t, fs, "warm_punched_decay_bytes") >= 4<<20 }) {
		t.Fatalf("the decay after the crash punched %d bytes, want at least the 4 MiB freed before it (warm_bytes %d)",
			statusCount(t, fs, "warm_punched_decay_bytes"), statusCount(t, fs, "warm_bytes"))
	}
}
