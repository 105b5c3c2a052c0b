// Package crashimage_test checks crash consistency at every fence: the
// operations run in process on a pmem.Recorder, and for each fence k the
// image a machine crash right after fence k would leave (unflushed stores
// lost) is opened with core.Open and compared with the logical state after
// the operations that had returned by then (README "Durability contract").
// evict_test.go checks the same crash points with cache lines that reached
// media before their flush (pmem.Recorder.Crashes).
// What the tree does not show (segmented sessions, embedding tables, the
// SSD-tier registry) is recorded and checked next to it by ext_test.go,
// for the sweeps of session_test.go, table_test.go and paths_test.go.
package crashimage_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// recoveryCheck runs the independent checker (package recovery) on a crash
// image, when the test is built with it (recovery_on_test.go, build tag
// dnnfs_recovery; TestFencesWithRecoveryCheck builds and runs that
// automatically once package recovery compiles). It returns the problems
// other than orphans, and how many orphan problems it saw.
var recoveryCheck func(m pmem.Medium) (problems []string, orphans int, err error)

// knownBugs maps a step name to the reason its crash points are skipped:
// a dnnfs bug the step exposes, to be removed once fixed.
var knownBugs = map[string]string{}

// mainScript is a deterministic sequence of operations covering every kind
// of metadata change and the data paths of the durability contract.
func mainScript(s *script) {
	const bs = format.BlockSize
	s.mkdir("/a")
	s.mkdir("/a/b")
	s.create("/f1", 0o644)
	s.write("/f1", 0, 10000, 1)     // allocates, extends
	s.fsync("/f1")                  // nothing unsure: only times
	s.write("/f1", 100, 200, 2)     // overwrite in place: unsure until fsync
	s.write("/f1", 20000, 5000, 3)  // past EOF: zero tail, hole, allocate
	s.write("/f1", 3*bs+10, 100, 4) // into the hole inside the file
	s.fsync("/f1")                  // the overwrite becomes durable
	s.create("/a/g", 0o600)         // second file
	for i := int64(0); i < 6; i++ { // six separate extents: overflow block
		s.write("/a/g", i*2*bs+17, 3000, 10+uint64(i))
	}
	s.setxattr("/a/g", "user.small", []byte("twenty bytes of text"), core.XattrCreate, nil)
	s.setxattr("/a/g", "user.big", pattern(20, 6000), 0, nil)                          // region grows: moves
	s.setxattr("/a/g", "user.small", []byte("replaced value"), core.XattrReplace, nil) // same size: in place
	s.setxattr("/a/g", "user.small", []byte("x"), core.XattrCreate, core.ErrExist)     // refused
	s.removexattr("/a/g", "user.big")                                                  // region shrinks: moves
	s.link("/a/g", "/a/b/g2", nil)
	s.link("/a/g", "/a/b/g2", core.ErrExist)
	s.rename("/f1", "/a/b/f1", 0, nil) // across directories
	s.create("/a/b/f3", 0o644)
	s.write("/a/b/f3", 0, 5000, 30)
	s.rename("/a/b/f3", "/a/b/f1", 0, nil) // replaces (and frees) the old f1
	s.write("/a/b/f1", 0, 9*bs, 31)        // extends over the partial last block
	s.truncate("/a/b/f1", 1000)            // shrink: frees blocks, zero tail after commit
	s.truncate("/a/b/f1", 9000)            // grow: zeros
	s.fallocate("/a/b/f1", 0, 8*bs, 0)     // allocate and extend
	s.fallocate("/a/b/f1", 10*bs, 2*bs, core.FallocKeepSize)
	s.write("/a/b/f1", 1000, 1000, 32)                                              // overwrite: unsure
	s.write("/a/b/f1", 5*bs+10, 100, 33)                                            // into unwritten blocks: converts them
	s.fallocate("/a/b/f1", 100, 200, core.FallocPunchHole|core.FallocKeepSize)      // inside one block
	s.fallocate("/a/b/f1", 3*bs, 2*bs, core.FallocPunchHole|core.FallocKeepSize)    // whole blocks
	s.fallocate("/a/b/f1", 500, 2*bs+100, core.FallocPunchHole|core.FallocKeepSize) // partial + whole
	s.fsync("/a/b/f1")
	for i := 0; i < 16; i++ { // the directory grows past one block of 15 slots
		s.create(fmt.Sprintf("/a/b/e%02d", i), 0o644)
	}
	s.write("/a/b/e15", 0, 100, 40)
	s.rename("/a/b", "/c", 0, nil) // a directory moves up: link counts of both parents
	s.mkdir("/d")
	s.mkdir("/c/sub")
	s.create("/c/sub/x", 0o644)
	s.rename("/d", "/c/sub", 0, core.ErrNotEmpty)
	s.unlink("/c/sub/x")
	s.rename("/c/sub", "/d", 0, nil) // a directory replaces an empty directory
	s.rmdir("/c", core.ErrNotEmpty)
	for i := 0; i < 15; i += 2 {
		s.unlink(fmt.Sprintf("/c/e%02d", i))
	}
	s.create("/c/e20", 0o644) // reuses a free slot
	s.symlink("/c/lnk", "../a/g")
	s.chmod("/c/f1", 0o600)
	s.utimens("/c/f1")
	s.rename("/c/f1", "/c/g2", core.RenameExchange, nil)
	s.rename("/c/lnk", "/d/lnk", core.RenameNoReplace, nil)
	s.unlink("/a/g") // g2 keeps the inode: nlink 2 -> 1
	s.rmdir("/d", core.ErrNotEmpty)
	s.unlink("/d/lnk")
	s.rmdir("/d", nil)

	// An orphan: unlinked while open, written, then released.
	s.create("/o", 0o644)
	s.write("/o", 0, 8000, 50)
	o := s.lookup("/o")
	s.do("open /o", nil, func() error { s.p.Opened(o); return nil })
	s.unlink("/o")
	s.writeIno("write orphan", o, 8000, pattern(51, 9000))
	s.do("release /o", nil, func() error { return s.p.Released(o) })

	s.create("/big", 0o644)
	s.write("/big", 0, 200<<10, 60) // many blocks in one transaction
	s.write("/big", 50<<10, 10, 61) // unsure
	s.truncate("/big", 0)           // frees them all; the unsure bytes go too
	s.write("/c/g2", 4096*3, 4096, 62)
	s.fsync("/c/g2")
	s.truncate("/c/f1", 5000) // six extents down to two: the overflow block is freed
	s.setxattr("/c", "user.dir", []byte("on a directory"), 0, nil)
	s.mkdir("/c/sub2")
	s.rename("/c", "/c/sub2/x", 0, core.ErrInvalid) // into itself
	s.rmdir("/c/sub2", nil)

	// A directory exactly one block full grows by rename, link and mkdir.
	s.mkdir("/full")
	s.setup = true
	for i := 0; i < format.DirentsPerBlock; i++ {
		s.create(fmt.Sprintf("/full/n%02d", i), 0o644)
	}
	s.setup = false
	s.rename("/c/e20", "/full/moved", 0, nil)
	s.unlink("/full/n00")
	s.unlink("/full/n01")
	s.link("/c/g2", "/full/n00", nil)
	s.mkdir("/full/n01")
	s.mkdir("/full/dir2") // grows again
	// A directory and a file exchange places across directories.
	s.rename("/full/dir2", "/c/e01", core.RenameExchange, nil)
	s.unlink("/c/f1") // the last name of a file with xattrs: all its blocks go
	// No space: refused with nothing changed.
	s.create("/huge", 0o644)
	s.write("/huge", 0, 1<<20, 70)
	s.do("write /huge beyond the pool", core.ErrNoSpace, func() error {
		_, err := s.p.Write(s.lookup("/huge"), 1<<20, pattern(71, poolSize), false)
		return err
	})
	s.do("fallocate /huge beyond the pool", core.ErrNoSpace, func() error {
		return s.p.Fallocate(s.lookup("/huge"), 0, poolSize, 0)
	})
	s.unlink("/huge")

	// A file of 200 extents (two overflow blocks) whose holes one write
	// fills with blocks from elsewhere: 391 extents, a third overflow
	// block, in one transaction; then punched, then cut back to inline
	// extents (the overflow blocks are freed).
	s.create("/frag", 0o644)
	s.setup = true
	for i := int64(0); i < 200; i++ {
		s.write("/frag", 2*i*bs, bs, 100+uint64(i))
	}
	s.setup = false
	s.write("/frag", bs, 397*bs, 300)
	s.fallocate("/frag", 100*bs, 50*bs, core.FallocPunchHole|core.FallocKeepSize)
	s.truncate("/frag", 3*bs+1)
	s.unlink("/frag")
}

func TestFences(t *testing.T) {
	s := newScript(t, poolSize)
	mainScript(s)
	s.close()
	verifyScript(t, s, knownBugs)
	// The thousands of dirty data lines per crash point make each eviction
	// image costly; the race detector finds nothing in a sweep of one
	// operation at a time, and TestFencesWithRecoveryCheck runs this one
	// without it (and with recovery.Check) in the same go test -race.
	if !raceEnabled {
		verifyEvictions(t, s, evictSubsets)
	}
}

// verifyScript checks the crash image at every fence of the script: inside
// mkfs, inside Open and inside each step.
func verifyScript(t *testing.T, s *script, bugs map[string]string) {
	var tested atomic.Int64
	t.Run("mkfs", func(t *testing.T) {
		t.Parallel()
		for k := 0; k < s.fmtFences; k++ {
			p, _, err := core.Open(sliceMedium(s.rec.Image(k)), core.Options{CommitInterval: -1}) // few: the Recorder itself
			tested.Add(1)
			if errors.Is(err, core.ErrNotPool) {
				continue
			}
			if err != nil {
				t.Errorf("fence %d (inside Format): Open: %v; want ErrNotPool or the empty file system", k, err)
				continue
			}
			got, err := snapshot(p)
			if err != nil {
				t.Errorf("fence %d (inside Format): %v", k, err)
				continue
			}
			if d := diffTrees(got, s.steps[0].snap, nil, 5); len(d) > 0 {
				t.Errorf("fence %d (inside Format): not the empty file system:\n  %s", k, strings.Join(d, "\n  "))
			}
		}
	})
	noFence, setupFences := 0, 0
	for i, st := range s.steps {
		lo := s.fmtFences
		if i > 0 {
			lo = s.steps[i-1].fences + 1
		}
		if lo > st.fences {
			noFence++
			continue
		}
		if st.setup {
			setupFences += st.fences - lo + 1
			continue
		}
		name := fmt.Sprintf("%02d-%s", i, strings.ReplaceAll(st.name, "/", "_"))
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if why, ok := bugs[st.name]; ok {
				t.Skip("BUG: " + why)
			}
			im := s.imagesFrom(lo)
			defer im.release()
			if !raceEnabled || i%8 == 0 {
				// The fast images must be the Recorder's.
				if !bytes.Equal(im.cur, s.rec.Image(lo)) {
					t.Fatalf("the incremental image after fence %d differs from Recorder.Image(%d)", lo, lo)
				}
			}
			for k := lo; k <= st.fences; k, _ = k+1, im.next() {
				tested.Add(1)
				if err := checkFence(s, k, im.image()); err != nil {
					t.Errorf("crash after fence %d (step %d %q, fences %d..%d): %v", k, i, st.name, lo, st.fences, err)
				}
			}
		})
	}
	t.Cleanup(func() {
		n := s.rec.Fences()
		if !bytes.Equal(s.imagesFrom(n).cur, s.rec.Image(n)) {
			t.Errorf("the incremental image after the last fence %d differs from Recorder.Image", n)
		}
		checker := "core.Open only"
		if recoveryCheck != nil {
			checker = "core.Open and recovery.Check"
		}
		t.Logf("%d steps (%d without a fence), %d fences in all (%d in setup steps, not examined), %d crash images checked (%s), and %d images of a crash during their recovery",
			len(s.steps), noFence, s.rec.Fences(), setupFences, tested.Load(), checker, s.recrashes.Load())
	})
}

// candidates returns the steps a crash right after fence k may show: the
// last step that had returned by then, and the one in flight.
func candidates(s *script, k int) []int {
	lo := -1
	for j, st := range s.steps {
		if st.fences <= k {
			lo = j
		}
	}
	if lo < 0 { // inside Open: the state Format left
		return []int{0}
	}
	c := []int{lo}
	if lo+1 < len(s.steps) {
		c = append(c, lo+1)
	}
	return c
}

// checkFence opens img, the crash image after fence k, and checks it. It
// may change img.
func checkFence(s *script, k int, img []byte) error { return checkCrash(s, k, img, false) }

// checkCrash is checkFence for img, or with evicted for an eviction image
// of the crash between fence k and fence k+1 (pmem.Crashes): the same
// states are allowed, but what it shows is not fence k's image, so the
// checks that compare consecutive fences leave it out.
func checkCrash(s *script, k int, img []byte, evicted bool) error {
	if recoveryCheck != nil {
		// Check never stores into the medium (package recovery's doc).
		probs, _, err := recoveryCheck(sliceMedium(img))
		if err != nil {
			return fmt.Errorf("recovery.Check: %v", err)
		}
		if evicted {
			probs = slices.DeleteFunc(probs, tornSuperblock)
		}
		if len(probs) > 0 {
			return fmt.Errorf("recovery.Check found problems in the crash image:\n  %s", strings.Join(probs, "\n  "))
		}
	}
	// When recovery will write (replay, orphans), record its flushes to
	// crash it again at each of its fences.
	var m pmem.Medium = sliceMedium(img)
	var tm *tee
	if recoveryNeedsWrites(s, img) {
		tm = newTee(m)
		m = tm
	}
	p, rep, err := core.Open(m, core.Options{CommitInterval: -1})
	if err != nil {
		return fmt.Errorf("Open: %v", err)
	}
	got, err := snapshot(p)
	if err != nil {
		return fmt.Errorf("recovered tree: %v", err)
	}
	cands := candidates(s, k)
	match := -1
	var report []string
	for _, c := range cands {
		unsure := s.steps[c].unsure
		if c+1 < len(s.steps) && c+1 == cands[len(cands)-1] && len(s.steps[c+1].inflight) > 0 {
			// The next step may have been storing in place when the crash
			// came: its overwritten bytes may be old, new or mixed.
			unsure = unsure.clone()
			for ino, sp := range s.steps[c+1].inflight {
				for _, r := range sp {
					unsure[ino] = unsure[ino].add(r.Off, r.End)
				}
			}
		}
		d := diffTrees(got, s.steps[c].durable, unsure, 8)
		if len(d) == 0 && s.extra != nil {
			if err := s.extra(p, k, c, evicted); err != nil {
				d = append(d, err.Error())
			}
		}
		if len(d) == 0 {
			match = c
			break
		}
		report = append(report, fmt.Sprintf("vs. state after step %d %q:\n    %s", c, s.steps[c].name, strings.Join(d, "\n    ")))
	}
	if match < 0 {
		return fmt.Errorf("recovered tree is neither state (replayed %d records, freed %d orphans):\n  %s",
			rep.ReplayedRecs, rep.OrphansFreed, strings.Join(report, "\n  "))
	}
	if (rep.ReplayedRecs > 0 || rep.OrphansFreed > 0) && tm == nil {
		return fmt.Errorf("recovery replayed %d records and freed %d orphans, but the image has no pending transaction and no orphan flag set",
			rep.ReplayedRecs, rep.OrphansFreed)
	}
	if tm != nil {
		// A second crash during recovery (replay, orphan freeing) must lead
		// to the same state. Fences 0 and the last are the image itself and
		// a complete recovery.
		defer tm.release()
		n := tm.count()
		im := tm.imagesFrom(1)
		defer im.release()
		for j := 1; j < n; j, _ = j+1, im.next() {
			s.recrashes.Add(1)
			p2, _, err := core.Open(sliceMedium(im.image()), core.Options{CommitInterval: -1})
			if err != nil {
				return fmt.Errorf("crash after fence %d of recovery: Open: %v", j, err)
			}
			got2, err := snapshot(p2)
			if err != nil {
				return fmt.Errorf("crash after fence %d of recovery: %v", j, err)
			}
			if d := diffTrees(got2, got, nil, 5); len(d) > 0 {
				return fmt.Errorf("crash after fence %d of recovery: state differs from a full recovery:\n  %s", j, strings.Join(d, "\n  "))
			}
			if s.extra != nil {
				if err := s.extra(p2, k, match, evicted); err != nil {
					return fmt.Errorf("crash after fence %d of recovery: %v", j, err)
				}
			}
		}
	}
	if !s.fullChecks(k) {
		return nil
	}
	// The recovered pool must be usable and close cleanly.
	if err := probe(p); err != nil {
		return fmt.Errorf("using the recovered pool: %v", err)
	}
	probed, err := snapshot(p)
	if err != nil {
		return fmt.Errorf("after a probe of the recovered pool: %v", err)
	}
	if err := p.Close(); err != nil {
		return fmt.Errorf("Close of the recovered pool: %v", err)
	}
	if recoveryCheck != nil {
		probs, orphans, err := recoveryCheck(m)
		if err != nil {
			return fmt.Errorf("recovery.Check after recovery and Close: %v", err)
		}
		if len(probs) > 0 || orphans > 0 {
			return fmt.Errorf("recovery.Check after recovery and Close: %d orphans, problems:\n  %s", orphans, strings.Join(probs, "\n  "))
		}
	}
	p3, rep3, err := core.Open(m, core.Options{CommitInterval: -1})
	if err != nil {
		return fmt.Errorf("Open after recovery and Close: %v", err)
	}
	if !rep3.WasClean || rep3.ReplayedRecs != 0 || rep3.OrphansFreed != 0 {
		return fmt.Errorf("Open after recovery and Close: not clean: %+v", *rep3)
	}
	got3, err := snapshot(p3)
	if err != nil {
		return fmt.Errorf("Open after recovery and Close: %v", err)
	}
	if d := diffTrees(got3, probed, nil, 5); len(d) > 0 {
		return fmt.Errorf("after recovery, a probe and Close, the tree changed:\n  %s", strings.Join(d, "\n  "))
	}
	return nil
}

// recoveryNeedsWrites reports whether Open of img will replay a journal
// transaction or free orphans (inodes with no links), read from the raw
// image with package format.
func recoveryNeedsWrites(s *script, img []byte) bool {
	if s.recoveryWrites != nil && s.recoveryWrites(img) {
		return true
	}
	sb, _, err := core.ReadSuperblock(sliceMedium(img))
	if err != nil {
		return false
	}
	j := sb.JournalStart.Off()
	if binary.LittleEndian.Uint64(img[j+format.JHCommit:]) != 0 {
		return true
	}
	for ino := format.Ino(1); uint64(ino) < sb.InodeCount; ino++ {
		off := sb.InodeOff(ino)
		slot := img[off : off+format.InodeSize]
		if format.IsZero(slot) {
			continue
		}
		if d, err := format.DecodeInode(slot); err == nil && d.Nlink == 0 {
			return true
		}
	}
	return false
}

// fullChecks says whether the crash image after fence k also gets the
// expensive checks (use of the recovered pool, Close, reopen): always,
// except under the race detector, where only fence 1 and every 4000th do.
// make test still runs them all: TestFencesWithRecoveryCheck runs the
// same scripts in a subprocess built without the detector.
func (s *script) fullChecks(k int) bool {
	return !raceEnabled || k%4000 == 1
}

// sliceMedium opens an image in place (pmem.MemoryOver).
func sliceMedium(b []byte) pmem.Medium { return pmem.MemoryOver(b) }

// probe creates, writes, renames and removes a file and a directory.
func probe(p *core.FS) error {
	root := p.Root()
	d, err := p.Create(root, ".probe-dir", core.NewInode{Mode: format.ModeDir | 0o755})
	if err != nil {
		return err
	}
	f, err := p.Create(d, "f", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		return err
	}
	data := pattern(99, 3*format.BlockSize+5)
	if _, err := p.Write(f, 7, data, false); err != nil {
		return err
	}
	if err := p.Fsync(f); err != nil {
		return err
	}
	buf := make([]byte, len(data))
	if _, err := p.ReadAt(f, buf, 7); err != nil {
		return err
	}
	if string(buf) != string(data) {
		return errors.New("probe file reads back different bytes")
	}
	if err := p.Rename(d, "f", root, ".probe-f", 0); err != nil {
		return err
	}
	if err := p.Unlink(root, ".probe-f"); err != nil {
		return err
	}
	return p.Rmdir(root, ".probe-dir")
}

// TestMkfsOverOldPool: mkfs --force over a pool that holds files. A crash
// at any fence of Format leaves the old file system (before the first
// fence), "not a pool", or the new empty file system; never a mix.
func TestMkfsOverOldPool(t *testing.T) {
	old := newScript(t, poolSize)
	shortScript(old)
	old.close()
	oldTree := old.steps[len(old.steps)-1].snap
	rec := pmem.NewRecorder(old.rec.Image(old.rec.Fences()))
	if err := core.Format(rec, 0, 0); err != nil {
		t.Fatal(err)
	}
	p, _, err := core.Open(sliceMedium(rec.Image(rec.Fences())), core.Options{CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := snapshot(p)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= rec.Fences(); k++ {
		p, _, err := core.Open(sliceMedium(rec.Image(k)), core.Options{CommitInterval: -1})
		if errors.Is(err, core.ErrNotPool) && k > 0 {
			continue
		}
		if err != nil {
			t.Errorf("fence %d of %d: Open: %v", k, rec.Fences(), err)
			continue
		}
		got, err := snapshot(p)
		if err != nil {
			t.Errorf("fence %d of %d: %v", k, rec.Fences(), err)
			continue
		}
		want, what := empty, "the new empty file system"
		if k == 0 {
			want, what = oldTree, "the old file system"
		}
		if d := diffTrees(got, want, nil, 5); len(d) > 0 {
			t.Errorf("fence %d of %d: not %s:\n  %s", k, rec.Fences(), what, strings.Join(d, "\n  "))
		}
	}
	t.Logf("%d crash images of mkfs over an old pool checked", rec.Fences()+1)
}
