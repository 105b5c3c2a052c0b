package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func renameat2(from, to string, flags uint) error {
	return retry(func() error { return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags) })
}

func TestRename(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	dir := func(t *testing.T) string {
		d := fs.Path(filepath.Base(t.Name()))
		must(t, os.Mkdir(d, 0o755))
		return d
	}

	// A rename over an existing file swaps the entry in one step: an open
	// descriptor of the old target keeps reading the old file, new opens
	// get the new one, and the name never disappears.
	t.Run("replace", func(t *testing.T) {
		d := dir(t)
		a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
		oldData := randBytes(1, 300<<10+17)
		newData := randBytes(2, 200<<10+5)
		writeFile(t, b, oldData, 0o644)
		writeFile(t, a, newData, 0o600)
		oldIno, newIno := lstat(t, b).Ino, lstat(t, a).Ino

		fd := openFd(t, b, unix.O_RDONLY, 0)
		defer closeFd(t, fd)
		must(t, rename(a, b))
		wantBytes(t, "old target through the descriptor opened before the rename", preadFull(t, fd, len(oldData)+10, 0), oldData)
		if st := fstat(t, fd); st.Nlink != 0 || st.Ino != oldIno {
			t.Errorf("replaced file through its descriptor: nlink %d ino %d, want nlink 0 ino %d", st.Nlink, st.Ino, oldIno)
		}
		wantBytes(t, "target opened after the rename", readFile(t, b), newData)
		if st := lstat(t, b); st.Ino != newIno || st.Mode&0o777 != 0o600 || st.Nlink != 1 {
			t.Errorf("target after rename: ino %d mode %o nlink %d, want ino %d mode 600 nlink 1", st.Ino, st.Mode&0o777, st.Nlink, newIno)
		}
		if _, err := os.Lstat(a); !os.IsNotExist(err) {
			t.Errorf("source still exists after rename (err=%v)", err)
		}
	})

	t.Run("noreplace", func(t *testing.T) {
		d := dir(t)
		a, b, c := filepath.Join(d, "a"), filepath.Join(d, "b"), filepath.Join(d, "c")
		writeFile(t, a, []byte("A"), 0o644)
		writeFile(t, b, []byte("B"), 0o644)
		wantErrno(t, "RENAME_NOREPLACE onto an existing file", renameat2(a, b, unix.RENAME_NOREPLACE), unix.EEXIST)
		sub := filepath.Join(d, "sub")
		must(t, os.Mkdir(sub, 0o755))
		wantErrno(t, "RENAME_NOREPLACE onto an existing directory", renameat2(a, sub, unix.RENAME_NOREPLACE), unix.EEXIST)
		wantBytes(t, "source after the refused rename", readFile(t, a), []byte("A"))
		wantBytes(t, "target after the refused rename", readFile(t, b), []byte("B"))
		must(t, renameat2(a, c, unix.RENAME_NOREPLACE))
		wantBytes(t, "renamed file", readFile(t, c), []byte("A"))
		if _, err := os.Lstat(a); !os.IsNotExist(err) {
			t.Errorf("source still exists after RENAME_NOREPLACE (err=%v)", err)
		}
		must(t, renameat2(sub, filepath.Join(d, "sub2"), unix.RENAME_NOREPLACE))
		checkDirNlinks(t, d, "after RENAME_NOREPLACE")
	})

	t.Run("exchange files", func(t *testing.T) {
		d := dir(t)
		a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
		da, db := randBytes(3, 10000), randBytes(4, 5000)
		writeFile(t, a, da, 0o644)
		writeFile(t, b, db, 0o600)
		ia, ib := lstat(t, a).Ino, lstat(t, b).Ino
		must(t, renameat2(a, b, unix.RENAME_EXCHANGE))
		wantBytes(t, "a after exchange", readFile(t, a), db)
		wantBytes(t, "b after exchange", readFile(t, b), da)
		if sa, sb := lstat(t, a), lstat(t, b); sa.Ino != ib || sb.Ino != ia || sa.Mode&0o777 != 0o600 || sb.Mode&0o777 != 0o644 {
			t.Errorf("after exchange: a ino %d mode %o, b ino %d mode %o; want a ino %d mode 600, b ino %d mode 644",
				sa.Ino, sa.Mode&0o777, sb.Ino, sb.Mode&0o777, ib, ia)
		}
		wantErrno(t, "RENAME_EXCHANGE with a missing target", renameat2(a, filepath.Join(d, "missing"), unix.RENAME_EXCHANGE), unix.ENOENT)
		must(t, renameat2(a, b, unix.RENAME_EXCHANGE))
		wantBytes(t, "a after exchanging back", readFile(t, a), da)
		wantBytes(t, "b after exchanging back", readFile(t, b), db)
	})

	t.Run("exchange file and directory", func(t *testing.T) {
		d := dir(t)
		p1, p2 := filepath.Join(d, "p1"), filepath.Join(d, "p2")
		must(t, os.Mkdir(p1, 0o755))
		must(t, os.Mkdir(p2, 0o755))
		f := filepath.Join(p1, "f")
		writeFile(t, f, []byte("file"), 0o644)
		sd := filepath.Join(p2, "d")
		must(t, os.MkdirAll(filepath.Join(sd, "inner"), 0o755))
		writeFile(t, filepath.Join(sd, "child"), []byte("child"), 0o644)
		checkDirNlinks(t, d, "before exchange")

		// Across parents: the directory moves p2 -> p1, the file p1 -> p2.
		must(t, renameat2(f, sd, unix.RENAME_EXCHANGE))
		checkDirNlinks(t, d, "after exchanging p1/f and p2/d")
		if st := lstat(t, f); st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Fatalf("p1/f is not a directory after the exchange (mode %o)", st.Mode)
		}
		wantBytes(t, "child of the moved directory", readFile(t, filepath.Join(f, "child")), []byte("child"))
		wantBytes(t, "moved file", readFile(t, sd), []byte("file"))
		if a, b := lstat(t, filepath.Join(f, "..")), lstat(t, p1); a.Ino != b.Ino {
			t.Errorf("p1/f/.. is inode %d, want p1 (%d)", a.Ino, b.Ino)
		}
		if n1, n2 := lstat(t, p1).Nlink, lstat(t, p2).Nlink; n1 != 3 || n2 != 2 {
			t.Errorf("nlink p1=%d p2=%d after the exchange, want 3 and 2", n1, n2)
		}

		// And back.
		must(t, renameat2(sd, f, unix.RENAME_EXCHANGE))
		checkDirNlinks(t, d, "after exchanging back")
		if n1, n2 := lstat(t, p1).Nlink, lstat(t, p2).Nlink; n1 != 2 || n2 != 3 {
			t.Errorf("nlink p1=%d p2=%d after exchanging back, want 2 and 3", n1, n2)
		}

		// Within one parent.
		g := filepath.Join(p2, "g")
		writeFile(t, g, []byte("g"), 0o644)
		must(t, renameat2(g, sd, unix.RENAME_EXCHANGE))
		checkDirNlinks(t, d, "after exchanging within p2")
		wantBytes(t, "p2/d after exchange within p2", readFile(t, sd), []byte("g"))
		wantBytes(t, "p2/g/child", readFile(t, filepath.Join(g, "child")), []byte("child"))

		// Two directories across parents.
		must(t, os.Mkdir(filepath.Join(p1, "e"), 0o755))
		must(t, renameat2(filepath.Join(p1, "e"), g, unix.RENAME_EXCHANGE))
		checkDirNlinks(t, d, "after exchanging two directories")
		wantBytes(t, "p1/e/child", readFile(t, filepath.Join(p1, "e", "child")), []byte("child"))

		// Plain moves of directories between parents, and over an empty one.
		must(t, rename(filepath.Join(p1, "e"), filepath.Join(p2, "moved")))
		checkDirNlinks(t, d, "after moving a directory p1 -> p2")
		must(t, os.Mkdir(filepath.Join(p1, "empty"), 0o755))
		must(t, rename(filepath.Join(p2, "moved"), filepath.Join(p1, "empty")))
		checkDirNlinks(t, d, "after moving a directory over an empty one")
		wantBytes(t, "p1/empty/child", readFile(t, filepath.Join(p1, "empty", "child")), []byte("child"))
		must(t, os.RemoveAll(filepath.Join(p1, "empty")))
		checkDirNlinks(t, d, "after removing the moved tree")
	})

	// rename(2): "If oldpath and newpath are existing hard links referring
	// to the same file, then rename() does nothing, and returns success."
	t.Run("hard links", func(t *testing.T) {
		d := dir(t)
		a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
		writeFile(t, a, []byte("linked"), 0o644)
		must(t, os.Link(a, b))
		must(t, rename(a, b))
		must(t, rename(a, a))
		for _, p := range []string{a, b} {
			st := lstat(t, p)
			if st.Nlink != 2 {
				t.Errorf("%s: nlink %d after renaming a hard link onto its twin, want 2", p, st.Nlink)
			}
			wantBytes(t, p, readFile(t, p), []byte("linked"))
		}
		must(t, renameat2(a, b, unix.RENAME_EXCHANGE))
		for _, p := range []string{a, b} {
			if st := lstat(t, p); st.Nlink != 2 {
				t.Errorf("%s: nlink %d after exchanging twin hard links, want 2", p, st.Nlink)
			}
		}
		ents, err := os.ReadDir(d)
		must(t, err)
		if len(ents) != 2 {
			t.Errorf("directory holds %d entries, want 2", len(ents))
		}
	})

	checkDirNlinks(t, fs.Mnt, "end of TestRename")
	// Everything must also look the same from the pool after a remount.
	fs.Unmount(t)
	fs = fs.Remount(t)
	checkDirNlinks(t, fs.Mnt, "after remount")
}

// The checkpoint pattern under a concurrent reader: every open of
// the name succeeds and returns one whole version.
func TestRenameUnderReaders(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	d := fs.Mnt
	ckpt, tmp := filepath.Join(d, "ckpt"), filepath.Join(d, "ckpt.tmp")
	const size = 64<<10 + 123
	version := func(v int) []byte { return bytes.Repeat([]byte{byte(v)}, size) }
	writeFile(t, ckpt, version(0), 0o644)
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, 10)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				got, err := os.ReadFile(ckpt)
				if err != nil {
					errs <- fmt.Sprintf("reader: %v", err)
					return
				}
				if len(got) != size {
					errs <- fmt.Sprintf("reader saw a checkpoint of %d bytes, want %d", len(got), size)
					return
				}
				if want := version(int(got[0])); !bytes.Equal(got, want) {
					errs <- fmt.Sprintf("reader saw a torn checkpoint (version %d): %s", got[0], firstDiff(got, want))
					return
				}
				reads.Add(1)
			}
		}()
	}
	for v := 1; v <= 150; v++ {
		writeFile(t, tmp, version(v), 0o644)
		if err := rename(tmp, ckpt); err != nil {
			t.Errorf("rename %d: %v", v, err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	wantBytes(t, "final checkpoint", readFile(t, ckpt), version(150))
	t.Logf("%d concurrent reads", reads.Load())
	if reads.Load() == 0 {
		t.Error("the readers completed no read during the renames")
	}
	if ents, _ := os.ReadDir(d); len(ents) != 1 {
		t.Errorf("directory holds %d entries after the renames, want 1", len(ents))
	}
}
