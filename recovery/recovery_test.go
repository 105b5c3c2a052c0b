package recovery_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

func TestMaxFileBlocksMatchesPool(t *testing.T) {
	if recovery.MaxFileBlocks != (core.MaxFileSize-1)/format.BlockSize+1 {
		t.Fatalf("recovery.MaxFileBlocks %d does not match core.MaxFileSize %d", recovery.MaxFileBlocks, core.MaxFileSize)
	}
}

func TestProblemString(t *testing.T) {
	p := recovery.Problem{Structure: "inode", Ino: 12, Off: 1234567, What: "extent 3 overlaps inode 9's blocks 100..130"}
	if got, want := p.String(), "inode 12 (byte 1234567): extent 3 overlaps inode 9's blocks 100..130"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	p = recovery.Problem{Structure: "superblock primary (block 0)", What: "checksum mismatch; replica is good"}
	if got, want := p.String(), "superblock primary (block 0): checksum mismatch; replica is good"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestFreshPoolIsClean(t *testing.T) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	r := requireClean(t, m)
	sb := superOf(t, m)
	if r.Inodes != 1 || r.Dirs != 1 || r.UsedBlocks != 0 || r.FreeBlocks != sb.Blocks-uint64(sb.DataStart) {
		t.Fatalf("fresh pool report %+v", r)
	}
	requireMount(t, m)
}

func TestPopulatedPoolIsClean(t *testing.T) {
	m, s := buildPool(t)
	r := requireClean(t, m)
	// root, a, dir, sub, deep, f00..f20, frag, link, sparse
	if want := 1 + 1 + 3 + 21 + 1 + 1 + 1; r.Inodes != want {
		t.Errorf("%d inodes, want %d", r.Inodes, want)
	}
	if r.Dirs != 4 || r.Symlinks != 1 || r.Files != r.Inodes-5 {
		t.Errorf("report %+v", r)
	}
	fs, _, err := core.Open(clone(m), core.Options{})
	must(t, err)
	st := fs.Statfs()
	if st.Blocks-st.Free != r.UsedBlocks {
		t.Errorf("pool counts %d used blocks, Check %d", st.Blocks-st.Free, r.UsedBlocks)
	}
	must(t, fs.Close())
	// Repair of a clean pool changes nothing.
	before := bytes.Clone(m.Bytes())
	rr, err := recovery.Repair(m)
	must(t, err)
	if len(rr.Repaired) != 0 || !rr.Clean() || !bytes.Equal(before, m.Bytes()) {
		t.Fatalf("Repair of a clean pool: %q%s", rr.Repaired, problems(rr))
	}
	_ = s
}

func TestNotAPool(t *testing.T) {
	m := pmem.NewMemory(testPoolSize)
	if _, err := recovery.Check(m); err == nil {
		t.Fatal("Check of zeros succeeded")
	}
	if _, err := recovery.Repair(m); err == nil {
		t.Fatal("Repair of zeros succeeded")
	}
	m, _ = buildPool(t)
	m.Bytes()[100] ^= 1
	m.Bytes()[format.BlockSize+100] ^= 1
	if _, err := recovery.Check(m); err == nil || !strings.Contains(err.Error(), "both superblocks") {
		t.Fatalf("both superblocks bad: err %v", err)
	}
}

func TestPrimarySuperblock(t *testing.T) {
	m, _ := buildPool(t)
	m.Bytes()[format.SBMountCount] ^= 0x40
	r := check(t, m)
	p := requireProblem(t, r, "superblock primary (block 0): checksum mismatch", "replica is good")
	if !p.Repairable || !r.ReplicaUsed {
		t.Fatalf("problem %v, report %+v", p, r)
	}
	if len(r.Problems) != 1 {
		t.Fatalf("want only the superblock problem:%s", problems(r))
	}
	rr := repairClean(t, m)
	if rr.ReplicaUsed || len(rr.Repaired) != 1 {
		t.Fatalf("after repair: %+v", rr)
	}
}

func TestReplicaSuperblock(t *testing.T) {
	m, _ := buildPool(t)
	m.Bytes()[format.BlockSize+format.SBMagic] ^= 1
	r := check(t, m)
	requireProblem(t, r, "superblock replica (block 1)", "bad magic", "primary is good")
	repairClean(t, m)
	// Both valid but disagreeing on the geometry.
	sb := superOf(t, m)
	sb.InodeCount -= format.InodesPerBlock
	sb.DataStart--
	sb.Encode(m.Bytes()[format.BlockSize:])
	r = check(t, m)
	requireProblem(t, r, "superblock replica (block 1)", "differs from the primary")
	repairClean(t, m)
}

func TestOrphan(t *testing.T) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	f, err := fs.Create(fs.Root(), "open", regMode)
	must(t, err)
	mustV[int](t)(fs.Write(f, 0, pattern(9000, 3), false))
	must(t, fs.Fsync(f)) // its blocks on media (DESIGN.md §Delayed commit)
	fs.Opened(f)
	must(t, fs.Unlink(fs.Root(), "open"))
	// The daemon dies here, with the file open: no Close.
	r := check(t, m)
	p := requireProblem(t, r, fmt.Sprintf("inode %d", f.Ino), "orphan", "next mount would free it")
	if !p.Repairable || len(r.Problems) != 1 || r.UsedBlocks != 4 { // 3 + the root's directory block
		t.Fatalf("report %+v:%s", r, problems(r))
	}
	rr := repairClean(t, m)
	if rr.Inodes != 1 || rr.UsedBlocks != 1 {
		t.Fatalf("after repair %+v", rr)
	}
}

func TestLinkCounts(t *testing.T) {
	m, s := buildPool(t)
	a := s.ino["/a"]
	d, _ := getInode(t, m, a)
	d.Nlink = 5
	putInode(t, m, a, d)
	dir := s.ino["/dir"]
	d, _ = getInode(t, m, dir)
	d.Nlink = 9
	putInode(t, m, dir, d)
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", a), "link count 5, but 2 directory entries name it")
	requireProblem(t, r, fmt.Sprintf("inode %d", dir), "link count 9, but it has 1 subdirectories (want 3)")
	if len(r.Problems) != 2 {
		t.Fatalf("want two problems:%s", problems(r))
	}
	repairClean(t, m)
	if d, _ := getInode(t, m, a); d.Nlink != 2 {
		t.Fatalf("nlink %d after repair", d.Nlink)
	}
}

func TestUnreachableGoesToLostFound(t *testing.T) {
	m, s := buildPool(t)
	// Cut /dir (a subtree) and /link out of the root.
	clear(m.Bytes()[slotOf(t, m, format.RootIno, "dir"):][:format.DirentSize])
	clear(m.Bytes()[slotOf(t, m, format.RootIno, "link"):][:format.DirentSize])
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", s.ino["/dir"]), "directory not reachable from the root")
	requireProblem(t, r, fmt.Sprintf("inode %d", s.ino["/link"]), "symlink not reachable from the root")
	requireProblem(t, r, "inode 1 ", "link count 3, but it has 0 subdirectories")
	for _, p := range r.Problems {
		if p.Ino == s.ino["/dir/sub"] || p.Ino == s.ino["/dir/f03"] {
			t.Errorf("reported inside the detached tree: %v", p)
		}
	}
	repairClean(t, m)
	fs, in := mountLookup(t, m, fmt.Sprintf("/lost+found/#%d/sub/deep", s.ino["/dir"]))
	if in.Ino != s.ino["/dir/sub/deep"] {
		t.Fatalf("found inode %d", in.Ino)
	}
	ln, err := fs.Lookup(mustLookup(t, fs, "/lost+found"), fmt.Sprintf("#%d", s.ino["/link"]))
	must(t, err)
	if target, _ := fs.Readlink(ln); target != "a" {
		t.Fatalf("symlink target %q", target)
	}
	must(t, fs.Close())
}

func mustLookup(t testing.TB, fs *core.FS, path string) *core.Inode {
	t.Helper()
	in := fs.Root()
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		var err error
		in, err = fs.Lookup(in, name)
		must(t, err)
	}
	return in
}

func TestManyUnreachable(t *testing.T) {
	// More than one batch, more than one lost+found block and extent.
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	d, err := fs.Create(fs.Root(), "d", dirMode)
	must(t, err)
	for i := 0; i < 250; i++ {
		_, err := fs.Create(d, fmt.Sprintf("x%d", i), regMode)
		must(t, err)
	}
	must(t, fs.Close())
	sb := superOf(t, m)
	clear(m.Bytes()[sb.InodeOff(d.Ino):][:format.InodeSize]) // the directory is gone: 250 unreachable files
	r := check(t, m)
	if n := strings.Count(problems(r), "not reachable"); n != 250 {
		t.Fatalf("%d unreachable reported:%s", n, problems(r))
	}
	rr := repairClean(t, m)
	if rr.Files != 250 {
		t.Fatalf("after repair %+v", rr)
	}
}

func TestDanglingAndBadEntries(t *testing.T) {
	m, s := buildPool(t)
	sb := superOf(t, m)
	dir := s.ino["/dir"]
	// f01's inode slot is freed: its entry dangles.
	clear(m.Bytes()[sb.InodeOff(s.ino["/dir/f01"]):][:format.InodeSize])
	// f02's entry is torn.
	m.Bytes()[slotOf(t, m, dir, "f02")+format.DEName] ^= 0x20
	// f03's entry gets the wrong type.
	off := slotOf(t, m, dir, "f03")
	putDirent(m, off, format.Dirent{Name: "f03", Type: format.DTLnk, Ino: s.ino["/dir/f03"]})
	// Entries naming the root, an inode past the table, and a duplicate name.
	putDirent(m, freeSlot(t, m, dir), format.Dirent{Name: "up", Type: format.DTDir, Ino: format.RootIno})
	putDirent(m, freeSlot(t, m, dir), format.Dirent{Name: "far", Type: format.DTReg, Ino: format.Ino(sb.InodeCount + 5)})
	putDirent(m, freeSlot(t, m, dir), format.Dirent{Name: "f04", Type: format.DTReg, Ino: s.ino["/a"]})
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("directory %d", dir), fmt.Sprintf("entry \"f01\" names free inode %d", s.ino["/dir/f01"]))
	requireProblem(t, r, fmt.Sprintf("directory %d", dir), "checksum mismatch")
	requireProblem(t, r, "entry \"f03\" has type 10, but inode", "is a regular file")
	requireProblem(t, r, "entry \"up\" names the root directory")
	requireProblem(t, r, "entry \"far\" names inode", "beyond the")
	requireProblem(t, r, "entry \"f04\" appears twice")
	repairClean(t, m)
	fs, in := mountLookup(t, m, fmt.Sprintf("/lost+found/#%d", s.ino["/dir/f02"]))
	if in.Ino != s.ino["/dir/f02"] {
		t.Fatal("f02 not in lost+found")
	}
	if _, err := fs.Lookup(mustLookup(t, fs, "/dir"), "f03"); err != nil {
		t.Fatal(err)
	}
	must(t, fs.Close())
}

func TestBadInodeChecksum(t *testing.T) {
	m, s := buildPool(t)
	a := s.ino["/a"]
	_, off := getInode(t, m, a)
	m.Bytes()[off+format.INSize] ^= 1
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d (byte %d): checksum mismatch", a, off), "2 entries naming it", "data is lost")
	requireProblem(t, r, "entry \"a2\" names damaged inode")
	rr := repairClean(t, m)
	if !strings.Contains(strings.Join(rr.Repaired, "\n"), "its data is lost") {
		t.Fatalf("repair does not say data was lost: %q", rr.Repaired)
	}
}

func TestDoubleOwner(t *testing.T) {
	m, s := buildPool(t)
	a, f := s.ino["/a"], s.ino["/dir/frag"]
	da, _ := getInode(t, m, a)
	df, _ := getInode(t, m, f)
	// frag's first extent now points into a's blocks.
	df.Inline[0].Phys = da.Inline[0].Phys + 1
	putInode(t, m, f, df)
	r := check(t, m)
	p := requireProblem(t, r, fmt.Sprintf("inode %d", max(a, f)), fmt.Sprintf("overlaps inode %d's extent 0", min(a, f)))
	t.Log(p)
	repairClean(t, m)
	fs, in := mountLookup(t, m, "/a")
	got := make([]byte, 10000)
	mustV[int](t)(fs.ReadAt(in, got, 0))
	if !bytes.Equal(got, pattern(10000, 1)) {
		t.Fatal("the lower inode's data changed")
	}
	if _, err := fs.Lookup(mustLookup(t, fs, "/dir"), "frag"); err == nil {
		t.Fatal("frag survived")
	}
	must(t, fs.Close())
}

func TestSelfOverlapAndBadExtents(t *testing.T) {
	for name, edit := range map[string]func(d *format.Inode){
		"self overlap": func(d *format.Inode) { d.Inline[1].Phys = d.Inline[0].Phys },
		"empty":        func(d *format.Inode) { d.Inline[2].Len = 0 },
		"outside":      func(d *format.Inode) { d.Inline[0].Phys = 3 },
		"order":        func(d *format.Inode) { d.Inline[1].Logical = 0 },
		"wrap":         func(d *format.Inode) { d.Inline[3].Logical = ^uint64(0) - 1; d.Inline[3].Len = 3 },
		"count":        func(d *format.Inode) { d.Extents = 7 },
		"chain":        func(d *format.Inode) { d.Overflow = d.Inline[0].Phys },
	} {
		t.Run(name, func(t *testing.T) {
			m, s := buildPool(t)
			f := s.ino["/dir/frag"]
			d, _ := getInode(t, m, f)
			edit(&d)
			putInode(t, m, f, d)
			r := check(t, m)
			requireProblem(t, r, fmt.Sprintf("inode %d", f), "data is lost")
			repairClean(t, m)
		})
	}
}

func TestOverflowBlockDamaged(t *testing.T) {
	m, s := buildPool(t)
	d, _ := getInode(t, m, s.ino["/dir/frag"])
	if d.Overflow == 0 {
		t.Fatal("frag has no overflow block")
	}
	m.Bytes()[d.Overflow.Off()+100] ^= 8
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("extent overflow block %d: checksum mismatch", d.Overflow))
	repairClean(t, m)
}

func TestTwoParentsAndCycle(t *testing.T) {
	m, s := buildPool(t)
	sub := s.ino["/dir/sub"]
	putDirent(m, freeSlot(t, m, format.RootIno), format.Dirent{Name: "sub2", Type: format.DTDir, Ino: sub})
	r := check(t, m)
	// Breadth-first from the root, the shallower entry wins.
	requireProblem(t, r, "entry \"sub\" names directory", "already has a parent")
	repairClean(t, m)

	// A cycle: /dir is cut from the root and dir/sub names dir.
	m, s = buildPool(t)
	clear(m.Bytes()[slotOf(t, m, format.RootIno, "dir"):][:format.DirentSize])
	putDirent(m, freeSlot(t, m, sub), format.Dirent{Name: "loop", Type: format.DTDir, Ino: s.ino["/dir"]})
	r = check(t, m)
	// The walk up from /dir comes round at dir/sub: sub is linked into
	// lost+found and dir's entry for it is the one cut.
	requireProblem(t, r, fmt.Sprintf("inode %d", sub), "directory cycle")
	requireProblem(t, r, "entry \"sub\" names directory", "already has a parent")
	repairClean(t, m)
}

func TestRootDamaged(t *testing.T) {
	m, s := buildPool(t)
	_, off := getInode(t, m, format.RootIno)
	m.Bytes()[off+format.INMtime] ^= 1
	r := check(t, m)
	requireProblem(t, r, "inode 1 ", "checksum mismatch", "empty root")
	repairClean(t, m)
	fs, in := mountLookup(t, m, fmt.Sprintf("/lost+found/#%d/a2", s.ino["/dir"]))
	if in.Ino != s.ino["/a"] {
		t.Fatal("wrong a2")
	}
	must(t, fs.Close())

	// A root that is not a directory, and a free root.
	m, _ = buildPool(t)
	d, _ := getInode(t, m, format.RootIno)
	d.Mode = format.ModeReg | 0o644
	putInode(t, m, format.RootIno, d)
	requireProblem(t, check(t, m), "inode 1 ", "root inode is a regular file")
	repairClean(t, m)
	sb := superOf(t, m)
	clear(m.Bytes()[sb.InodeOff(format.RootIno):][:format.InodeSize])
	requireProblem(t, check(t, m), "inode 1 ", "slot is free")
	repairClean(t, m)
}

func TestXattrBlockDamaged(t *testing.T) {
	m, s := buildPool(t)
	d, _ := getInode(t, m, s.ino["/a"])
	m.Bytes()[d.Xattr.Off()+10] ^= 1
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("xattr region at block %d: checksum mismatch", d.Xattr), "drops")
	repairClean(t, m)
	fs, in := mountLookup(t, m, "/a")
	if len(fs.Listxattr(in)) != 0 {
		t.Fatal("xattrs survived")
	}
	got := make([]byte, 10000)
	mustV[int](t)(fs.ReadAt(in, got, 0))
	if !bytes.Equal(got, pattern(10000, 1)) {
		t.Fatal("data changed")
	}
	must(t, fs.Close())
}

func TestSymlinkWithoutTarget(t *testing.T) {
	m, s := buildPool(t)
	l := s.ino["/link"]
	d, _ := getInode(t, m, l)
	d.Extents, d.Inline[0] = 0, format.Extent{}
	putInode(t, m, l, d)
	requireProblem(t, check(t, m), fmt.Sprintf("inode %d", l), "symlink has no target block")
	repairClean(t, m)
}

func TestFieldFixes(t *testing.T) {
	m, s := buildPool(t)
	a, dir, sub := s.ino["/a"], s.ino["/dir"], s.ino["/dir/sub"]
	d, _ := getInode(t, m, a)
	d.Mode |= 1 << 20
	d.Flags |= 0x80
	putInode(t, m, a, d)
	// /dir: the size says 1.5 blocks fewer than mapped.
	d, _ = getInode(t, m, dir)
	d.Size -= format.BlockSize + 100
	putInode(t, m, dir, d)
	// /dir/sub: a hole at block 0 below a size of 2 blocks.
	d, _ = getInode(t, m, sub)
	d.Inline[0].Logical = 1
	d.Size = 2 * format.BlockSize
	putInode(t, m, sub, d)
	r := check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", a), "bits outside the file type")
	requireProblem(t, r, fmt.Sprintf("inode %d", a), "unknown flags 0x80")
	requireProblem(t, r, fmt.Sprintf("inode %d", dir), "not a multiple of 4096")
	requireProblem(t, r, fmt.Sprintf("inode %d", dir), "maps blocks past its size")
	requireProblem(t, r, fmt.Sprintf("inode %d", sub), "1 unmapped blocks below its size")
	repairClean(t, m)
}

func TestJournalDamaged(t *testing.T) {
	m, _ := buildPool(t)
	sb := superOf(t, m)
	j := sb.JournalStart.Off()
	// A commit word naming a transaction the area does not hold.
	copy(m.Bytes()[j+format.JHCommit:], []byte{77, 0, 0, 0, 0, 0, 0, 0})
	r := check(t, m)
	requireProblem(t, r, "journal (block 2)", "committed transaction 77 is damaged")
	if !r.JournalPending {
		t.Fatal("JournalPending not set")
	}
	repairClean(t, m)
	// Bad magic.
	m.Bytes()[j] ^= 1
	requireProblem(t, check(t, m), "journal (block 2)", "bad magic")
	repairClean(t, m)
}

// TestJournalReplayedInMemory: a committed, unretired transaction is
// replayed by Check into its overlay only, and Repair replays it for real.
func TestJournalReplayedInMemory(t *testing.T) {
	m, s := buildPool(t)
	sb := superOf(t, m)
	// Commit a transaction whose effect is consistent only once applied:
	// a new entry "a3" for /a and /a's link count 3.
	rm := pmem.NewRecorder(m.Bytes())
	jr, err := journal.Open(rm, &sb)
	must(t, err)
	tx := jr.Begin()
	var de [format.DirentSize]byte
	(&format.Dirent{Name: "a3", Type: format.DTReg, Ino: s.ino["/a"]}).Encode(de[:])
	slot := freeSlot(t, m, format.RootIno)
	tx.Write(slot, de[:])
	d, off := getInode(t, m, s.ino["/a"])
	d.Nlink = 3
	var ib [format.InodeSize]byte
	d.Encode(ib[:])
	tx.Write(off, ib[:])
	must(t, tx.Commit())
	// Fence 2 is the commit point: the image has the word set, nothing applied.
	// The cache wrote the entry back on its own, not yet the inode.
	img := pmem.NewMemory(m.Size())
	copy(img.Bytes(), rm.Image(2))
	copy(img.Bytes()[slot:], de[:])
	r := requireClean(t, img)
	if !r.JournalPending {
		t.Fatal("pending transaction not seen")
	}
	// Without the replay the pool would be inconsistent.
	if a, _ := recovery.Analyze(img, false); len(a.Rep.Problems) == 0 {
		t.Fatal("the un-replayed image is consistent: the test proves nothing")
	}
	rr := repairClean(t, img)
	if len(rr.Repaired) != 1 || !strings.Contains(rr.Repaired[0], "replayed committed transaction") {
		t.Fatalf("repaired %q", rr.Repaired)
	}
	if d, _ := getInode(t, img, s.ino["/a"]); d.Nlink != 3 {
		t.Fatal("not replayed")
	}
}

func TestSessionDamaged(t *testing.T) {
	m := pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	f, err := fs.Create(fs.Root(), "job", regMode)
	must(t, err)
	must(t, fs.StartSession(f, 4, 16*format.BlockSize, format.SessionWrite))
	mustV[int](t)(fs.WriteAs(core.Caller{TID: 5}, f, 0, pattern(format.BlockSize, 1), false))
	must(t, fs.Close())
	r := requireClean(t, m) // an open session is legitimate
	d, _ := getInode(t, m, f.Ino)
	_, _, flog, _, _ := d.SessionFields()
	// Entry 2's Tail_ptr leaves its segment.
	hdr, err := format.DecodeFLogHeader(m.Bytes()[flog.Off():])
	must(t, err)
	binary.LittleEndian.PutUint64(m.Bytes()[hdr.PLog.Off()+2*format.PLogLine:], 1<<40)
	used := r.UsedBlocks
	r = check(t, m)
	requireProblem(t, r, fmt.Sprintf("inode %d", f.Ino), "entry 2: Tail_ptr", "abandons the session")
	rr := repairClean(t, m)
	if rr.UsedBlocks != used-uint64(hdr.Blocks+hdr.PBlocks) {
		t.Fatalf("used blocks %d -> %d: the logs were not freed", used, rr.UsedBlocks)
	}
	fs2, in := mountLookup(t, m, "/job")
	if _, open := fs2.Session(in); open {
		t.Fatal("session still open")
	}
	got := make([]byte, format.BlockSize)
	mustV[int](t)(fs2.ReadAt(in, got, 0))
	if !bytes.Equal(got, pattern(format.BlockSize, 1)) {
		t.Fatal("data lost")
	}
	must(t, fs2.Close())

	// The F_log's blocks are claimed by another file's extent too: the
	// session, not the data, gives way.
	m = pmem.NewMemory(testPoolSize)
	must(t, core.Format(m, 0, 0))
	fs, _, err = core.Open(m, core.Options{})
	must(t, err)
	f, err = fs.Create(fs.Root(), "job", regMode)
	must(t, err)
	must(t, fs.StartSession(f, 2, 4*format.BlockSize, format.SessionWrite))
	g, err := fs.Create(fs.Root(), "other", regMode)
	must(t, err)
	mustV[int](t)(fs.Write(g, 0, pattern(100, 2), false))
	must(t, fs.Close())
	requireClean(t, m)
	d, _ = getInode(t, m, f.Ino)
	_, _, flog, _, _ = d.SessionFields()
	dg, _ := getInode(t, m, g.Ino)
	dg.Inline[0].Phys = flog
	putInode(t, m, g.Ino, dg)
	requireProblem(t, check(t, m), fmt.Sprintf("inode %d", f.Ino), "session F_log", fmt.Sprintf("overlaps inode %d's extent 0", g.Ino))
	repairClean(t, m)
}

func TestLostFoundNameTaken(t *testing.T) {
	m, s := buildPool(t)
	// A regular file already holds the name.
	fs, _, err := core.Open(m, core.Options{})
	must(t, err)
	_, err = fs.Create(fs.Root(), "lost+found", regMode)
	must(t, err)
	must(t, fs.Close())
	clear(m.Bytes()[slotOf(t, m, format.RootIno, "renamed"):][:format.DirentSize])
	repairClean(t, m)
	fs2, in := mountLookup(t, m, fmt.Sprintf("/lost+found.1/#%d", s.ino["/renamed"]))
	if in.Ino != s.ino["/renamed"] {
		t.Fatal("wrong inode")
	}
	must(t, fs2.Close())
	// A second repair reuses the directory.
	clear(m.Bytes()[slotOf(t, m, format.RootIno, "link"):][:format.DirentSize])
	repairClean(t, m)
	fs3, _ := mountLookup(t, m, fmt.Sprintf("/lost+found.1/#%d", s.ino["/link"]))
	must(t, fs3.Close())
}

// TestRepairIsCrashSafe crashes Repair after every fence: the image must
// still check (no error), and a second Repair must finish the job.
func TestRepairIsCrashSafe(t *testing.T) {
	m, s := buildPool(t)
	m.Bytes()[format.SBMountCount] ^= 1                                        // primary superblock
	clear(m.Bytes()[slotOf(t, m, format.RootIno, "dir"):][:format.DirentSize]) // /dir unreachable
	d, _ := getInode(t, m, s.ino["/a"])
	d.Nlink = 9 // link count
	putInode(t, m, s.ino["/a"], d)
	_, off := getInode(t, m, s.ino["/link"])
	m.Bytes()[off+format.INMtime] ^= 1 // damaged inode
	rec := pmem.NewRecorder(m.Bytes())
	r, err := recovery.Repair(rec)
	must(t, err)
	if !r.Clean() {
		t.Fatalf("not clean:%s", problems(r))
	}
	n := rec.Fences()
	stride := 1
	if testing.Short() {
		stride = 3
	}
	for k := 0; k <= n; k += stride {
		img := sliceMedium(rec.Image(k))
		if _, err := recovery.Check(img); err != nil {
			t.Fatalf("crash after fence %d/%d of Repair: Check: %v", k, n, err)
		}
		rr, err := recovery.Repair(img)
		if err != nil || !rr.Clean() {
			t.Fatalf("crash after fence %d/%d of Repair, then Repair: %v%s", k, n, err, problems(rr))
		}
		fs, _, err := core.Open(img, core.Options{})
		if err != nil {
			t.Fatalf("crash after fence %d/%d of Repair, Repair again, mount: %v", k, n, err)
		}
		must(t, fs.Close())
	}
	t.Logf("%d crash points", n+1)
}
