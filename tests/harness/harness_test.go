package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// These tests need no dnnfs binary.

func TestParseMountInfo(t *testing.T) {
	data := []byte(`22 1 0:21 / /proc rw,nosuid - proc proc rw
41 26 0:38 / /tmp/x/mnt rw,nosuid,nodev,relatime - fuse.dnnfs /tmp/x/pool rw,user_id=0,group_id=0
42 26 0:39 / /tmp/with\040space/mnt rw shared:5 - fuse.dnnfs pool rw
43 41 0:40 / /tmp/x/mnt rw - tmpfs none rw
`)
	for _, tc := range []struct {
		mnt     string
		mounted bool
		fstype  string
		dev     string
	}{
		{"/tmp/x/mnt", true, "tmpfs", "0:40"}, // the topmost of stacked mounts
		{"/tmp/x/mnt/", true, "tmpfs", "0:40"},
		{"/tmp/with space/mnt", true, "fuse.dnnfs", "0:39"},
		{"/tmp/x", false, "", ""},
		{"/proc", true, "proc", "0:21"},
	} {
		e := parseMountInfo(data, tc.mnt)
		if e.mounted != tc.mounted || e.fstype != tc.fstype || e.dev != tc.dev {
			t.Errorf("parseMountInfo(%q) = %+v, want mounted=%v fstype=%q dev=%q", tc.mnt, e, tc.mounted, tc.fstype, tc.dev)
		}
	}
	if m, _ := mountInfo("/proc"); !m {
		t.Errorf("/proc not found in /proc/self/mountinfo")
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}

func TestProcState(t *testing.T) {
	if s := procState(os.Getpid()); s != 'R' && s != 'S' {
		t.Errorf("procState(self) = %q", s)
	}
	if dying(os.Getpid()) {
		t.Errorf("dying(self) = true")
	}
	cmd := exec.Command("sleep", "10")
	if err := startCmd(cmd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if pgid, err := syscall.Getpgid(cmd.Process.Pid); err != nil || pgid != cmd.Process.Pid {
		t.Errorf("child pgid = %d, %v; want its own group %d", pgid, err, cmd.Process.Pid)
	}
	killGroup(cmd.Process.Pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for procState(cmd.Process.Pid) != 'Z' && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !dying(cmd.Process.Pid) {
		t.Errorf("killed, unreaped child not reported as dying (state %q)", procState(cmd.Process.Pid))
	}
	cmd.Wait()
}

func TestReleaseMountRefs(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	refs := releaseMountRefs(dir)
	if len(refs) != 1 {
		t.Fatalf("releaseMountRefs = %q, want the one open file", refs)
	}
	// The *os.File still owns a valid descriptor, now /dev/null.
	if target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); target != "/dev/null" {
		t.Errorf("fd now points to %q, want /dev/null", target)
	}
	if refs := releaseMountRefs(dir); len(refs) != 0 {
		t.Errorf("second call found %q", refs)
	}
}
