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

func run() error {
	file := flag.String("file", "", "file on the mount")
	threads := flag.Int("threads", 4, "segments (threads) of a new session")
	size := flag.Uint64("size", 128<<20, "bytes of a new session")
	seed := flag.Uint64("seed", 1, "source seed")
	chunk := flag.Int("chunk", 1<<20, "bytes per pwrite/pread")
	logPath := flag.String("log", "", "progress file (outside the mount)")
	mode := flag.String("mode", "write", "write or read")
	limit := flag.Uint64("limit", 0, "stop each segment after this many bytes in this run (0: to its end)")
	resumeOnly := flag.Bool("resume-only", false, "do nothing when no session is open")
	noSession := flag.Bool("no-session", false, "plain pwrites, no session (same segments)")
	only := flag.String("segments", "", "comma-separated segment indexes to work on (default: all)")
	flag.Parse()
	if *file == "" {
		return errors.New("-file is required")
	}
	flags := os.O_RDWR | os.O_CREATE
	if *mode == "read" {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(*file, flags, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var logf *os.File
	if *logPath != "" {
		if logf, err = os.OpenFile(*logPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
			return err
		}
		defer logf.Close()
	}
	out := json.NewEncoder(os.Stdout)

	var sess session
	resumed := false
	if *noSession {
		segLen := *size / uint64(*threads) / 4096 * 4096
		for i := 0; i < *threads; i++ {
			end := uint64(i+1) * segLen
			if i == *threads-1 {
				end = *size
			}
			sess.Segments = append(sess.Segments, segment{Index: i, Start: uint64(i) * segLen, Length: end - uint64(i)*segLen, Tail: uint64(i) * segLen})
		}
	} else {
		ok, err := getSession(f, &sess)
		if err != nil {
			return err
		}
		resumed = ok
		if !ok {
			if *resumeOnly {
				return out.Encode(Line{Event: "none"})
			}
			v := fmt.Sprintf("threads=%d,size=%d", *threads, *size)
			if *mode == "read" {
				v += ",mode=read"
			}
			if err := unix.Fsetxattr(int(f.Fd()), xattrSession, []byte(v), 0); err != nil {
				return fmt.Errorf("setxattr %s %q: %w", xattrSession, v, err)
			}
			if ok, err := getSession(f, &sess); err != nil || !ok {
				return fmt.Errorf("no session after starting one: %v", err)
			}
		}
		if sess.Mode != *mode {
			return fmt.Errorf("the open session is a %s session, want %s", sess.Mode, *mode)
		}
	}
	if err := out.Encode(Line{Event: "started", Resumed: resumed, Segments: sess.Segments}); err != nil {
		return err
	}

	skip := map[int]bool{}
	if *only != "" {
		keep := map[int]bool{}
		for _, f := range strings.Split(*only, ",") {
			i, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("-segments %q: %v", *only, err)
			}
			keep[i] = true
		}
		for i := range sess.Segments {
			skip[i] = !keep[i]
		}
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
			buf := make([]byte, *chunk)
			want := make([]byte, *chunk)
			end := sg.Start + sg.Length
			if *limit > 0 {
				end = min(end, sg.Tail+*limit)
			}
			var rec [8]byte
			for off := sg.Tail; off < end; {
				n := int(min(uint64(*chunk), end-off))
				var k int
				var err error
				if *mode == "read" {
					k, err = f.ReadAt(buf[:n], int64(off))
					if err == nil && k == n {
						srcdata.Fill(*seed, int64(off), want[:n])
						if !bytes.Equal(buf[:n], want[:n]) {
							err = fmt.Errorf("read at %d: data differs from the source (byte %d)", off, off+uint64(srcdata.FirstDiff(*seed, int64(off), buf[:n])))
						}
					}
				} else {
					srcdata.Fill(*seed, int64(off), buf[:n])
					k, err = f.WriteAt(buf[:n], int64(off))
				}
				if err == nil && k != n {
					err = fmt.Errorf("short transfer at %d: %d of %d bytes", off, k, n)
				}
				if err != nil {
					errs[i] = err
					return
				}
				off += uint64(n)
				total := moved[i].Add(uint64(n))
				if logf != nil {
					binary.LittleEndian.PutUint64(rec[:], total)
					if _, err := logf.WriteAt(rec[:], int64(8*i)); err != nil {
						errs[i] = err
						return
					}
				}
			}
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
	if !*noSession {
		var after session
		ok, err := getSession(f, &after)
		if err != nil {
			return err
		}
		sum.Open = ok
	}
	return out.Encode(sum)
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
