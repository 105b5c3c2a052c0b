package recovery_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// TestMountAgreesWithCheck: on a consistent pool, what Mount decodes (live
// inodes, used blocks, free slots) is what the independent checker finds.
func TestMountAgreesWithCheck(t *testing.T) {
	m, s := buildPool(t)
	r := requireClean(t, m)
	st, err := recovery.Mount(clone(m))
	must(t, err)
	if len(st.Inodes) != r.Inodes {
		t.Fatalf("Mount found %d live inodes, Check %d", len(st.Inodes), r.Inodes)
	}
	// No tables or sessions here: Mount's map holds every used block.
	if st.Free.Used() != r.UsedBlocks {
		t.Fatalf("Mount marked %d blocks used, Check counts %d", st.Free.Used(), r.UsedBlocks)
	}
	if got := uint64(len(st.FreeInos)) + uint64(len(st.Inodes)); got != st.SB.InodeCount-1 {
		t.Fatalf("%d free + %d live slots, the table has %d", len(st.FreeInos), len(st.Inodes), st.SB.InodeCount-1)
	}
	for i := 1; i < len(st.FreeInos); i++ {
		if st.FreeInos[i] >= st.FreeInos[i-1] {
			t.Fatal("free slots not highest first")
		}
	}
	if len(st.Orphans) != 0 || len(st.Misnamed) != 0 || st.Replayed != 0 || st.PrimaryErr != nil {
		t.Fatalf("clean pool: orphans %v misnamed %v replayed %d primary %v", st.Orphans, st.Misnamed, st.Replayed, st.PrimaryErr)
	}
	var dir *recovery.Inode
	for _, in := range st.Inodes {
		if in.Ino == s.ino["/dir"] {
			dir = in
		}
	}
	if dir == nil || dir.Parent != format.RootIno || len(dir.Entries) == 0 {
		t.Fatalf("/dir: %+v", dir)
	}
	for _, e := range dir.Entries {
		if e.Ino == 0 || e.Name == "" {
			t.Fatalf("/dir entry %+v", e)
		}
	}
}

// TestMountOrphansAndReplica: a file unlinked while open when the daemon
// died is an orphan; a torn primary superblock makes Mount use the replica.
func TestMountOrphansAndReplica(t *testing.T) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	f, err := fs.Create(fs.Root(), "gone", regMode)
	must(t, err)
	_, err = fs.Write(f, 0, pattern(3*format.BlockSize, 4), false)
	must(t, err)
	fs.Opened(f)
	must(t, fs.Unlink(fs.Root(), "gone"))
	img := clone(m) // the daemon dies here, the file still open
	img.Bytes()[format.SuperPrimary.Off()+format.SBBlocks] ^= 1
	st, err := recovery.Mount(img)
	must(t, err)
	if len(st.Orphans) != 1 || st.Orphans[0] != f.Ino {
		t.Fatalf("orphans %v, want [%d]", st.Orphans, f.Ino)
	}
	if !errors.Is(st.PrimaryErr, format.ErrBadChecksum) {
		t.Fatalf("primary superblock error %v, want a checksum mismatch", st.PrimaryErr)
	}
	// core.Open frees the orphan through the journal.
	fs2, rep, err := core.Open(img, core.Options{})
	must(t, err)
	if rep.OrphansFreed != 1 || !rep.ReplicaUsed || fs2.Inode(f.Ino) != nil {
		t.Fatalf("report %+v", rep)
	}
	must(t, fs2.Close())
	requireClean(t, img)
}

// TestMountReplaysJournal: a committed transaction is applied by Mount
// before anything is decoded, and the journal it returns is settled.
func TestMountReplaysJournal(t *testing.T) {
	m, s := buildPool(t)
	sb := superOf(t, m)
	d, off := getInode(t, m, s.ino["/a"])
	d.Mtime = 12345
	var ib [format.InodeSize]byte
	d.Encode(ib[:])
	rm := pmem.NewRecorder(m.Bytes())
	jr, err := journal.Open(rm, &sb)
	must(t, err)
	tx := jr.Begin()
	tx.Write(off, ib[:])
	must(t, tx.Commit())
	img := pmem.NewMemory(m.Size())
	copy(img.Bytes(), rm.Image(2)) // committed, not applied
	st, err := recovery.Mount(img)
	must(t, err)
	if st.Replayed != 1 || st.Journal.Pending() {
		t.Fatalf("replayed %d records, pending %v", st.Replayed, st.Journal.Pending())
	}
	found := false
	for _, in := range st.Inodes {
		if in.Ino == s.ino["/a"] {
			found = true
			if in.D.Mtime != 12345 {
				t.Fatalf("/a decoded before the replay (mtime %d)", in.D.Mtime)
			}
		}
	}
	if !found {
		t.Fatal("/a not among the live inodes")
	}
}

// TestMountRefusesDamage: Mount fails, naming the structure, where the
// checker would find a problem that makes the pool unsafe to use.
func TestMountRefusesDamage(t *testing.T) {
	m, s := buildPool(t)
	img := clone(m)
	putDirent(img, freeSlot(t, img, format.RootIno), format.Dirent{Name: "ghost", Type: format.DTReg, Ino: 200})
	if _, err := recovery.Mount(img); err == nil || !strings.Contains(err.Error(), `entry "ghost" names free inode 200`) {
		t.Fatalf("dangling entry: %v", err)
	}
	img = clone(m)
	d, _ := getInode(t, img, s.ino["/a"])
	d.Extents++
	putInode(t, img, s.ino["/a"], d)
	if _, err := recovery.Mount(img); !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("bad extent count: %v", err)
	}
	img = pmem.NewMemory(testPoolSize)
	if _, err := recovery.Mount(img); !errors.Is(err, recovery.ErrNotPool) || !errors.Is(err, core.ErrNotPool) {
		t.Fatalf("zeroed medium: %v", err)
	}
}
