// Package recover_test runs the session commands of the dnnfs binary end to
// end: `dnnfs recover` on pools left with open sessions by a kill -9 of
// the daemon, and `dnnfs cp`, whose interrupted copies resume.
package recover_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/client"
	"github.com/dnnfs/dnnfs/tests/harness"
)

const mib = 1 << 20

func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

func testData(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

type report struct {
	Pool             string
	ClosedByRecovery int `json:"closed_by_recovery"`
	Finished         []string
	Abandoned        []string
	Sessions         []struct {
		Path      string
		Ino       uint64
		Threads   int
		Size      int64
		Mode      string
		Remaining int64
		Segments  []client.Segment
	}
}

func recoverJSON(t *testing.T, args ...string) report {
	t.Helper()
	out, errOut, code := harness.Run(t, append([]string{"recover", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("dnnfs recover --json %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("dnnfs recover --json: %v\n%s", err, out)
	}
	return r
}

// crashedPool makes a pool whose /ckpt/w.bin (32 MiB + 5000 bytes) has a
// write session with segment 0 written whole, 1 partly, 2 and 3 not at
// all, then kills the daemon. It returns the pool, the data the file is
// meant to hold and the session as the mount reported it before the kill.
func crashedPool(t *testing.T) (string, []byte, *client.Session) {
	t.Helper()
	pool := harness.Mkfs(t, "128MiB")
	fs := harness.Mount(t, pool)
	data := testData(1, 32*mib+5000)
	if err := os.Mkdir(fs.Path("ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := fs.Path("ckpt", "w.bin")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	v := "threads=4,size=" + strconv.Itoa(len(data))
	if err := unix.Fsetxattr(int(f.Fd()), client.XattrSession, []byte(v), 0); err != nil {
		t.Fatal(err)
	}
	s, err := client.GetSession(path)
	if err != nil || s == nil {
		t.Fatalf("session: %+v, %v", s, err)
	}
	for i, n := range []int64{s.Segments[0].Length, 6*mib + 77} {
		g := s.Segments[i]
		for off := g.Start; off < g.Start+n; off += mib {
			end := min(off+mib, g.Start+n)
			if _, err := f.WriteAt(data[off:end], off); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before, err := client.GetSession(path)
	if err != nil || before == nil {
		t.Fatalf("session before the kill: %+v, %v", before, err)
	}
	f.Close()
	fs.Kill(t)
	return pool, data, before
}

func TestRecoverLists(t *testing.T) {
	t.Parallel()
	pool, data, before := crashedPool(t)
	r := recoverJSON(t, "--pool", pool)
	if len(r.Sessions) != 1 {
		t.Fatalf("want one open session, got %+v", r)
	}
	s := r.Sessions[0]
	if s.Path != "/ckpt/w.bin" || s.Threads != 4 || s.Size != int64(len(data)) || s.Mode != "write" || len(s.Segments) != 4 {
		t.Fatalf("session %+v: want /ckpt/w.bin, 4 threads, %d bytes, write", s, len(data))
	}
	var remaining int64
	for i, g := range s.Segments {
		b := before.Segments[i]
		if g != b {
			t.Errorf("segment %d: recover says %+v, the mount said %+v before the kill", i, g, b)
		}
		if !g.Done {
			remaining += g.End() - g.Tail
		}
	}
	if !s.Segments[0].Done || s.Segments[1].Done || s.Segments[1].Tail <= s.Segments[1].Start {
		t.Errorf("segments %+v: want 0 done and 1 part way", s.Segments)
	}
	if s.Remaining != remaining {
		t.Errorf("remaining %d, want %d", s.Remaining, remaining)
	}
	// The text form lists the same tails.
	out, errOut, code := harness.Run(t, "recover", "--pool", pool)
	if code != 0 {
		t.Fatalf("dnnfs recover: exit %d: %s", code, errOut)
	}
	t.Logf("dnnfs recover:\n%s", out)
	for _, g := range s.Segments {
		if !strings.Contains(out, strconv.FormatInt(g.Tail, 10)) {
			t.Errorf("text output lacks the tail %d of segment %d", g.Tail, g.Index)
		}
	}
	if !strings.Contains(out, "/ckpt/w.bin") {
		t.Error("text output lacks the path")
	}

	// Listing changes nothing: a mount still has the session, and the
	// job resumes it.
	fs := harness.Mount(t, pool)
	path := fs.Path("ckpt", "w.bin")
	st, err := client.Save(path, bytes.NewReader(data), int64(len(data)), 4)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Resumed || st.Skipped != int64(len(data))-remaining {
		t.Errorf("save after recover: %+v, want resumed with %d skipped", st, int64(len(data))-remaining)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("file differs from its source after the resumed save (err %v)", err)
	}
	fs.Unmount(t)
}

func TestRecoverAbandon(t *testing.T) {
	t.Parallel()
	pool, data, _ := crashedPool(t)
	out, errOut, code := harness.Run(t, "recover", "--pool", pool, "--abandon", "/ckpt/w.bin")
	if code != 0 || !strings.Contains(out, "abandoned") {
		t.Fatalf("recover --abandon: exit %d\n%s%s", code, out, errOut)
	}
	if r := recoverJSON(t, "--pool", pool); len(r.Sessions) != 0 {
		t.Fatalf("sessions after --abandon: %+v", r.Sessions)
	}
	// Again: the file has no session any more.
	_, errOut, code = harness.Run(t, "recover", "--pool", pool, "--abandon", "/ckpt/w.bin")
	if code != 1 || !strings.Contains(errOut, "no open session") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("second --abandon: exit %d, stderr %q: want 1 and one line saying there is no session", code, errOut)
	}
	fs := harness.Mount(t, pool)
	path := fs.Path("ckpt", "w.bin")
	if s, err := client.GetSession(path); err != nil || s != nil {
		t.Errorf("session on the mount after --abandon: %+v, %v", s, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) {
		t.Errorf("abandoned file: %v, %v: want it kept with %d bytes", fi, err, len(data))
	}
	// A new save starts from zero.
	st, err := client.Save(path, bytes.NewReader(data), int64(len(data)), 4)
	if err != nil || st.Resumed || st.Skipped != 0 {
		t.Errorf("save after abandon: %+v, %v: want a full save", st, err)
	}
	fs.Unmount(t)
}

func TestRecoverFinish(t *testing.T) {
	t.Parallel()
	pool, data, before := crashedPool(t)
	out, errOut, code := harness.Run(t, "recover", "--pool", pool, "--finish", "ckpt/w.bin")
	if code != 0 || !strings.Contains(out, "finished") {
		t.Fatalf("recover --finish: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("recover --finish:\n%s", out)
	if !strings.Contains(out, "had not reached their ends") {
		t.Errorf("--finish of unfinished segments does not warn: %s", out)
	}
	if r := recoverJSON(t, "--pool", pool); len(r.Sessions) != 0 {
		t.Fatalf("sessions after --finish: %+v", r.Sessions)
	}
	fs := harness.Mount(t, pool)
	path := fs.Path("ckpt", "w.bin")
	if s, err := client.GetSession(path); err != nil || s != nil {
		t.Errorf("session on the mount after --finish: %+v, %v", s, err)
	}
	got, err := os.ReadFile(path)
	if err != nil || len(got) != len(data) {
		t.Fatalf("finished file: %d bytes, %v", len(got), err)
	}
	// What was durable before the crash is still there.
	for _, g := range before.Segments {
		if !bytes.Equal(got[g.Start:g.Tail], data[g.Start:g.Tail]) {
			t.Errorf("segment %d: [%d, %d) differs after --finish", g.Index, g.Start, g.Tail)
		}
	}
	fs.Unmount(t)
}

func TestRecoverErrors(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "64MiB")
	fs := harness.Mount(t, pool)
	_, errOut, code := harness.Run(t, "recover", "--pool", pool)
	pid := daemonPid(t, pool)
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "pid "+strconv.Itoa(pid)) ||
		!strings.Contains(errOut, "unmounted") {
		t.Errorf("recover on a mounted pool: exit %d, stderr %q: want 1 and one line naming pid %d", code, errOut, pid)
	}
	fs.Unmount(t)

	for _, args := range [][]string{
		{"recover"},
		{"recover", "--pool", pool, "extra"},
		{"recover", "--pool", pool, "--bogus"},
		{"recover", "--pool", pool, "--finish", "/a", "--abandon", "a"},
	} {
		_, errOut, code := harness.Run(t, args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("dnnfs %s: exit %d, stderr %q: want 2 and one line", strings.Join(args, " "), code, errOut)
		}
	}
	for _, args := range [][]string{
		{"recover", "--pool", filepath.Join(t.TempDir(), "missing")},
		{"recover", "--pool", pool, "--finish", "/missing"},
		{"recover", "--pool", pool, "--abandon", "/"},
	} {
		_, errOut, code := harness.Run(t, args...)
		if code != 1 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("dnnfs %s: exit %d, stderr %q: want 1 and one line", strings.Join(args, " "), code, errOut)
		}
	}
	// A clean pool has nothing to list, and is still clean.
	if r := recoverJSON(t, "--pool", pool); len(r.Sessions) != 0 || r.ClosedByRecovery != 0 {
		t.Errorf("clean pool: %+v", r)
	}
	if out, code := harness.Fsck(t, pool); code != 0 {
		t.Errorf("fsck after recover: exit %d\n%s", code, out)
	}
}

// daemonPid finds the `dnnfs mount --pool pool` process.
func daemonPid(t *testing.T, pool string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i := 0; i+2 < len(args); i++ {
			if args[i] == "mount" && args[i+1] == "--pool" && args[i+2] == pool {
				return pid
			}
		}
	}
	t.Fatalf("no daemon serves %s", pool)
	return 0
}
