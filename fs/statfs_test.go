package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStatfsAfterUnlink: the blocks of a removed file show free in the
// next statfs, as on a local file system (xfstests generic/015 fills the
// disk, removes the file and checks df at once), although the pool frees
// them only when the kernel forgets the inode (kref.go).
func TestStatfsAfterUnlink(t *testing.T) {
	mnt, _ := mountPoolFS(t, false)
	free := func() uint64 {
		t.Helper()
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		return st.Bfree
	}
	data := bytes.Repeat([]byte{7}, 8<<20)
	// The root directory's first entry block stays once made.
	if err := os.WriteFile(filepath.Join(mnt, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := free()
	// Without core.WaitForgets most rounds are late.
	const rounds = 20
	late := 0
	for i := 0; i < rounds; i++ {
		path := filepath.Join(mnt, "f")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if got := free(); got != start {
			late++
			t.Logf("round %d: %d free blocks right after the unlink, %d before the file was written", i, got, start)
		}
	}
	if late > 0 {
		t.Errorf("%d of %d statfs calls right after an unlink missed the file's blocks", late, rounds)
	}
}
