// Command workload runs the crash-test workloads of tests/crash against a
// mounted dnnfs, as a process of its own, until it is killed or an
// operation fails (which it does once the daemon is killed).
//
//	workload -mode random -dir MNT/r3 -prefix r3 -manifest FILE -seed N
//	workload -mode ckpt -dir MNT/ckpt -report FILE -gen N
//
// random: random operations (create, write at random offsets, truncate,
// rename, unlink, mkdir, rmdir, link, setxattr, fsync, unlink while open)
// on a small namespace, by -workers goroutines each in its own
// subdirectory -dir/wN (manifest paths -prefix/wN/...). Now and then it seals a file: fsync of
// the file and of its directory, then it checks the file reads back as
// written and appends "PATH SHA256 SIZE" (PATH = -prefix/relative path) to
// the manifest outside the mount (O_APPEND, fsync). A sealed file is never
// modified, renamed or removed again.
//
// ckpt: the checkpoint pattern of the README, generation after generation
// from -gen: write ckpt.tmp (8 MiB, every 8-byte word = the generation),
// fsync it, rename it over ckpt, fsync the directory, then append the
// generation to the report file outside the mount (fsync'd).
//
// Exit status: 0 never (it runs until killed), 1 an operation failed (the
// expected end once the daemon is gone), 3 a file read back differently
// from what was written (a dnnfs bug: the message starts with MISMATCH).
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

func main() {
	mode := flag.String("mode", "random", "random or ckpt")
	dir := flag.String("dir", "", "directory inside the mount to work in (created)")
	prefix := flag.String("prefix", "", "manifest paths are PREFIX/relative path")
	manifest := flag.String("manifest", "", "random: manifest file outside the mount")
	seed := flag.Uint64("seed", 1, "random: seed")
	workers := flag.Int("workers", 2, "random: concurrent workers, each in its own subdirectory wN")
	report := flag.String("report", "", "ckpt: file outside the mount for completed generations")
	gen := flag.Uint64("gen", 1, "ckpt: first generation to write")
	flag.Parse()
	if *dir == "" {
		fail("-dir is required")
	}
	switch *mode {
	case "random":
		if *manifest == "" {
			fail("-manifest is required")
		}
		for i := 1; i < *workers; i++ {
			go runRandom(filepath.Join(*dir, fmt.Sprintf("w%d", i)), filepath.Join(*prefix, fmt.Sprintf("w%d", i)), *manifest, *seed+uint64(i))
		}
		runRandom(filepath.Join(*dir, "w0"), filepath.Join(*prefix, "w0"), *manifest, *seed)
	case "ckpt":
		runCkpt(*dir, *report, *gen)
	default:
		fail("unknown -mode %q", *mode)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "workload: "+format+"\n", args...)
	os.Exit(1)
}

func check(err error, format string, args ...any) {
	if err != nil {
		fail("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

func mismatch(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "MISMATCH: "+format+"\n", args...)
	os.Exit(3)
}

var appendMu sync.Mutex

// appendLine appends line to a file outside the mount and fsyncs it.
func appendLine(path, line string) {
	appendMu.Lock()
	defer appendMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	check(err, "open %s", path)
	_, err = f.WriteString(line + "\n")
	check(err, "append to %s", path)
	check(f.Sync(), "fsync %s", path)
	check(f.Close(), "close %s", path)
}

func fsyncPath(path string) {
	f, err := os.Open(path)
	check(err, "open %s for fsync", path)
	check(f.Sync(), "fsync %s", path)
	check(f.Close(), "close %s", path)
}

// ---------------------------------------------------------------------
// random

type obj struct {
	data   []byte
	names  map[string]bool // relative paths naming it
	sealed bool
}

type world struct {
	root, prefix, manifest string
	r                      *rand.Rand
	files                  map[string]*obj // relative path -> file
	dirs                   map[string]bool // relative paths of directories ("" = root)
	frozen                 map[string]bool // directories holding a sealed name
	orphans                []*os.File      // unlinked, still open
	next                   int             // name counter
	ops                    int
}

func runRandom(root, prefix, manifest string, seed uint64) {
	check(os.MkdirAll(root, 0o755), "mkdir %s", root)
	w := &world{root: root, prefix: prefix, manifest: manifest,
		r:     rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)),
		files: map[string]*obj{}, dirs: map[string]bool{"": true}, frozen: map[string]bool{}}
	type op struct {
		weight int
		fn     func() bool // false: not applicable now
	}
	ops := []op{
		{14, w.create}, {24, w.write}, {6, w.truncate}, {8, w.rename}, {3, w.renameDir},
		{6, w.unlink}, {4, w.mkdir}, {2, w.rmdir}, {5, w.link}, {6, w.setxattr},
		{10, w.seal}, {3, w.fsync}, {2, w.orphan}, {2, w.closeOrphan},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for {
		x := w.r.IntN(total)
		for _, o := range ops {
			if x < o.weight {
				if o.fn() {
					w.ops++
				}
				break
			}
			x -= o.weight
		}
	}
}

func (w *world) abs(rel string) string { return filepath.Join(w.root, rel) }

func (w *world) name(prefix string) string {
	w.next++
	return fmt.Sprintf("%s%d", prefix, w.next)
}

func (w *world) randomDir() string {
	ds := slices.Sorted(mapKeys(w.dirs))
	return ds[w.r.IntN(len(ds))]
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// unsealedName returns a random name of an unsealed file, or "".
func (w *world) unsealedName() string {
	var names []string
	for n, o := range w.files {
		if !o.sealed {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return names[w.r.IntN(len(names))]
}

func (w *world) unsealedCount() int {
	seen := map[*obj]bool{}
	for _, o := range w.files {
		if !o.sealed {
			seen[o] = true
		}
	}
	return len(seen)
}

func (w *world) randomData(n int) []byte {
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], w.r.Uint64())
	}
	return b[:n]
}

func (w *world) create() bool {
	if w.unsealedCount() >= 16 {
		return false
	}
	rel := filepath.Join(w.randomDir(), w.name("f"))
	f, err := os.OpenFile(w.abs(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	check(err, "create %s", rel)
	data := w.randomData(w.r.IntN(64 << 10))
	_, err = f.Write(data)
	check(err, "write %s", rel)
	check(f.Close(), "close %s", rel)
	w.files[rel] = &obj{data: data, names: map[string]bool{rel: true}}
	return true
}

func (w *world) write() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	o := w.files[rel]
	off := w.r.IntN(512 << 10)
	data := w.randomData(1 + w.r.IntN(128<<10))
	f, err := os.OpenFile(w.abs(rel), os.O_WRONLY, 0)
	check(err, "open %s", rel)
	_, err = f.WriteAt(data, int64(off))
	check(err, "write %s at %d", rel, off)
	check(f.Close(), "close %s", rel)
	if end := off + len(data); end > len(o.data) {
		o.data = append(o.data, make([]byte, end-len(o.data))...)
	}
	copy(o.data[off:], data)
	return true
}

func (w *world) truncate() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	o := w.files[rel]
	size := w.r.IntN(600 << 10)
	check(os.Truncate(w.abs(rel), int64(size)), "truncate %s to %d", rel, size)
	if size > len(o.data) {
		o.data = append(o.data, make([]byte, size-len(o.data))...)
	}
	o.data = o.data[:size]
	return true
}

func (w *world) dropName(rel string) {
	o := w.files[rel]
	delete(o.names, rel)
	delete(w.files, rel)
}

func (w *world) rename() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	o := w.files[rel]
	to := ""
	if w.r.IntN(10) < 3 {
		to = w.unsealedName()
		if to != "" && w.files[to] == o {
			to = "" // two names of one file: rename does nothing
		}
	}
	if to == "" {
		to = filepath.Join(w.randomDir(), w.name("f"))
	}
	check(os.Rename(w.abs(rel), w.abs(to)), "rename %s %s", rel, to)
	if _, ok := w.files[to]; ok {
		w.dropName(to)
	}
	w.dropName(rel)
	o.names[to] = true
	w.files[to] = o
	return true
}

// renameDir renames a directory that holds no sealed name (at any depth)
// to a new name in the same parent.
func (w *world) renameDir() bool {
	var cands []string
	for d := range w.dirs {
		if d != "" && !w.frozen[d] {
			cands = append(cands, d)
		}
	}
	if len(cands) == 0 {
		return false
	}
	sort.Strings(cands)
	d := cands[w.r.IntN(len(cands))]
	to := filepath.Join(filepath.Dir(d), w.name("d"))
	if filepath.Dir(d) == "." {
		to = w.name("d")
	}
	check(os.Rename(w.abs(d), w.abs(to)), "rename directory %s %s", d, to)
	move := func(p string) (string, bool) {
		if p == d || strings.HasPrefix(p, d+"/") {
			return to + strings.TrimPrefix(p, d), true
		}
		return p, false
	}
	for p := range w.dirs {
		if np, ok := move(p); ok {
			delete(w.dirs, p)
			w.dirs[np] = true
		}
	}
	for p, o := range w.files {
		if np, ok := move(p); ok {
			delete(w.files, p)
			delete(o.names, p)
			w.files[np] = o
			o.names[np] = true
		}
	}
	return true
}

func (w *world) unlink() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	check(os.Remove(w.abs(rel)), "unlink %s", rel)
	w.dropName(rel)
	return true
}

func (w *world) mkdir() bool {
	if len(w.dirs) >= 8 {
		return false
	}
	parent := w.randomDir()
	if strings.Count(parent, "/") >= 1 {
		parent = ""
	}
	rel := filepath.Join(parent, w.name("d"))
	check(os.Mkdir(w.abs(rel), 0o755), "mkdir %s", rel)
	w.dirs[rel] = true
	return true
}

func (w *world) rmdir() bool {
	for _, d := range slices.Sorted(mapKeys(w.dirs)) {
		if d == "" {
			continue
		}
		empty := true
		for p := range w.files {
			if strings.HasPrefix(p, d+"/") {
				empty = false
			}
		}
		for p := range w.dirs {
			if strings.HasPrefix(p, d+"/") {
				empty = false
			}
		}
		if empty {
			check(os.Remove(w.abs(d)), "rmdir %s", d)
			delete(w.dirs, d)
			return true
		}
	}
	return false
}

func (w *world) link() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	o := w.files[rel]
	to := filepath.Join(w.randomDir(), w.name("l"))
	check(os.Link(w.abs(rel), w.abs(to)), "link %s %s", rel, to)
	o.names[to] = true
	w.files[to] = o
	return true
}

func (w *world) setxattr() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	n := 1 + w.r.IntN(300)
	if w.r.IntN(8) == 0 {
		n = 3000 + w.r.IntN(3000) // a region of more than one block
	}
	name := fmt.Sprintf("user.k%d", w.r.IntN(4))
	check(unix.Setxattr(w.abs(rel), name, w.randomData(n), 0), "setxattr %s %s", rel, name)
	return true
}

func (w *world) fsync() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	fsyncPath(w.abs(rel))
	return true
}

// seal makes a file durable and records it in the manifest; it is never
// touched again.
func (w *world) seal() bool {
	rel := w.unsealedName()
	if rel == "" {
		return false
	}
	o := w.files[rel]
	f, err := os.OpenFile(w.abs(rel), os.O_RDWR, 0)
	check(err, "open %s", rel)
	check(f.Sync(), "fsync %s", rel)
	check(f.Close(), "close %s", rel)
	fsyncPath(filepath.Dir(w.abs(rel)))
	got, err := os.ReadFile(w.abs(rel))
	check(err, "read back %s", rel)
	if !bytes.Equal(got, o.data) {
		i := 0
		for i < min(len(got), len(o.data)) && got[i] == o.data[i] {
			i++
		}
		mismatch("%s reads back %d bytes, %d written; first difference at byte %d", rel, len(got), len(o.data), i)
	}
	sum := sha256.Sum256(o.data)
	appendLine(w.manifest, fmt.Sprintf("%s %s %d", filepath.Join(w.prefix, rel), hex.EncodeToString(sum[:]), len(o.data)))
	o.sealed = true
	for n := range o.names {
		for d := filepath.Dir(n); ; d = filepath.Dir(d) {
			if d == "." {
				break
			}
			w.frozen[d] = true
		}
	}
	return true
}

// orphan opens a file with a single name, unlinks it and writes to it; it
// stays open (an orphan if the daemon dies now).
func (w *world) orphan() bool {
	if len(w.orphans) >= 3 {
		return false
	}
	rel := w.unsealedName()
	if rel == "" || len(w.files[rel].names) != 1 {
		return false
	}
	f, err := os.OpenFile(w.abs(rel), os.O_RDWR, 0)
	check(err, "open %s", rel)
	check(os.Remove(w.abs(rel)), "unlink open %s", rel)
	w.dropName(rel)
	_, err = f.WriteAt(w.randomData(1+w.r.IntN(64<<10)), int64(w.r.IntN(256<<10)))
	check(err, "write to unlinked %s", rel)
	w.orphans = append(w.orphans, f)
	return true
}

func (w *world) closeOrphan() bool {
	if len(w.orphans) == 0 {
		return false
	}
	f := w.orphans[0]
	w.orphans = w.orphans[1:]
	check(f.Close(), "close unlinked %s", f.Name())
	return true
}

// ---------------------------------------------------------------------
// ckpt

// CkptSize is the checkpoint size; every 8-byte word holds the generation.
const CkptSize = 8 << 20

func runCkpt(dir, report string, gen uint64) {
	if report == "" {
		fail("-report is required")
	}
	check(os.MkdirAll(dir, 0o755), "mkdir %s", dir)
	tmp, final := filepath.Join(dir, "ckpt.tmp"), filepath.Join(dir, "ckpt")
	chunk := make([]byte, 1<<20)
	for ; ; gen++ {
		for i := 0; i < len(chunk); i += 8 {
			binary.LittleEndian.PutUint64(chunk[i:], gen)
		}
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		check(err, "create %s", tmp)
		for off := 0; off < CkptSize; off += len(chunk) {
			_, err := f.Write(chunk)
			check(err, "write %s gen %d at %d", tmp, gen, off)
		}
		check(f.Sync(), "fsync %s", tmp)
		check(f.Close(), "close %s", tmp)
		check(os.Rename(tmp, final), "rename %s %s", tmp, final)
		fsyncPath(dir)
		appendLine(report, fmt.Sprint(gen))
	}
}
