// Package embedding_test drives embedding tables end to end: a real
// daemon with an SSD tier of real directories, tables made with setxattr,
// rows written and read with pwrite/pread, lookups through the request
// file, moves, crashes in the middle of a move, remounts and fsck.
package embedding_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// ssdDirs makes n empty SSD-tier directories.
func ssdDirs(t *testing.T, n int) []string {
	base := t.TempDir()
	var ds []string
	for i := 0; i < n; i++ {
		d := filepath.Join(base, fmt.Sprintf("ssd%d", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return ds
}

// makeTable creates path as a table and fills it with random f32 rows
// through pwrite; it returns the rows.
func makeTable(t *testing.T, path string, rows, dim int, shard string, rng *rand.Rand) []float32 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec := fmt.Sprintf("rows=%d,dim=%d,dtype=f32,shard=%s", rows, dim, shard)
	if err := unix.Setxattr(path, "user.dnnfs.table", []byte(spec), 0); err != nil {
		t.Fatalf("setxattr user.dnnfs.table %s: %v", spec, err)
	}
	w := make([]float32, rows*dim)
	buf := make([]byte, 4*len(w))
	for i := range w {
		w[i] = float32(rng.NormFloat64())
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(w[i]))
	}
	if n, err := f.WriteAt(buf, 0); err != nil || n != len(buf) {
		t.Fatalf("pwrite rows: %d, %v", n, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return w
}

// request encodes a lookup (the wire format of embedding/wire/doc.go, written
// here independently).
func request(tag uint64, mode uint8, idx, offs []int64, weights []float32) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	total := 48 + 8*len(idx) + 8*len(offs) + 4*len(weights)
	flags := uint32(0)
	if weights != nil {
		flags = 1
	}
	for _, v := range []any{uint32(0x514C4E44), uint16(1), mode, uint8(1), tag, flags, uint32(0),
		uint64(len(idx)), uint64(len(offs)), uint64(total)} {
		binary.Write(&b, le, v)
	}
	binary.Write(&b, le, idx)
	binary.Write(&b, le, offs)
	if weights != nil {
		binary.Write(&b, le, weights)
	}
	return b.Bytes()
}

type result struct {
	status  uint32
	tag     uint64
	count   int
	payload []float32
}

func readResult(t *testing.T, f *os.File) result {
	t.Helper()
	buf := make([]byte, 4<<20)
	n, err := f.Read(buf)
	if err != nil || n < 32 {
		t.Fatalf("read result: %d bytes, %v", n, err)
	}
	le := binary.LittleEndian
	r := result{status: le.Uint32(buf[4:]), tag: le.Uint64(buf[8:]), count: int(le.Uint32(buf[24:]))}
	plen := int(le.Uint64(buf[16:]))
	if le.Uint32(buf) != 0x524C4E44 || 32+plen != n {
		t.Fatalf("bad result: magic %#x, payload %d, read %d", le.Uint32(buf), plen, n)
	}
	for i := 0; i < plen/4; i++ {
		r.payload = append(r.payload, math.Float32frombits(le.Uint32(buf[32+4*i:])))
	}
	return r
}

func pooled(w []float32, dim int, idx, offs []int64, weights []float32, mean bool) []float32 {
	out := make([]float32, len(offs)*dim)
	for b := range offs {
		end := int64(len(idx))
		if b+1 < len(offs) {
			end = offs[b+1]
		}
		for i := 0; i < dim; i++ {
			var s float64
			for k := offs[b]; k < end; k++ {
				v := float64(w[int(idx[k])*dim+i])
				if weights != nil {
					v *= float64(weights[k])
				}
				s += v
			}
			if mean && end > offs[b] {
				s /= float64(end - offs[b])
			}
			out[b*dim+i] = float32(s)
		}
	}
	return out
}

func close32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-4*(1+math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}

func TestTablesThroughTheMount(t *testing.T) {
	pool := harness.Mkfs(t, "64MiB")
	dirs := ssdDirs(t, 2)
	// Two compute elements whatever the cores (auto has none on 2 CPUs).
	fs := harness.Mount(t, pool, "--ssd", dirs[0], "--ssd", dirs[1]+":bw=400MiB/s,lat=50us,channels=2", "--migrate-interval", "0", "--compute-elements", "2")
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, dim = 6000, 32
	path := fs.Path("emb")
	w := makeTable(t, path, rows, dim, "64KiB", rng)

	st, err := os.Stat(path)
	if err != nil || st.Size() != rows*dim*4 {
		t.Fatalf("stat: %v, size %d, want %d", err, st.Size(), rows*dim*4)
	}
	// pread at row offsets, as numpy/PyTorch code would.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 50; k++ {
		r := rng.IntN(rows)
		n := 1 + rng.IntN(min(40, rows-r))
		buf := make([]byte, n*dim*4)
		if m, err := f.ReadAt(buf, int64(r*dim*4)); err != nil || m != len(buf) {
			t.Fatalf("pread rows %d+%d: %d, %v", r, n, m, err)
		}
		for i := 0; i < n*dim; i++ {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])); got != w[r*dim+i] {
				t.Fatalf("pread row %d value %d: %v, want %v", r+i/dim, i%dim, got, w[r*dim+i])
			}
		}
	}
	f.Close()

	// The request file: not listed, but there; lookups of every mode,
	// several in flight, results matched by tag.
	ents, err := os.ReadDir(fs.Mnt)
	if err != nil || len(ents) != 1 || ents[0].Name() != "emb" {
		t.Fatalf("readdir: %v %v (the request file must not be listed)", ents, err)
	}
	lf, err := os.OpenFile(path+".lookup", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open request file: %v", err)
	}
	defer lf.Close()
	type sent struct {
		want  []float32
		count int
	}
	pending := map[uint64]sent{}
	for tag := uint64(1); tag <= 40; tag++ {
		var idx, offs []int64
		nb := 1 + rng.IntN(64)
		for b := 0; b < nb; b++ {
			offs = append(offs, int64(len(idx)))
			for k := 1 + rng.IntN(30); k > 0; k-- {
				idx = append(idx, int64(rng.IntN(rows)))
			}
		}
		mode := uint8(tag % 3)
		var weights []float32
		var want []float32
		count := nb
		switch mode {
		case 0:
			offs = nil
			count = len(idx)
			for _, r := range idx {
				want = append(want, w[int(r)*dim:int(r+1)*dim]...)
			}
		case 1:
			if tag%2 == 0 {
				for range idx {
					weights = append(weights, float32(rng.Float64()))
				}
			}
			want = pooled(w, dim, idx, offs, weights, false)
		case 2:
			want = pooled(w, dim, idx, offs, nil, true)
		}
		if _, err := lf.Write(request(tag, mode, idx, offs, weights)); err != nil {
			t.Fatalf("write request %d: %v", tag, err)
		}
		pending[tag] = sent{want, count}
	}
	for len(pending) > 0 {
		r := readResult(t, lf)
		s, ok := pending[r.tag]
		if !ok {
			t.Fatalf("result for unknown or repeated tag %d", r.tag)
		}
		delete(pending, r.tag)
		if r.status != 0 || r.count != s.count || !close32(r.payload, s.want) {
			t.Fatalf("tag %d: status %d count %d (want %d), values match %v", r.tag, r.status, r.count, s.count, close32(r.payload, s.want))
		}
	}
	// Raw descriptors: os.File would clear O_NONBLOCK on a regular file.
	nb, err := unix.Open(path+".lookup", unix.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(nb, make([]byte, 100)); n > 0 || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("non-blocking read with nothing in flight: %d, %v (want EAGAIN)", n, err)
	}
	unix.Close(nb)
	// A reader blocked with nothing in flight returns EOF when the handle
	// is closed (how a process stops its reader threads).
	bl, err := unix.Open(path+".lookup", unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		n, err := unix.Read(bl, make([]byte, 100))
		if err == nil && n == 0 {
			err = io.EOF
		}
		blocked <- err
	}()
	time.Sleep(50 * time.Millisecond)
	dup, err := unix.Dup(bl)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(dup) // any close() of the handle wakes its readers
	select {
	case err := <-blocked:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("blocked read after close: %v, want EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a read blocked on the request file did not return after a close")
	}
	unix.Close(bl)
	// A bad request fails its write with EINVAL; the handle goes on.
	if _, err := lf.Write(request(99, 1, []int64{rows}, []int64{0}, nil)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("index out of range: %v, want EINVAL", err)
	}
	if _, err := lf.Write(request(100, 1, []int64{1}, []int64{0}, nil)[:60]); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("truncated request: %v, want EINVAL", err)
	}
	if _, err := lf.Write(request(101, 1, []int64{5}, []int64{0}, nil)); err != nil {
		t.Fatal(err)
	}
	if r := readResult(t, lf); r.tag != 101 || !close32(r.payload, w[5*dim:6*dim]) {
		t.Fatalf("request after bad ones: tag %d", r.tag)
	}
	if !strings.Contains(readLog(t, fs), "field indices") {
		t.Errorf("daemon log does not name the bad field")
	}

	// A table's size is fixed; a table is made only from an empty file.
	if err := os.Truncate(path, 10); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("truncate of a table: %v, want EINVAL", err)
	}
	if err := os.WriteFile(fs.Path("plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(fs.Path("plain"), "user.dnnfs.table", []byte("rows=1,dim=1,dtype=f32"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("table from a file with data: %v, want EINVAL", err)
	}
	// The CLI makes and describes tables.
	if out, errOut, code := harness.Run(t, "table", "create", fs.Path("t2"), "--rows", "100", "--dim", "8", "--dtype", "bf16"); code != 0 {
		t.Fatalf("dnnfs table create: %d %s %s", code, out, errOut)
	}
	if out, _, code := harness.Run(t, "table", "info", fs.Path("t2")); code != 0 || !strings.Contains(out, "dtype=bf16") {
		t.Fatalf("dnnfs table info: %d %q", code, out)
	}
	if out, _, code := harness.Run(t, "status", fs.Mnt); code != 0 || !strings.Contains(out, "SSD tier") || !strings.Contains(out, "small (<=128 rows)") ||
		!strings.Contains(out, "COMPLETIONS") {
		t.Fatalf("dnnfs status: %d\n%s", code, out)
	}
	// The lookups above ran on the compute elements (DESIGN.md §Compute stage).
	var cst struct {
		Embedding struct {
			Compute struct {
				Elements []struct {
					Kind        string `json:"kind"`
					Completions uint64 `json:"completions"`
				} `json:"elements"`
				OnLoader uint64 `json:"on_loader"`
			} `json:"compute"`
		} `json:"embedding"`
	}
	if out, _, code := harness.Run(t, "status", "--json", fs.Mnt); code != 0 || json.Unmarshal([]byte(out), &cst) != nil {
		t.Fatalf("dnnfs status --json: %d\n%s", code, out)
	}
	var done uint64
	for _, e := range cst.Embedding.Compute.Elements {
		if e.Kind != "cpu" {
			t.Errorf("compute element of kind %q, want cpu", e.Kind)
		}
		done += e.Completions
	}
	// Lookups of the small size class (<= 128 rows) are computed on the
	// loader that read them; the larger ones on elements.
	if len(cst.Embedding.Compute.Elements) == 0 || done == 0 {
		t.Errorf("status --json compute: %+v; want cpu elements that ran the larger lookups", cst.Embedding.Compute)
	}

	// Rows survive a remount.
	lf.Close()
	fs = fs.Remount(t)
	got, err := os.ReadFile(path)
	if err != nil || len(got) != rows*dim*4 {
		t.Fatalf("read after remount: %d bytes, %v", len(got), err)
	}
	for i := range w {
		if math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])) != w[i] {
			t.Fatalf("value %d differs after remount", i)
		}
	}
	// Deleting the table frees its SSD space for the next one.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	var status struct {
		Embedding struct {
			Tables  int `json:"tables"`
			Devices []struct {
				Space struct {
					Used int64 `json:"used"`
				} `json:"space"`
			} `json:"devices"`
		} `json:"embedding"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		n, err := unix.Getxattr(fs.Mnt, "user.dnnfs.status", buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(buf[:n], &status); err != nil {
			t.Fatal(err)
		}
		used := int64(0)
		for _, d := range status.Embedding.Devices {
			used += d.Space.Used
		}
		if status.Embedding.Tables == 1 && used == 4096 { // t2: 100 rows x 16 bytes, one block
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after unlink: %d tables, %d bytes used; want 1 table, 4096 bytes", status.Embedding.Tables, used)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readLog(t *testing.T, fs *harness.FS) string {
	b, err := os.ReadFile(fs.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMountRefusesWrongSSD(t *testing.T) {
	pool := harness.Mkfs(t, "16MiB")
	other := harness.Mkfs(t, "16MiB")
	dirs := ssdDirs(t, 1)
	fs := harness.Mount(t, pool, "--ssd", dirs[0])
	rng := rand.New(rand.NewPCG(3, 4))
	makeTable(t, fs.Path("t"), 100, 4, "4KiB", rng)
	fs.Unmount(t)
	mnt := t.TempDir()
	// Another pool must not take this pool's SSD directory.
	_, errOut, code := harness.Run(t, "mount", "--pool", other, "--ssd", dirs[0], mnt)
	if code == 0 || !strings.Contains(errOut, "belongs to another pool") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Fatalf("mount of another pool on this SSD dir: exit %d, stderr %q", code, errOut)
	}
	// The pool itself without its device: refused, naming the device.
	_, errOut, code = harness.Run(t, "mount", "--pool", pool, "--ssd", ssdDirs(t, 1)[0], mnt)
	if code == 0 || !strings.Contains(errOut, dirs[0]) {
		t.Fatalf("mount without the table's device: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = harness.Run(t, "mount", "--pool", pool, "--ssd", dirs[0]+":bw=fast", mnt)
	if code != 2 || !strings.Contains(errOut, "bw=") {
		t.Fatalf("bad device model: exit %d, stderr %q", code, errOut)
	}
}

// shardsOf reads the table's translation table.
type shardInfo struct {
	Shard      int    `json:"shard"`
	Dev        uint16 `json:"device"`
	Off        uint64 `json:"offset"`
	ReplicaDev uint16 `json:"replica_device"`
	Gen        uint32 `json:"generation"`
}

func shardsOf(t *testing.T, path string) []shardInfo {
	t.Helper()
	buf := make([]byte, 1<<20)
	n, err := unix.Getxattr(path, "user.dnnfs.shards", buf)
	if err != nil {
		t.Fatalf("getxattr user.dnnfs.shards: %v", err)
	}
	var s []shardInfo
	if err := json.Unmarshal(buf[:n], &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCrashMidMigration kills the daemon while a shard is being copied to
// a slow device (and, in later rounds, around the commit). After each
// remount fsck is clean (harness cleanup), every row reads back intact,
// and each shard has exactly one current primary location.
func TestCrashMidMigration(t *testing.T) {
	pool := harness.Mkfs(t, "64MiB")
	dirs := ssdDirs(t, 2)
	// Device 2 is slow: a 1 MiB shard copy takes about 60 ms.
	fs := harness.Mount(t, pool, "--ssd", dirs[0], "--ssd", dirs[1]+":bw=16MiB/s,lat=100us,channels=1", "--migrate-interval", "0")
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, dim = 16384, 64 // 4 MiB, 4 shards of 1 MiB
	path := fs.Path("emb")
	w := makeTable(t, path, rows, dim, "1MiB", rng)
	want := make([]byte, rows*dim*4)
	for i, v := range w {
		binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(v))
	}
	moved, kept := 0, 0
	for round := 0; round < 6; round++ {
		before := shardsOf(t, path)
		i := round % len(before)
		to := 3 - before[i].Dev
		done := make(chan error, 1)
		go func() {
			done <- unix.Setxattr(path, "user.dnnfs.migrate", []byte(fmt.Sprintf("shard=%d,to=%d", i, to)), 0)
		}()
		time.Sleep(time.Duration(10+rng.IntN(80)) * time.Millisecond)
		fs.Kill(t)
		<-done
		fs = fs.Remount(t)
		after := shardsOf(t, path)
		for k := range after {
			if k != i && after[k] != before[k] {
				t.Fatalf("round %d: shard %d changed without being moved: %+v -> %+v", round, k, before[k], after[k])
			}
		}
		switch a := after[i]; {
		case a == before[i]:
			kept++
		case a.Dev == to && a.Gen == before[i].Gen+1:
			moved++
		default:
			t.Fatalf("round %d: shard %d is %+v, was %+v: neither the old nor the new location", round, i, a, before[i])
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: table differs after the crash (err %v)", round, err)
		}
	}
	t.Logf("crashes mid-migration: %d left the old location, %d the new one", kept, moved)
	// A move that is not interrupted completes and is visible.
	s := shardsOf(t, path)
	if err := unix.Setxattr(path, "user.dnnfs.migrate", []byte(fmt.Sprintf("shard=0,to=%d", 3-s[0].Dev)), 0); err != nil {
		t.Fatal(err)
	}
	if s2 := shardsOf(t, path); s2[0].Dev != 3-s[0].Dev {
		t.Fatalf("completed move not visible: %+v", s2[0])
	}
	fs.Unmount(t)
}

// TestEmptyRequestsAndReusedInodes: a request that names no rows
// completes at once (it used to deadlock the handle), and a table made
// right after another was deleted (reusing its inode number) works.
func TestEmptyRequestsAndReusedInodes(t *testing.T) {
	pool := harness.Mkfs(t, "16MiB")
	fs := harness.Mount(t, pool, "--ssd", ssdDirs(t, 1)[0])
	rng := rand.New(rand.NewPCG(7, 8))
	for round := 0; round < 5; round++ {
		path := fs.Path("t")
		w := makeTable(t, path, 64, 4, "4KiB", rng)
		lf, err := os.OpenFile(path+".lookup", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lf.Write(request(1, 1, nil, []int64{0}, nil)); err != nil {
			t.Fatalf("empty bag: %v", err)
		}
		if r := readResult(t, lf); r.tag != 1 || r.status != 0 || r.count != 1 || !close32(r.payload, []float32{0, 0, 0, 0}) {
			t.Fatalf("empty bag result: %+v", r)
		}
		if _, err := lf.Write(request(2, 0, nil, nil, nil)); err != nil {
			t.Fatalf("empty gather: %v", err)
		}
		if r := readResult(t, lf); r.tag != 2 || r.count != 0 {
			t.Fatalf("empty gather result: %+v", r)
		}
		if _, err := lf.Write(request(3, 0, []int64{63}, nil, nil)); err != nil {
			t.Fatal(err)
		}
		if r := readResult(t, lf); !close32(r.payload, w[63*4:]) {
			t.Fatalf("round %d: row 63 wrong", round)
		}
		lf.Close()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLargeRequestFromUnalignedBuffer: a lookup request of several MiB
// written from a buffer that does not start on a page (a Python bytes
// object's does not) reaches the daemon as chunks a page shorter than the
// mount's largest request, and is reassembled, not refused as truncated.
func TestLargeRequestFromUnalignedBuffer(t *testing.T) {
	pool := harness.Mkfs(t, "16MiB")
	fs := harness.Mount(t, pool, "--ssd", ssdDirs(t, 1)[0])
	rng := rand.New(rand.NewPCG(9, 10))
	path := fs.Path("t")
	const rows, dim = 1000, 4
	w := makeTable(t, path, rows, dim, "4KiB", rng)
	lf, err := os.OpenFile(path+".lookup", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	for _, n := range []int{200_000, 300_000} { // 1.6 and 2.4 MB requests
		idx := make([]int64, n)
		for i := range idx {
			idx[i] = int64(rng.IntN(rows))
		}
		offs := []int64{0, int64(n / 3)}
		req := request(uint64(n), 2, idx, offs, nil) // mean: a float32 sum of ~10^5 rows strays too far from a float64 one
		mem, err := unix.Mmap(-1, 0, len(req)+2*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		buf := mem[33 : 33+len(req)] // as a bytes object's data
		copy(buf, req)
		k, err := unix.Write(int(lf.Fd()), buf)
		unix.Munmap(mem)
		if err != nil || k != len(req) {
			t.Fatalf("%d-byte request from a buffer 33 bytes into a page: write = %d, %v", len(req), k, err)
		}
		r := readResult(t, lf)
		if r.status != 0 || r.tag != uint64(n) || r.count != len(offs) || !close32(r.payload, pooled(w, dim, idx, offs, nil, true)) {
			t.Fatalf("%d-byte request: result status %d tag %d count %d, or means differ", len(req), r.status, r.tag, r.count)
		}
	}
}

// TestPythonEmbeddingBagExample runs the Python client's EmbeddingBag
// example (numpy, and torch when installed) against a mount.
func TestPythonEmbeddingBagExample(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		t.Skipf("%s has no numpy (make deps installs python3-numpy): %v", py, err)
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pool := harness.Mkfs(t, "64MiB")
	fs := harness.Mount(t, pool, "--ssd", ssdDirs(t, 1)[0], "--ssd", ssdDirs(t, 1)[0])
	cmd := exec.Command(py, filepath.Join(root, "python", "example_embeddingbag.py"), fs.Mnt)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "all lookups OK") {
		t.Fatalf("example_embeddingbag.py: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestComputeElementsOption: --compute-elements (also as -o) sets where a
// lookup's pooling runs: 0 on the loaders, N on N CPU processing
// elements (DESIGN.md §Compute stage); the results agree and status says
// where they ran.
func TestComputeElementsOption(t *testing.T) {
	for _, c := range []struct {
		args     []string
		elements int
	}{{[]string{"-o", "compute-elements=0"}, 0}, {[]string{"--compute-elements", "2"}, 2}} {
		pool := harness.Mkfs(t, "16MiB")
		fs := harness.Mount(t, pool, append([]string{"--ssd", ssdDirs(t, 1)[0]}, c.args...)...)
		rng := rand.New(rand.NewPCG(9, 10))
		path := fs.Path("t")
		w := makeTable(t, path, 64, 4, "4KiB", rng)
		lf, err := os.OpenFile(path+".lookup", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// 129 rows: above the small size class, which is computed on
		// the loader even with elements.
		idx := make([]int64, 129)
		for i := range idx {
			idx[i] = []int64{3, 60}[i%2]
		}
		if _, err := lf.Write(request(1, 1, idx, []int64{0}, nil)); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, 4)
		for _, r := range idx {
			for i := range want {
				want[i] += w[int(r)*4+i]
			}
		}
		if r := readResult(t, lf); r.tag != 1 || r.status != 0 || !close32(r.payload, want) {
			t.Fatalf("%v: sum result %+v, want %v", c.args, r, want)
		}
		lf.Close()
		var st struct {
			Embedding struct {
				Compute struct {
					Elements []struct {
						Completions uint64 `json:"completions"`
					} `json:"elements"`
					OnLoader uint64 `json:"on_loader"`
				} `json:"compute"`
			} `json:"embedding"`
		}
		if out, _, code := harness.Run(t, "status", "--json", fs.Mnt); code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("dnnfs status --json: %d\n%s", code, out)
		}
		cs := st.Embedding.Compute
		var done uint64
		for _, e := range cs.Elements {
			done += e.Completions
		}
		switch {
		case len(cs.Elements) != c.elements:
			t.Errorf("%v: %d compute elements, want %d", c.args, len(cs.Elements), c.elements)
		case c.elements == 0 && cs.OnLoader != 1:
			t.Errorf("%v: %d lookups pooled on the loaders, want 1", c.args, cs.OnLoader)
		case c.elements > 0 && (done != 1 || cs.OnLoader != 0):
			t.Errorf("%v: elements completed %d, loaders %d; want 1 and 0", c.args, done, cs.OnLoader)
		}
		fs.Unmount(t)
	}
}
