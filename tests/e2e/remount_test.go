package e2e_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// entry is one line of a manifest: everything a user would notice.
type entry struct {
	Type     string // "f", "d", "l"
	Mode     uint32 // permission bits incl. setuid/setgid/sticky
	UID, GID uint32
	Size     int64 // regular files and symlinks
	Blocks   int64 // st_blocks of regular files: sparse files stay sparse
	Nlink    uint64
	SHA      string // regular files
	Target   string // symlinks
	Xattrs   string // user.* name=hex(value), sorted
	Mtime    int64  // seconds
	Links    string // all names of a multiply linked file, sorted
}

type manifest map[string]entry

// takeManifest walks root and records every entry.
func takeManifest(t testing.TB, root string) manifest {
	t.Helper()
	m := manifest{}
	inoNames := map[uint64][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		st := lstat(t, path)
		e := entry{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Nlink: uint64(st.Nlink), Mtime: st.Mtim.Sec}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type, e.Size, e.Blocks, e.SHA = "f", st.Size, st.Blocks, fileSHA(t, path)
			if st.Nlink > 1 {
				inoNames[st.Ino] = append(inoNames[st.Ino], rel)
			}
		case unix.S_IFDIR:
			e.Type = "d"
		case unix.S_IFLNK:
			e.Type, e.Size = "l", st.Size
			if e.Target, err = os.Readlink(path); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected file type %o", path, st.Mode)
		}
		var xs []string
		for k, v := range userXattrs(t, path) {
			xs = append(xs, k+"="+hex.EncodeToString([]byte(v)))
		}
		sort.Strings(xs)
		e.Xattrs = strings.Join(xs, ",")
		m[rel] = e
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	for _, names := range inoNames {
		sort.Strings(names)
		for _, n := range names {
			e := m[n]
			e.Links = strings.Join(names, " ")
			m[n] = e
		}
	}
	return m
}

// compareManifests fails t for every difference between want and got.
func compareManifests(t testing.TB, when string, want, got manifest) {
	t.Helper()
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	bad := 0
	for _, p := range paths {
		w, wok := want[p]
		g, gok := got[p]
		var msg string
		switch {
		case !gok:
			msg = "missing"
		case !wok:
			msg = fmt.Sprintf("unexpected %+v", g)
		case w != g:
			msg = fmt.Sprintf("\n\t got %+v\n\twant %+v", g, w)
		default:
			continue
		}
		if bad++; bad <= 20 {
			t.Errorf("%s: %s: %s", when, p, msg)
		}
	}
	if bad > 20 {
		t.Errorf("%s: %d differences in all", when, bad)
	}
}

// TestRemount builds a varied tree, and checks that it comes back
// identical after a clean unmount, and after a kill -9 of the daemon once
// every file has been fsync'ed.
func TestRemount(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "512MiB")
	mnt := harness.Mount(t, pool)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DNNFS_E2E_SEED"); s != "" { // reproduce a failure
		n, err := strconv.ParseUint(s, 10, 64)
		must(t, err)
		seed = n
	}
	t.Logf("tree seed %d (DNNFS_E2E_SEED=%d reproduces it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	start := time.Now()

	// Directories.
	dirs := []string{".", "a", "a/b", "a/b/c", "a/b/c/d", "e", "e/f", "g", "g/h", "private"}
	for i, d := range dirs[1:] {
		must(t, os.Mkdir(mnt.Path(d), 0o755))
		must(t, os.Chmod(mnt.Path(d), []os.FileMode{0o755, 0o700, 0o750, 0o1777}[i%4]))
	}
	must(t, os.Chown(mnt.Path("private"), 1000, 1000))
	must(t, os.Chmod(mnt.Path("g/h"), 0o2775))

	// Files, some sparse. wantSHA is computed from what was written.
	wantSHA := map[string]string{}
	var files, sparse []string
	modes := []os.FileMode{0o600, 0o755, 0o444, 0o644}
	buf := make([]byte, 3<<20+1)
	for i := 0; i < 200; i++ {
		p := filepath.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("file-%03d", i))
		// 0..3 MiB, skewed towards small sizes to keep the suite fast
		// (mean 0.75 MiB).
		u := rng.Float64()
		size := int(u * u * u * (3<<20 + 1))
		if i%10 == 0 {
			size = rng.IntN(100) // several tiny and empty ones
		}
		data := buf[:size]
		fillRand(data, seed+uint64(i))
		fd := openFd(t, mnt.Path(p), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
		if i%6 == 1 && size > 3*4096 {
			// Sparse: a hole in the middle and one at the end.
			must(t, unix.Ftruncate(fd, int64(size)))
			a, b := size/4, size/2+size/8
			clear(data[a:b])
			clear(data[size-size/8:])
			pwriteFull(t, fd, data[:a], 0)
			pwriteFull(t, fd, data[b:size-size/8], int64(b))
			// Only a hole spanning a whole 4 KiB block can stay unallocated.
			if (a+4095)/4096 < b/4096 {
				sparse = append(sparse, p)
			}
		} else {
			pwriteFull(t, fd, data, 0)
		}
		closeFd(t, fd)
		h := sha256.Sum256(data)
		wantSHA[p] = hex.EncodeToString(h[:])
		files = append(files, p)
		switch i % 5 {
		case 1:
			must(t, os.Chown(mnt.Path(p), 1000, 1000))
		case 3:
			must(t, os.Chown(mnt.Path(p), 0, 100))
		}
		if i%4 == 2 {
			ts := time.Date(2001, 2, 3, 4, 5, i%60, 0, time.UTC)
			must(t, os.Chtimes(mnt.Path(p), ts, ts))
		}
		must(t, os.Chmod(mnt.Path(p), modes[i%len(modes)]))
	}

	// Symlinks: relative, absolute, dangling, long, to directories.
	for i := 0; i < 20; i++ {
		var target string
		switch i % 5 {
		case 0:
			target = "../" + filepath.Base(files[rng.IntN(len(files))])
		case 1:
			target = "/nonexistent/absolute/target"
		case 2:
			target = strings.Repeat("long/", 200) + "end"
		case 3:
			target = "a/b"
		default:
			target = files[rng.IntN(len(files))]
		}
		must(t, os.Symlink(target, mnt.Path(dirs[rng.IntN(len(dirs))], fmt.Sprintf("link-%02d", i))))
	}
	// Hard links, some in other directories, one file with three names.
	for i := 0; i < 15; i++ {
		src := files[(i*13+5)%len(files)]
		must(t, os.Link(mnt.Path(src), mnt.Path(dirs[rng.IntN(len(dirs))], fmt.Sprintf("hard-%02d", i))))
	}
	must(t, os.Link(mnt.Path(files[5]), mnt.Path("g", "third-name")))
	// Xattrs on files and directories.
	for i := 0; i < 40; i++ {
		p := files[(i*7)%len(files)]
		if i%8 == 0 {
			p = dirs[i/8%len(dirs)]
		}
		v := randBytes(seed^uint64(i), rng.IntN(1000))
		must(t, unix.Setxattr(mnt.Path(p), fmt.Sprintf("user.attr%d", i%3), v, 0))
	}

	t.Logf("tree built: %v", time.Since(start))
	m1 := takeManifest(t, mnt.Mnt)
	t.Logf("manifest taken: %v", time.Since(start))
	for p, want := range wantSHA {
		if got := m1[p].SHA; got != want {
			t.Errorf("%s: contents differ from what was written (size %d)", p, m1[p].Size)
		}
	}
	for _, p := range sparse {
		if e := m1[p]; e.Blocks*512 >= e.Size {
			t.Errorf("%s: %d blocks for %d bytes with holes: not sparse", p, e.Blocks, e.Size)
		}
	}
	if len(m1) != 1+9+200+20+16 {
		t.Fatalf("manifest has %d entries, want %d", len(m1), 1+9+200+20+16)
	}

	// Clean unmount (SIGTERM) and remount.
	mnt.Unmount(t)
	mnt = mnt.Remount(t)
	t.Logf("remounted: %v", time.Since(start))
	compareManifests(t, "after unmount and remount", m1, takeManifest(t, mnt.Mnt))
	t.Logf("compared: %v", time.Since(start))
	if t.Failed() {
		return
	}

	// Change things, fsync every file, and kill -9 the daemon.
	for i := 0; i < 20; i++ {
		p := mnt.Path(files[rng.IntN(len(files))])
		st := lstat(t, p)
		fd := openFd(t, p, unix.O_WRONLY, 0)
		switch {
		case i%4 == 0:
			pwriteFull(t, fd, []byte("appended"), st.Size)
		case st.Size > 10:
			pwriteFull(t, fd, []byte("in place"), st.Size/2) // overwrite, no allocation
		}
		closeFd(t, fd)
	}
	must(t, os.Chmod(mnt.Path(files[3]), 0o640))
	must(t, os.Chown(mnt.Path(files[4]), 4242, 4343))
	must(t, unix.Setxattr(mnt.Path(files[6]), "user.after", []byte("remount"), 0))
	must(t, unix.Removexattr(mnt.Path(dirs[0]), "user.attr0"))
	must(t, os.Rename(mnt.Path(files[7]), mnt.Path("e", "renamed")))
	must(t, os.Mkdir(mnt.Path("new-dir"), 0o711))
	writeFile(t, mnt.Path("new-dir", "new-file"), randBytes(seed+999, 12345), 0o600)
	ts := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, os.Chtimes(mnt.Path(files[8]), ts, ts))
	must(t, filepath.WalkDir(mnt.Mnt, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fd, err := retryN(func() (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return retry(func() error { return unix.Fsync(fd) })
	}))
	m2 := takeManifest(t, mnt.Mnt)
	mnt.Kill(t)
	if out, code := harness.Fsck(t, pool); code != 0 {
		t.Errorf("fsck after kill -9: exit %d\n%s", code, out)
	}
	mnt = mnt.Remount(t)
	compareManifests(t, "after kill -9 and remount", m2, takeManifest(t, mnt.Mnt))
}
