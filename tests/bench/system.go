package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// System is one peer: where its files are and how to (re)mount it.
type System struct {
	Name string
	Desc string
	kind string // tmpfs, loopback, dnnfs
	lock string // dnnfs: range or file
	b    *Bench

	dir  string // where the workload's files go (mountpoint, or a tmpfs dir)
	src  string // loopback: the tmpfs directory it mirrors
	bin  string // loopback: the daemon (the example, or loopplain)
	pool string // dnnfs: pool file

	extra []string // dnnfs: more mount arguments (the cluster phase's nodes)
	env   []string // more environment of the daemon (the cluster phase's S3 credentials)

	cmd      *exec.Cmd
	done     chan error
	logPath  string
	mountCmd string // last mount command, for the report
}

func newSystem(b *Bench, name string) *System {
	s := &System{Name: name, b: b}
	switch name {
	case "tmpfs":
		s.kind = "tmpfs"
		s.Desc = "native tmpfs (the kernel, no FUSE)"
		s.dir = filepath.Join(b.tmpfs, "native")
	case "loopback":
		s.kind = "loopback"
		s.Desc = "go-fuse v2 example/loopback over the same tmpfs"
		s.src = filepath.Join(b.tmpfs, "loopback-src")
		s.dir = filepath.Join(b.w, "mnt", "loopback")
		s.bin = b.loop
	case "loopback-plain":
		// The same loopback without FUSE passthrough: its reads and
		// writes reach its daemon, as dnnfs's do (tests/bench/loopplain).
		s.kind = "loopback"
		s.Desc = "go-fuse v2 example/loopback with FUSE passthrough off (tests/bench/loopplain) over the same tmpfs"
		s.src = filepath.Join(b.tmpfs, "loopback-plain-src")
		s.dir = filepath.Join(b.w, "mnt", "loopback-plain")
		s.bin = b.loopPlain
	case "disk":
		s.kind = "disk"
		s.Desc = "the disk's file system (" + b.machine.DiskFS + ") natively, in a directory under " + b.o.diskDir
		s.dir = filepath.Join(b.diskW, "native")
	case "dnnfs-disk":
		s.kind = "dnnfs"
		s.lock = "range"
		s.Desc = "dnnfs --lock=range, emulated pool in a file in that directory on the disk"
		s.dir = filepath.Join(b.w, "mnt", name)
		s.pool = filepath.Join(b.diskW, "pool")
	case "dnnfs-range", "dnnfs-file":
		s.kind = "dnnfs"
		s.lock = strings.TrimPrefix(name, "dnnfs-")
		s.Desc = "dnnfs --lock=" + s.lock + ", emulated pool on a tmpfs (huge=" + b.o.poolHuge + ") in /dev/shm"
		s.dir = filepath.Join(b.w, "mnt", name)
		s.pool = filepath.Join(b.poolfs, "pool-"+s.lock)
	default:
		s.kind = "unknown"
	}
	s.logPath = filepath.Join(b.logs, name+".log")
	return s
}

func (s *System) fuse() bool { return s.kind != "tmpfs" && s.kind != "disk" }

// onDisk: the system keeps its data on the disk (the disk-pool peers).
func (s *System) onDisk() bool { return s.Name == "disk" || s.Name == "dnnfs-disk" }

// plainConfigs are the fio configurations loopback-plain runs: the ones
// where a FUSE daemon's own data path is what is compared (the disk-pool
// random 4 KiB goal; 1 MiB writes and cold reads for reference).
func plainConfigs() map[string]bool {
	m := map[string]bool{}
	for _, jobs := range []int{1, 4} {
		g := group{"shared", jobs}
		m[fioConfig(g, 4*KiB, "randwrite", "").ID] = true
		m[fioConfig(g, MiB, "write", "").ID] = true
		m[fioConfig(g, MiB, "read", "cold").ID] = true
	}
	return m
}

// Start gives the system an empty file system able to hold data bytes,
// mounted.
func (s *System) Start(ctx context.Context, data int64) error {
	switch s.kind {
	case "tmpfs", "disk":
		os.RemoveAll(s.dir)
		return os.MkdirAll(s.dir, 0o755)
	case "loopback":
		os.RemoveAll(s.src)
		if err := os.MkdirAll(s.src, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return err
		}
		return s.mount(ctx, "")
	case "dnnfs":
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return err
		}
		size := poolSize(data)
		args := []string{"mkfs", "--pool", s.pool, "--size", fmt.Sprintf("%dMiB", size>>20), "--force"}
		out, err := exec.CommandContext(ctx, s.b.dnnfs, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", shellJoin(append([]string{"dnnfs"}, args...)), err, strings.TrimSpace(string(out)))
		}
		return s.mount(ctx, "")
	}
	return fmt.Errorf("unknown system %q (want tmpfs, loopback, loopback-plain, dnnfs-range, dnnfs-file, disk, dnnfs-disk)", s.Name)
}

// Stop unmounts and frees the system's data.
func (s *System) Stop() error {
	err := s.unmount()
	switch s.kind {
	case "tmpfs", "disk":
		os.RemoveAll(s.dir)
	case "loopback":
		os.RemoveAll(s.src)
	case "dnnfs":
		os.Remove(s.pool)
	}
	return err
}

// Remount unmounts and mounts again: the next read is cold (the kernel's
// page cache of the mount is gone, dnnfs rebuilds its DRAM index and maps
// the pool afresh). tmpfs has no colder state than its page cache, which
// is its storage: nothing to do. A non-empty profile path mounts dnnfs with
// --cpuprofile until the next unmount.
func (s *System) Remount(ctx context.Context, profile string) error {
	if !s.fuse() {
		return nil
	}
	if err := s.unmount(); err != nil {
		return err
	}
	return s.mount(ctx, profile)
}

func (s *System) mount(ctx context.Context, profile string) error {
	var args []string
	switch s.kind {
	case "loopback":
		args = []string{s.bin, "-q", "-directmount", s.dir, s.src}
	case "dnnfs":
		args = []string{s.b.dnnfs, "mount", "-f", "--pool", s.pool, s.dir, "--lock", s.lock, "--log-level", "warn"}
		if profile != "" {
			args = append(args, "--cpuprofile", profile)
		}
		args = append(args, s.extra...)
	}
	lf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(lf, "# %s %s\n", time.Now().Format(time.RFC3339), shellJoin(args))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// Its own process group: a Ctrl-C in the terminal reaches the driver,
	// which unmounts in order, not the daemons behind its back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); lf.Close() }()
	s.cmd, s.done = cmd, done
	s.mountCmd = shellJoin(args)
	s.b.mu.Lock()
	s.b.active[s] = true
	s.b.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(s.dir) {
		select {
		case err := <-done:
			s.cmd = nil
			return fmt.Errorf("%s exited before mounting (%v): %s", shellJoin(args), err, tailFile(s.logPath, 1500))
		case <-ctx.Done():
			s.unmount()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.unmount()
			return fmt.Errorf("%s: not mounted after 30 s: %s", shellJoin(args), tailFile(s.logPath, 1500))
		}
	}
	return nil
}

// unmount stops the daemon with SIGTERM (both unmount cleanly on it) and
// waits; after 60 s it detaches the mount and kills the daemon. An exit
// status other than 0 is reported as a failure of the system.
func (s *System) unmount() error {
	if s.cmd == nil {
		return nil
	}
	cmd, done := s.cmd, s.done
	s.cmd = nil
	defer func() {
		s.b.mu.Lock()
		delete(s.b.active, s)
		s.b.mu.Unlock()
	}()
	var err error
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case werr := <-done:
		if werr != nil {
			err = fmt.Errorf("daemon exited with %v on unmount: %s", werr, tailFile(s.logPath, 1500))
		}
	case <-time.After(60 * time.Second):
		exec.Command("umount", "-l", s.dir).Run()
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		err = fmt.Errorf("daemon did not unmount within 60 s of SIGTERM; detached and killed: %s", tailFile(s.logPath, 1500))
	}
	for i := 0; i < 100 && isMounted(s.dir); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if isMounted(s.dir) {
		exec.Command("umount", "-l", s.dir).Run()
		if err == nil {
			err = errors.New("daemon exited but the mount stayed; detached it")
		}
	}
	return err
}

// cpu returns the CPU time (user + system) the daemon has used so far, or
// -1 (no daemon: tmpfs, or not mounted).
func (s *System) cpu() float64 {
	if s.cmd == nil || s.cmd.Process == nil {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	var ut, st float64
	fmt.Sscanf(f[11], "%g", &ut)
	fmt.Sscanf(f[12], "%g", &st)
	return (ut + st) / 100 // USER_HZ
}

// isMounted reports whether dir is a mount point (/proc/self/mountinfo).
func isMounted(dir string) bool {
	found := false
	eachMount(func(mp string) bool {
		if mp == dir {
			found = true
			return false
		}
		return true
	})
	return found
}

func anyMountUnder(dir string) bool {
	found := false
	eachMount(func(mp string) bool {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			found = true
			return false
		}
		return true
	})
	return found
}

func eachMount(fn func(mountpoint string) bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && !fn(r.Replace(fields[4])) {
			return
		}
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return tail(strings.TrimSpace(string(b)), n)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// shellJoin quotes args for a shell, for the exact commands in the report.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
