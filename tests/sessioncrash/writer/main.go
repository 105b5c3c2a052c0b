// Command writer is the job of the session crash tests: it writes (or
// reads) one file on a dnnfs mount in a segmented-I/O session, one
// goroutine per segment, each locked to its own thread, in pwrites of a
// deterministic source (srcdata: byte i = f(seed, i)).
//
// It starts the session with setxattr user.dnnfs.session
// "threads=N,size=S[,mode=read]" unless one is open; then (or when one
// was open: a resume) it reads the session's JSON and works on every
// unfinished segment from its tail.
//
// Progress goes to -log, a file outside the mount: one little-endian u64
// per segment at byte 8*i, the bytes this run moved in segment i, updated
// after each completed pwrite/pread. Stdout gets a "started" JSON line
// once the session is known, and a "summary" JSON line at the end.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/sessioncrash/srcdata"
)

const xattrSession = "user.dnnfs.session"

// segment and session mirror pool.SessionSegment and pool.SessionInfo.
type segment struct {
	Index  int    `json:"index"`
	Start  uint64 `json:"start"`
	Length uint64 `json:"length"`
	Tail   uint64 `json:"tail"`
	Done   bool   `json:"done"`
	Pid    uint32 `json:"pid"`
}

type session struct {
	Threads  int       `json:"threads"`
	Size     uint64    `json:"size"`
	Mode     string    `json:"mode"`
	Done     bool      `json:"done"`
	Segments []segment `json:"segments"`
}

// Line is what the writer prints, one JSON object per line.
type Line struct {
	Event    string    `json:"event"` // "started", "none" (no session and -resume-only), "summary"
	Resumed  bool      `json:"resumed,omitempty"`
	Segments []segment `json:"segments,omitempty"`
	Bytes    []uint64  `json:"bytes,omitempty"`
	Total    uint64    `json:"total,omitempty"`
	Seconds  float64   `json:"seconds,omitempty"`
	Open     bool      `json:"open_after,omitempty"` // the session is still open at the end
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

// config is the writer's flags.
type config struct {
	file, logPath, mode, only string
	threads, chunk            int
	size, seed, limit         uint64
	resumeOnly, noSession     bool
}

func parseFlags() (*config, error) {
	c := &config{}
	flag.StringVar(&c.file, "file", "", "file on the mount")
	flag.IntVar(&c.threads, "threads", 4, "segments (threads) of a new session")
	flag.Uint64Var(&c.size, "size", 128<<20, "bytes of a new session")
	flag.Uint64Var(&c.seed, "seed", 1, "source seed")
	flag.IntVar(&c.chunk, "chunk", 1<<20, "bytes per pwrite/pread")
	flag.StringVar(&c.logPath, "log", "", "progress file (outside the mount)")
	flag.StringVar(&c.mode, "mode", "write", "write or read")
	flag.Uint64Var(&c.limit, "limit", 0, "stop each segment after this many bytes in this run (0: to its end)")
	flag.BoolVar(&c.resumeOnly, "resume-only", false, "do nothing when no session is open")
	flag.BoolVar(&c.noSession, "no-session", false, "plain pwrites, no session (same segments)")
	flag.StringVar(&c.only, "segments", "", "comma-separated segment indexes to work on (default: all)")
	flag.Parse()
	if c.file == "" {
		return nil, errors.New("-file is required")
	}
	return c, nil
}

func run() error {
	c, err := parseFlags()
	if err != nil {
		return err
	}
	flags := os.O_RDWR | os.O_CREATE
	if c.mode == "read" {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(c.file, flags, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var logf *os.File
	if c.logPath != "" {
		if logf, err = os.OpenFile(c.logPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
			return err
		}
		defer logf.Close()
	}
	out := json.NewEncoder(os.Stdout)
	sess, resumed, err := c.session(f)
	if err != nil || sess == nil {
		if err == nil && c.resumeOnly {
			return out.Encode(Line{Event: "none"})
		}
		return err
	}
	if err := out.Encode(Line{Event: "started", Resumed: resumed, Segments: sess.Segments}); err != nil {
		return err
	}
	skip, err := c.skipped(len(sess.Segments))
	if err != nil {
		return err
	}
	start := time.Now()
	moved := make([]atomic.Uint64, len(sess.Segments))
	errs := make([]error, len(sess.Segments))
	var wg sync.WaitGroup
	for i, sg := range sess.Segments {
		if sg.Done || skip[i] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // one thread per segment, as the session expects
			defer runtime.UnlockOSThread()
			errs[i] = c.segment(f, logf, i, sg, &moved[i])
		}()
	}
	wg.Wait()
	sum := Line{Event: "summary", Resumed: resumed, Segments: sess.Segments, Seconds: time.Since(start).Seconds()}
	for i := range moved {
		sum.Bytes = append(sum.Bytes, moved[i].Load())
		sum.Total += moved[i].Load()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !c.noSession {
		var after session
		ok, err := getSession(f, &after)
		if err != nil {
			return err
		}
		sum.Open = ok
	}
	return out.Encode(sum)
}

// session returns the segments to work on: the open session's (resumed),
// a new session's, or with -no-session the same split without one. A nil
// session and no error: -resume-only found none open.
func (c *config) session(f *os.File) (*session, bool, error) {
	var sess session
	if c.noSession {
		segLen := c.size / uint64(c.threads) / 4096 * 4096
		for i := 0; i < c.threads; i++ {
			end := uint64(i+1) * segLen
			if i == c.threads-1 {
				end = c.size
			}
			sess.Segments = append(sess.Segments, segment{Index: i, Start: uint64(i) * segLen, Length: end - uint64(i)*segLen, Tail: uint64(i) * segLen})
		}
		return &sess, false, nil
	}
	resumed, err := getSession(f, &sess)
	if err != nil {
		return nil, false, err
	}
	if !resumed {
		if c.resumeOnly {
			return nil, false, nil
		}
		v := fmt.Sprintf("threads=%d,size=%d", c.threads, c.size)
		if c.mode == "read" {
			v += ",mode=read"
		}
		if err := unix.Fsetxattr(int(f.Fd()), xattrSession, []byte(v), 0); err != nil {
			return nil, false, fmt.Errorf("setxattr %s %q: %w", xattrSession, v, err)
		}
		if ok, err := getSession(f, &sess); err != nil || !ok {
			return nil, false, fmt.Errorf("no session after starting one: %v", err)
		}
	}
	if sess.Mode != c.mode {
		return nil, false, fmt.Errorf("the open session is a %s session, want %s", sess.Mode, c.mode)
	}
	return &sess, resumed, nil
}

// skipped marks the segments -segments leaves out.
func (c *config) skipped(n int) (map[int]bool, error) {
	skip := map[int]bool{}
	if c.only == "" {
		return skip, nil
	}
	keep := map[int]bool{}
	for _, f := range strings.Split(c.only, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-segments %q: %v", c.only, err)
		}
		keep[i] = true
	}
	for i := 0; i < n; i++ {
		skip[i] = !keep[i]
	}
	return skip, nil
}

// segment writes (or reads and checks) segment i from its tail, counting
// the bytes moved in moved and, with -log, in the progress file's slot i.
func (c *config) segment(f, logf *os.File, i int, sg segment, moved *atomic.Uint64) error {
	buf := make([]byte, c.chunk)
	want := make([]byte, c.chunk)
	end := sg.Start + sg.Length
	if c.limit > 0 {
		end = min(end, sg.Tail+c.limit)
	}
	var rec [8]byte
	for off := sg.Tail; off < end; {
		n := int(min(uint64(c.chunk), end-off))
		var k int
		var err error
		if c.mode == "read" {
			k, err = f.ReadAt(buf[:n], int64(off))
			if err == nil && k == n {
				srcdata.Fill(c.seed, int64(off), want[:n])
				if !bytes.Equal(buf[:n], want[:n]) {
					err = fmt.Errorf("read at %d: data differs from the source (byte %d)", off, off+uint64(srcdata.FirstDiff(c.seed, int64(off), buf[:n])))
				}
			}
		} else {
			srcdata.Fill(c.seed, int64(off), buf[:n])
			k, err = f.WriteAt(buf[:n], int64(off))
		}
		if err == nil && k != n {
			err = fmt.Errorf("short transfer at %d: %d of %d bytes", off, k, n)
		}
		if err != nil {
			return err
		}
		off += uint64(n)
		total := moved.Add(uint64(n))
		if logf != nil {
			binary.LittleEndian.PutUint64(rec[:], total)
			if _, err := logf.WriteAt(rec[:], int64(8*i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// getSession reads the session's JSON; false when none is open.
func getSession(f *os.File, s *session) (bool, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Fgetxattr(int(f.Fd()), xattrSession, buf)
	if errors.Is(err, unix.ENODATA) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getxattr %s: %w", xattrSession, err)
	}
	*s = session{}
	if err := json.Unmarshal(buf[:n], s); err != nil {
		return false, fmt.Errorf("session JSON %q: %w", buf[:n], err)
	}
	return true, nil
}
