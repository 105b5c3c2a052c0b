package recover_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/client"
	"github.com/dnnfs/dnnfs/tests/harness"
)

var cpLine = regexp.MustCompile(`^(resumed: )?(\S+) -> (\S+): copied (\d+) bytes, skipped (\d+) already done, (\d+) threads, [0-9.]+s, [0-9.]+ MB/s\n$`)

type cpResult struct {
	resumed         bool
	copied, skipped int64
	threads         int
}

func runCp(t *testing.T, args ...string) cpResult {
	t.Helper()
	out, errOut, code := harness.Run(t, append([]string{"cp"}, args...)...)
	if code != 0 {
		t.Fatalf("dnnfs cp %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	m := cpLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dnnfs cp output %q does not match %v", out, cpLine)
	}
	var r cpResult
	r.resumed = m[1] != ""
	r.copied, _ = strconv.ParseInt(m[4], 10, 64)
	r.skipped, _ = strconv.ParseInt(m[5], 10, 64)
	r.threads, _ = strconv.Atoi(m[6])
	return r
}

func sameAs(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s (%d bytes) differs from its source (%d bytes)", path, len(got), len(want))
	}
}

func TestCp(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "128MiB"))
	src := filepath.Join(t.TempDir(), "weights.bin")
	data := testData(10, 24*mib+999)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCp(t, "--threads", "3", src, fs.Mnt) // into a directory
	if r.resumed || r.copied != int64(len(data)) || r.skipped != 0 || r.threads != 3 {
		t.Errorf("cp: %+v", r)
	}
	dst := fs.Path("weights.bin")
	sameAs(t, dst, data)
	if s, err := client.GetSession(dst); err != nil || s != nil {
		t.Errorf("session after cp: %+v, %v", s, err)
	}
	// A second copy is a full one (the session closed with the first).
	if r := runCp(t, src, dst); r.resumed || r.copied != int64(len(data)) || r.threads != 4 {
		t.Errorf("second cp: %+v", r)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cp", src}, 2, "SRC and DST"},
		{[]string{"cp", "--threads", "0", src, dst}, 2, "--threads"},
		{[]string{"cp", src, filepath.Join(t.TempDir(), "x")}, 1, "not on a dnnfs mount"},
		{[]string{"cp", filepath.Join(t.TempDir(), "missing"), dst}, 1, "no such file"},
		{[]string{"cp", t.TempDir(), dst}, 1, "not a regular file"},
	} {
		_, errOut, code := harness.Run(t, tc.args...)
		if code != tc.code || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("dnnfs %s: exit %d, stderr %q: want %d and one line with %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
		}
	}
	fs.Unmount(t)
}

// TestCpResume kills a cp part way; the same cp run again writes only the
// rest, and a cp of another source over it starts over.
func TestCpResume(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "512MiB"), "--tail-interval", "1MiB")
	dir := t.TempDir()
	src := filepath.Join(dir, "a.bin")
	data := testData(11, 128*mib)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := fs.Path("a.bin")

	interrupt := func(src string) int64 {
		t.Helper()
		cmd := exec.Command(harness.Binary(t), "cp", "--threads", "4", src, dst)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			s, err := client.GetSession(dst)
			if err == nil && s != nil {
				var done int64
				for _, g := range s.Segments {
					done += g.Tail - g.Start
				}
				if done >= 8*mib {
					break
				}
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("cp made no progress to interrupt: %v\n%s", err, out.String())
			}
			time.Sleep(2 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if err == nil {
			t.Skipf("cp finished before it could be killed:\n%s", out.String())
		}
		s, gerr := client.GetSession(dst)
		if gerr != nil || s == nil {
			t.Fatalf("no session after cp was killed: %+v, %v", s, gerr)
		}
		var done int64
		for _, g := range s.Segments {
			done += g.Tail - g.Start
		}
		return done
	}

	done := interrupt(src)
	r := runCp(t, "--threads", "4", src, dst)
	t.Logf("cp killed after %d bytes; run again: %+v", done, r)
	if !r.resumed || r.skipped != done || r.copied+r.skipped != int64(len(data)) {
		t.Errorf("resumed cp: %+v, want resumed with %d skipped", r, done)
	}
	sameAs(t, dst, data)

	// Interrupted again, then a different source of the same size: not
	// resumed into a mix of the two.
	interrupt(src)
	other := filepath.Join(dir, "b.bin")
	data2 := testData(12, len(data))
	if err := os.WriteFile(other, data2, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, src); err != nil { // same path, new file
		t.Fatal(err)
	}
	r = runCp(t, "--threads", "4", src, dst)
	if r.resumed || r.skipped != 0 || r.copied != int64(len(data2)) {
		t.Errorf("cp of a changed source over an interrupted cp: %+v, want a full copy", r)
	}
	sameAs(t, dst, data2)
	fs.Unmount(t)
}
