package e2e_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestCommitIntervalAcrossCrash tries to break rule 2 of the durability
// contract: appends not fsync'ed survive a kill -9 of the daemon once the
// committer has run (--commit-interval), and are lost without harm when
// it has not; fsync'ed data survives either way, and the pool checks
// clean (the harness runs fsck at cleanup).
func TestCommitIntervalAcrossCrash(t *testing.T) {
	t.Parallel()
	data := randBytes(7, 3<<20+123)
	t.Run("committer ran", func(t *testing.T) {
		fs := harness.Mount(t, harness.Mkfs(t, "64MiB"), "--commit-interval", "50ms")
		writeFile(t, fs.Path("f"), data, 0o644)
		// The committer runs every 50 ms; status counts the files it has
		// yet to commit.
		for deadline := time.Now().Add(30 * time.Second); statusCount(t, fs, "pending_files") > 0; {
			if time.Now().After(deadline) {
				t.Fatal("files still pending 30 s after the write")
			}
			time.Sleep(20 * time.Millisecond)
		}
		fs.Kill(t)
		fs = fs.Remount(t)
		wantBytes(t, "appended file after the crash", readFile(t, fs.Path("f")), data)
	})
	t.Run("never committed", func(t *testing.T) {
		fs := harness.Mount(t, harness.Mkfs(t, "64MiB"), "--commit-interval", "0")
		writeFileSync(t, fs.Path("synced"), data[:4096], 0o644)
		writeFile(t, fs.Path("f"), data, 0o644)
		if n := statusCount(t, fs, "pending_files"); n != 1 {
			t.Fatalf("pending_files %d, want 1", n)
		}
		fs.Kill(t)
		fs = fs.Remount(t)
		if got := readFile(t, fs.Path("f")); len(got) != 0 {
			t.Fatalf("the never committed file has %d bytes after the crash, want 0 (created, not committed)", len(got))
		}
		wantBytes(t, "fsync'ed file after the crash", readFile(t, fs.Path("synced")), data[:4096])
		st, err := os.Stat(fs.Path("f"))
		if err != nil || st.Size() != 0 {
			t.Fatalf("stat after the crash: %v, %v", st, err)
		}
	})
}

// statusCount is counter name of `dnnfs status --json MNT`.
func statusCount(t *testing.T, fs *harness.FS, name string) uint64 {
	t.Helper()
	out, errOut, code := harness.Run(t, "status", "--json", fs.Mnt)
	if code != 0 {
		t.Fatalf("dnnfs status --json: exit %d: %s", code, errOut)
	}
	var st struct {
		Counters map[string]uint64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status JSON %q: %v", out, err)
	}
	v, ok := st.Counters[name]
	if !ok {
		t.Fatalf("status has no counter %q: %s", name, out)
	}
	return v
}
