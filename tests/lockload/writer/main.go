// Command writer is the load generator of the lockload tests: real
// processes whose goroutines are locked to OS threads (so every goroutine
// is one thread id, one lock owner for dnnfs) issuing pread/pwrite on a
// file in a dnnfs mount. The test builds it with `go build` and runs it as
// several processes.
//
//	writer torn-write -file F -proc P -threads 4 -requests N -seed S -hot H -log L
//	    thread t of process P is writer P*threads+t+1; writes N requests of
//	    1 or 2 whole 64 KiB units (pattern package), half of them inside the
//	    first H units (overlapping), half anywhere; logs "writer seq unit units"
//	    per request to L.
//	writer torn-read -file F -threads 4 -hot H
//	    reads 1 or 2 whole units per pread until stdin closes and checks that
//	    every unit is intact and the work of one request.
//	writer seg-write -file F -threads 4 -seg BYTES -io BYTES -pass N
//	    thread t writes [t*seg, (t+1)*seg) with io-sized pwrites; each io
//	    block starts with (offset, pass) and is filled with byte t+1.
//	writer range-rw -file F -threads 8 -readers 4 -region BYTES -io BYTES
//	    thread t writes and reads back random io-sized pieces of its own
//	    region [t*region, (t+1)*region) until stdin closes, checking every
//	    read against what it wrote; the -readers threads after them only
//	    read their own regions; prints "ready" once every thread did one
//	    round.
//	writer truncate -file F -n N
//	    ftruncate(fd, current size) N times.
//	writer extend -file F -io BYTES -max BYTES
//	    until stdin closes: pwrite io bytes at the end of the file (an
//	    extending write: the whole-file lock), truncating back to io bytes
//	    once the file reaches max.
//	writer sig-read -file F
//	    one thread, which catches SIGUSR1: prints "tid T", then preads 4 KiB
//	    at offset 0 in a loop until stdin closes; any error (EINTR!) fails.
//
// Failures go to stderr with exit code 1.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/lockload/pattern"
)

func main() {
	if len(os.Args) < 2 {
		fatalf("usage: writer MODE flags...")
	}
	mode := os.Args[1]
	fl := flag.NewFlagSet(mode, flag.ExitOnError)
	file := fl.String("file", "", "file in the mount")
	threads := fl.Int("threads", 4, "OS threads")
	proc := fl.Int("proc", 0, "process number (torn-write)")
	requests := fl.Int("requests", 100, "requests per thread (torn-write)")
	seed := fl.Uint64("seed", 1, "random seed")
	hot := fl.Int("hot", 8, "units of the hot region (torn-write, torn-read)")
	logPath := fl.String("log", "", "request log (torn-write)")
	seg := fl.Int64("seg", 64<<20, "segment bytes per thread (seg-write)")
	ioSize := fl.Int("io", 1<<20, "bytes per request (seg-write, range-rw)")
	pass := fl.Int("pass", 0, "pass number (seg-write)")
	region := fl.Int64("region", 2<<20, "region bytes per thread (range-rw)")
	n := fl.Int("n", 100, "ftruncate calls (truncate)")
	readers := fl.Int("readers", 0, "read-only threads after the writing ones (range-rw)")
	maxSize := fl.Int64("max", 16<<20, "file size at which to truncate (extend)")
	if err := fl.Parse(os.Args[2:]); err != nil {
		fatalf("%v", err)
	}
	if *file == "" {
		fatalf("-file is required")
	}
	switch mode {
	case "torn-write":
		tornWrite(*file, *proc, *threads, *requests, *seed, *hot, *logPath)
	case "torn-read":
		tornRead(*file, *threads, *seed, *hot)
	case "seg-write":
		segWrite(*file, *threads, *seg, *ioSize, *pass)
	case "range-rw":
		rangeRW(*file, *threads, *readers, *region, *ioSize, *seed)
	case "truncate":
		truncate(*file, *n)
	case "extend":
		extend(*file, *ioSize, *maxSize)
	case "sig-read":
		sigRead(*file)
	default:
		fatalf("unknown mode %q", mode)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "writer: "+format+"\n", args...)
	os.Exit(1)
}

func open(path string, flags int) int {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		fatalf("open %s: %v", path, err)
	}
	return fd
}

func fileUnits(fd int) uint32 {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		fatalf("fstat: %v", err)
	}
	return uint32(st.Size / pattern.UnitSize)
}

// pwriteFull and preadFull issue exactly one system call and require it to
// transfer everything: a short transfer would split the request.
func pwriteFull(fd int, p []byte, off int64) {
	k, err := unix.Pwrite(fd, p, off)
	if err != nil || k != len(p) {
		fatalf("pwrite %d bytes at %d: n=%d err=%v", len(p), off, k, err)
	}
}

func preadFull(fd int, p []byte, off int64) {
	k, err := unix.Pread(fd, p, off)
	if err != nil || k != len(p) {
		fatalf("pread %d bytes at %d: n=%d err=%v", len(p), off, k, err)
	}
}

// threadsDo runs f(t) on n goroutines, each locked to its own OS thread.
func threadsDo(n int, f func(t int)) {
	var wg sync.WaitGroup
	for t := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // one thread id per goroutine; never unlocked: the thread dies with it
			f(t)
		}()
	}
	wg.Wait()
}

// stopOnStdinEOF returns a flag set once stdin is closed.
func stopOnStdinEOF() *atomic.Bool {
	var stop atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	return &stop
}

// pick chooses a request of 1 or 2 units: half inside the hot region.
func pick(rnd *rand.Rand, units, hot uint32) (unit, k uint32) {
	k = 1 + uint32(rnd.IntN(2))
	span := units
	if rnd.IntN(2) == 0 && hot >= k && hot < units {
		span = hot
	}
	return uint32(rnd.IntN(int(span - k + 1))), k
}

func tornWrite(path string, proc, threads, requests int, seed uint64, hot int, logPath string) {
	fd := open(path, unix.O_WRONLY)
	units := fileUnits(fd)
	logs := make([][]string, threads)
	threadsDo(threads, func(t int) {
		writer := uint32(proc*threads + t + 1)
		rnd := rand.New(rand.NewPCG(seed, uint64(writer)))
		buf := make([]byte, 2*pattern.UnitSize)
		for seq := uint32(1); seq <= uint32(requests); seq++ {
			unit, k := pick(rnd, units, uint32(hot))
			b := buf[:k*pattern.UnitSize]
			pattern.FillRequest(b, writer, seq, unit, k)
			pwriteFull(fd, b, int64(unit)*pattern.UnitSize)
			logs[t] = append(logs[t], fmt.Sprintf("%d %d %d %d\n", writer, seq, unit, k))
		}
	})
	if logPath != "" {
		var b bytes.Buffer
		for _, l := range logs {
			for _, s := range l {
				b.WriteString(s)
			}
		}
		if err := os.WriteFile(logPath, b.Bytes(), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	fmt.Printf("wrote %d requests\n", threads*requests)
}

func tornRead(path string, threads int, seed uint64, hot int) {
	fd := open(path, unix.O_RDONLY)
	units := fileUnits(fd)
	stop := stopOnStdinEOF()
	var reads, unitsChecked, multi atomic.Uint64
	threadsDo(threads, func(t int) {
		rnd := rand.New(rand.NewPCG(seed, uint64(1000+t)))
		buf := make([]byte, 2*pattern.UnitSize)
		for !stop.Load() {
			unit, k := pick(rnd, units, uint32(hot))
			b := buf[:k*pattern.UnitSize]
			preadFull(fd, b, int64(unit)*pattern.UnitSize)
			var seen []pattern.Req
			for i := range k {
				r, err := pattern.CheckUnit(b[i*pattern.UnitSize:(i+1)*pattern.UnitSize], unit+i)
				if err != nil {
					fatalf("reader thread %d, pread of units [%d,%d): %v", t, unit, unit+k, err)
				}
				seen = append(seen, r)
			}
			// A unit covered by a request that covers the whole read region
			// must agree with the other units if they name the same request.
			if k == 2 && seen[0].Writer == seen[1].Writer && seen[0].Seq == seen[1].Seq && seen[0] != seen[1] {
				fatalf("reader thread %d: units [%d,%d) name the same request with different extents: %v / %v", t, unit, unit+k, seen[0], seen[1])
			}
			if k == 2 && seen[0] == seen[1] {
				multi.Add(1)
			}
			reads.Add(1)
			unitsChecked.Add(uint64(k))
		}
	})
	fmt.Printf("reads %d units %d two-unit-requests-seen-whole %d\n", reads.Load(), unitsChecked.Load(), multi.Load())
}

func segWrite(path string, threads int, seg int64, ioSize, pass int) {
	fd := open(path, unix.O_WRONLY)
	threadsDo(threads, func(t int) {
		buf := bytes.Repeat([]byte{byte(t + 1)}, ioSize)
		for off := int64(t) * seg; off < int64(t+1)*seg; off += int64(ioSize) {
			binary.LittleEndian.PutUint64(buf[0:], uint64(off))
			binary.LittleEndian.PutUint64(buf[8:], uint64(pass))
			pwriteFull(fd, buf, off)
		}
	})
}

func rangeRW(path string, writers, readers int, region int64, ioSize int, seed uint64) {
	fd := open(path, unix.O_RDWR)
	stop := stopOnStdinEOF()
	threads := writers + readers
	var ready sync.WaitGroup
	ready.Add(threads)
	go func() { ready.Wait(); fmt.Println("ready") }()
	var writes, reads atomic.Uint64
	threadsDo(threads, func(t int) {
		rnd := rand.New(rand.NewPCG(seed, uint64(t)))
		base := int64(t) * region
		shadow := make([]byte, region)
		preadFull(fd, shadow, base) // the region as it is now
		buf := make([]byte, ioSize)
		slots := int(region / int64(ioSize))
		first := true
		for first || !stop.Load() {
			if t < writers {
				off := int64(rnd.IntN(slots)) * int64(ioSize)
				for i := 0; i+8 <= len(buf); i += 8 {
					binary.LittleEndian.PutUint64(buf[i:], rnd.Uint64())
				}
				pwriteFull(fd, buf, base+off)
				copy(shadow[off:], buf)
				writes.Add(1)
			}
			off := int64(rnd.IntN(slots)) * int64(ioSize)
			preadFull(fd, buf, base+off)
			if !bytes.Equal(buf, shadow[off:off+int64(ioSize)]) {
				fatalf("thread %d: read at %d differs from what was written there", t, base+off)
			}
			reads.Add(1)
			if first {
				first = false
				ready.Done()
			}
		}
	})
	fmt.Printf("writes %d reads %d\n", writes.Load(), reads.Load())
}

func truncate(path string, n int) {
	fd := open(path, unix.O_WRONLY)
	for i := range n {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			fatalf("fstat: %v", err)
		}
		if err := unix.Ftruncate(fd, st.Size); err != nil {
			fatalf("ftruncate %d (call %d): %v", st.Size, i, err)
		}
	}
	fmt.Printf("truncated %d times\n", n)
}

func extend(path string, ioSize int, maxSize int64) {
	fd := open(path, unix.O_RDWR)
	stop := stopOnStdinEOF()
	buf := bytes.Repeat([]byte{0xe5}, ioSize)
	writes := 0
	for !stop.Load() {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			fatalf("fstat: %v", err)
		}
		if st.Size >= maxSize {
			if err := unix.Ftruncate(fd, int64(ioSize)); err != nil {
				fatalf("ftruncate: %v", err)
			}
			continue
		}
		pwriteFull(fd, buf, st.Size)
		writes++
	}
	fmt.Printf("extending writes %d\n", writes)
}

func sigRead(path string) {
	runtime.LockOSThread()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	var caught atomic.Int64
	go func() {
		for range sig {
			caught.Add(1)
		}
	}()
	fd := open(path, unix.O_RDONLY)
	stop := stopOnStdinEOF()
	fmt.Printf("tid %d\n", unix.Gettid())
	buf := make([]byte, 4<<10)
	reads := 0
	for !stop.Load() {
		k, err := unix.Pread(fd, buf, 0)
		if err != nil || k != len(buf) {
			fatalf("pread 4096 bytes at 0 (read %d): n=%d err=%v", reads, k, err)
		}
		reads++
	}
	fmt.Printf("reads %d sigusr1 %d\n", reads, caught.Load())
}
