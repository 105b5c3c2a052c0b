package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type machineInfo struct {
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	MemGiB int64  `json:"mem_gib"`
	Kernel string `json:"kernel"`
	Fio    string `json:"fio"`
	Go     string `json:"go"`
	Commit string `json:"commit"`
	// FusePassthrough: CONFIG_FUSE_PASSTHROUGH of the running kernel. When
	// y, go-fuse's loopback hands opened files to the kernel
	// (FOPEN_PASSTHROUGH) and their reads and writes bypass its daemon.
	FusePassthrough string `json:"fuse_passthrough"`
	DiskFS          string `json:"disk_fs,omitempty"` // type and device of --disk-dir, when the disk systems ran
	LoadStart       string `json:"loadavg_start"`
	LoadEnd         string `json:"loadavg_end"`
	Date            string `json:"date"`
}

func probeMachine(ctx context.Context, b *Bench) machineInfo {
	m := machineInfo{CPUs: numCPU, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if c, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(c), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					m.CPU = strings.Join(strings.Fields(v), " ")
					break
				}
			}
		}
	}
	if c, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, l := range strings.Split(string(c), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				fmt.Sscanf(strings.TrimPrefix(l, "MemTotal:"), "%d", &kb)
			}
		}
		m.MemGiB = (kb + 512*1024) >> 20
	}
	m.Kernel = output(ctx, "", "uname", "-srm")
	m.Fio = output(ctx, "", "fio", "--version")
	m.Go = output(ctx, b.repo, "go", "env", "GOVERSION")
	m.Commit = output(ctx, b.repo, "git", "describe", "--always", "--dirty")
	if b.diskW != "" {
		// The last line: of stacked mounts, the visible one.
		lines := strings.Split(output(ctx, "", "findmnt", "-no", "FSTYPE,SOURCE", "-T", b.diskW), "\n")
		m.DiskFS = strings.Join(strings.Fields(lines[len(lines)-1]), " on ")
	}
	m.LoadStart = loadavg()
	m.FusePassthrough = kernelConfig("CONFIG_FUSE_PASSTHROUGH")
	return m
}

// kernelConfig returns the value of a kernel config option from
// /proc/config.gz or /boot/config-RELEASE, "" when neither says.
func kernelConfig(opt string) string {
	var text []byte
	if f, err := os.Open("/proc/config.gz"); err == nil {
		if z, err := gzip.NewReader(f); err == nil {
			text, _ = io.ReadAll(z)
		}
		f.Close()
	}
	if text == nil {
		rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		text, _ = os.ReadFile("/boot/config-" + strings.TrimSpace(string(rel)))
	}
	for _, l := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(l, opt+"="); ok {
			return v
		}
		if l == "# "+opt+" is not set" {
			return "n"
		}
	}
	return ""
}

func loadavg() string {
	c, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(c))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func output(ctx context.Context, dir, name string, args ...string) string {
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = dir
	out, err := c.Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// microPackages are the packages with the hot-path Go benchmarks.
var microPackages = []struct{ pkg, bench string }{
	{"./pmem", "^(BenchmarkPersist|BenchmarkFlushCPU)$"},
	{"./lock", "^BenchmarkAcquire$"},
	{"./journal", "^BenchmarkCommit$"},
	{"./core", "^(BenchmarkWrite|BenchmarkReadAt)$"},
}

// runMicro runs the Go micro-benchmarks once (benchstat format) and keeps
// the output for the report and bench-out/micro.txt.
func (b *Bench) runMicro(ctx context.Context) {
	benchtime := "1s"
	if b.p.Mode == "quick" {
		benchtime = "200ms"
	}
	tmp := filepath.Join(b.w, "gotest")
	os.MkdirAll(tmp, 0o755)
	var all bytes.Buffer
	for _, mp := range microPackages {
		if ctx.Err() != nil {
			return
		}
		args := []string{"test", "-run", "^$", "-bench", mp.bench, "-benchtime", benchtime, "-count", "1", mp.pkg}
		b.logf("go %s", strings.Join(args, " "))
		c := exec.CommandContext(ctx, "go", args...)
		c.Dir = b.repo
		c.Env = append(os.Environ(), "TMPDIR="+tmp)
		out, err := c.CombinedOutput()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.fail("go test", "micro-benchmarks "+mp.pkg, "go "+shellJoin(args), fmt.Errorf("%v: %s", err, tail(string(out), 1500)))
		}
		for _, l := range strings.Split(string(out), "\n") {
			// Keep what benchstat reads: the header lines and results.
			if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "goos:") || strings.HasPrefix(l, "goarch:") ||
				strings.HasPrefix(l, "pkg:") || strings.HasPrefix(l, "cpu:") {
				all.WriteString(l + "\n")
			}
		}
	}
	b.micro = all.String()
}
