package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// fioResult is the part of fio's JSON report the benchmark uses (one group,
// with group_reporting).
type fioResult struct {
	ReadBW, WriteBW     float64 // bytes/s
	ReadIOPS, WriteIOPS float64
	ReadBytes           int64
	WriteBytes          int64
}

type fioJSON struct {
	Jobs []struct {
		Jobname string `json:"jobname"`
		Error   int    `json:"error"`
		Read    fioDir `json:"read"`
		Write   fioDir `json:"write"`
	} `json:"jobs"`
}

type fioDir struct {
	IOBytes int64   `json:"io_bytes"`
	BW      float64 `json:"bw_bytes"`
	IOPS    float64 `json:"iops"`
}

// fio runs fio with args (plus env) and parses its JSON report: one result
// per group (stonewall-separated section, or the whole job file with
// group_reporting). The returned command is the exact command line.
func (b *Bench) fio(ctx context.Context, env []string, args []string) ([]fioResult, string, error) {
	args = append([]string{"--output-format=json"}, args...)
	line := shellJoin(append(append(append([]string{}, env...), "fio"), args...))
	cmd := exec.CommandContext(ctx, "fio", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A hung file system must not hang the benchmark: every fio run is
	// bounded (time_based runs and capped reads finish far sooner).
	tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	go func() {
		<-tctx.Done()
		if ctx.Err() == nil && cmd.Process != nil && tctx.Err() == context.DeadlineExceeded {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	err := cmd.Run()
	var r []fioResult
	if ctx.Err() != nil {
		return r, line, ctx.Err()
	}
	errText := strings.TrimSpace(stderr.String())
	out := stdout.Bytes()
	if i := bytes.IndexByte(out, '{'); i >= 0 {
		// fio prints notes ("opendir added N files") before the JSON.
		out = out[i:]
	}
	var j fioJSON
	jerr := json.Unmarshal(out, &j)
	if tctx.Err() == context.DeadlineExceeded {
		return r, line, fmt.Errorf("fio did not finish within 5 minutes; killed. stderr: %s", tail(errText, 1500))
	}
	if err != nil {
		return r, line, fmt.Errorf("fio: %v: %s", err, tail(errText+" "+tail(stdout.String(), 500), 2000))
	}
	if jerr != nil || len(j.Jobs) == 0 {
		return r, line, fmt.Errorf("fio: unreadable JSON (%v): %s", jerr, tail(errText, 1500))
	}
	for _, job := range j.Jobs {
		if job.Error != 0 {
			return nil, line, fmt.Errorf("fio job %s: error %d (%s): %s", job.Jobname, job.Error, syscall.Errno(job.Error), tail(errText, 1500))
		}
		r = append(r, fioResult{ReadBW: job.Read.BW, WriteBW: job.Write.BW, ReadIOPS: job.Read.IOPS,
			WriteIOPS: job.Write.IOPS, ReadBytes: job.Read.IOBytes, WriteBytes: job.Write.IOBytes})
	}
	if errText != "" && strings.Contains(strings.ToLower(errText), "error") {
		// fio went on past an error: still a failure.
		return nil, line, fmt.Errorf("fio reported: %s", tail(errText, 1500))
	}
	return r, line, nil
}

// writeFiles creates files in dir with pseudo-random content, 1 MiB at a
// time (not measured: preparation).
func writeFiles(ctx context.Context, dir string, files []fileSpec) error {
	buf := make([]byte, MiB)
	fillRandom(buf, 1)
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeFile(dir+"/"+f.Name, f.Size, buf); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, size int64, buf []byte) error {
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		buf[0] = byte(off >> 20) // not every MiB the same
		if _, err := fh.Write(buf[:n]); err != nil {
			fh.Close()
			return fmt.Errorf("writing %s at %d: %w", path, off, err)
		}
		off += n
	}
	return fh.Close()
}

// readFiles reads files in full, 1 MiB at a time: the warm-up pass before a
// warm measurement.
func readFiles(ctx context.Context, dir string, files []fileSpec) error {
	buf := make([]byte, MiB)
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		fh, err := os.Open(dir + "/" + f.Name)
		if err != nil {
			return err
		}
		n, err := readAll(fh, buf)
		fh.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", f.Name, err)
		}
		if n != f.Size {
			return fmt.Errorf("reading %s: %d bytes, want %d", f.Name, n, f.Size)
		}
	}
	return nil
}

// readAll reads r to its end with reads of len(buf) bytes. (io.Copy to
// io.Discard would read 8 KiB at a time: io.Discard's ReadFrom uses its
// own small buffer.)
func readAll(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// fillRandom fills b from a xorshift generator: incompressible, cheap.
func fillRandom(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := 0; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for k := 0; k < 8; k++ {
			b[i+k] = byte(x >> (8 * k))
		}
	}
}
