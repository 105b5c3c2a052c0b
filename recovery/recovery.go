package recovery

import (
	"fmt"
	"strings"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// Problem is one inconsistency Check found.
type Problem struct {
	// Structure names what is wrong: "superblock primary (block 0)",
	// "journal (block 2)", "inode table", "inode", "directory",
	// "SSD-tier registry".
	Structure string
	// Ino is the inode concerned (the directory for "directory"), 0 if none.
	Ino format.Ino
	// Blk is the block holding the damaged bytes, when there is one.
	Blk format.Blk
	// Off is the pool byte offset of the damaged structure, 0 if unknown.
	Off format.Off
	// What says what is wrong, and for repairable problems what Repair does.
	What string
	// Repairable: Repair fixes it (possibly by discarding what is damaged).
	Repairable bool
}

// String renders the problem on one line, e.g.
// "inode 12 (byte 1234567): extent 3 (pool blocks 100..130) overlaps inode 9's extent 0 (pool blocks 90..110)".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Structure)
	if p.Ino != 0 {
		fmt.Fprintf(&b, " %d", p.Ino)
	}
	if p.Off != 0 {
		fmt.Fprintf(&b, " (byte %d)", p.Off)
	}
	b.WriteString(": ")
	b.WriteString(p.What)
	return b.String()
}

// Report is the result of Check or Repair.
type Report struct {
	Problems []Problem
	// Live inodes (orphans included) by type.
	Inodes, Dirs, Files, Symlinks int
	// Embedding tables kept (their descriptors decode and no two of their
	// shard copies overlap) and the devices the SSD-tier registry lists.
	Tables, TierDevices int
	// Data blocks owned by live inodes (extents, overflow and xattr
	// blocks, session logs, table descriptors) or by the SSD-tier
	// registry, and the rest of the data region.
	UsedBlocks, FreeBlocks uint64
	// JournalPending: a committed transaction was waiting for replay; Check
	// looked at the pool as it is after the replay (without writing it).
	JournalPending bool
	// ReplicaUsed: the primary superblock is bad and the replica was read.
	ReplicaUsed bool
	// Repaired lists, one line each, the changes Repair made.
	Repaired []string
}

// Clean reports whether Check found no problem.
func (r *Report) Clean() bool { return len(r.Problems) == 0 }

// Unrepairable returns the problems Repair cannot fix.
func (r *Report) Unrepairable() []Problem {
	var ps []Problem
	for _, p := range r.Problems {
		if !p.Repairable {
			ps = append(ps, p)
		}
	}
	return ps
}

// ErrNotPool: neither superblock has the dnnfs magic (format.ErrNotPool,
// which core.ErrNotPool is too).
var ErrNotPool = format.ErrNotPool

// Check verifies every structure of the pool on m without changing it.
// The error is non-nil only when the check cannot run at all (not a pool,
// both superblocks bad).
func Check(m pmem.Medium) (*Report, error) { return CheckProgress(m, nil) }

// Progress is told which step of a check runs (done of total steps).
type Progress func(step string, done, total int)

// CheckProgress is Check telling progress (nil: nothing).
func CheckProgress(m pmem.Medium, progress Progress) (*Report, error) {
	a, err := analyze(m, true, progress)
	if err != nil {
		return nil, err
	}
	return a.rep, nil
}

// maxPasses bounds Repair's fix-and-recheck loop.
const maxPasses = 1000

// Repair fixes what is safe to fix, then checks the pool again and returns
// that report, with Repaired listing the changes. Repairs that discard
// damaged data say so in their line. The caller holds the pool exclusively
// (pmem.Open).
func Repair(m pmem.Medium) (*Report, error) { return RepairProgress(m, nil) }

// RepairProgress is Repair telling progress (nil: nothing): the steps of
// each check pass, the last pass's being the final report's.
func RepairProgress(m pmem.Medium, progress Progress) (*Report, error) {
	var done []string
	sb, lines, err := repairSuperblocks(m)
	done = append(done, lines...)
	if err != nil {
		return nil, err
	}
	j, lines, err := repairJournal(m, &sb)
	done = append(done, lines...)
	if err != nil {
		return nil, err
	}
	var prev string
	for pass := 0; pass < maxPasses; pass++ {
		a, err := analyze(m, false, progress)
		if err != nil {
			return nil, err
		}
		phase := 0
		for _, f := range a.fixes {
			if phase == 0 || f.phase < phase {
				phase = f.phase
			}
		}
		if phase == 0 {
			break
		}
		var fixes []*fix
		for _, f := range a.fixes {
			if f.phase == phase {
				fixes = append(fixes, f)
			}
		}
		lines, err := apply(m, j, fixes)
		done = append(done, lines...)
		if err != nil {
			return &Report{Repaired: done}, err
		}
		// A pass that would redo exactly the previous one makes no progress.
		key := strings.Join(lines, "\n")
		if key == prev {
			break
		}
		prev = key
	}
	rep, err := CheckProgress(m, progress)
	if err != nil {
		return nil, err
	}
	rep.Repaired = done
	return rep, nil
}

// apply commits the fixes, packing whole fixes into transactions that fit
// the journal: each fix is atomic, a crash between two leaves a pool the
// next Repair continues from. Direct fixes (a phase of their own) store
// when they are reached.
func apply(m pmem.Medium, j *journal.Journal, fixes []*fix) ([]string, error) {
	var done []string
	tx := j.Begin()
	for _, f := range fixes {
		if f.direct != nil {
			lines, err := f.direct(m)
			if err != nil {
				return done, fmt.Errorf("repair: %s: %w", f.what, err)
			}
			done = append(done, lines...)
			continue
		}
		recs, lines, err := f.build()
		if err != nil {
			return done, fmt.Errorf("repair: %s: %w", f.what, err)
		}
		size := 0
		for _, r := range recs {
			size += format.RecordSize(len(r.data))
		}
		if size > j.Capacity() {
			return done, fmt.Errorf("repair: %s: %d bytes of changes do not fit the %d-byte journal", f.what, size, j.Capacity())
		}
		if !tx.Empty() && tx.Size()+size > j.Capacity() {
			if err := tx.Commit(); err != nil {
				return done, fmt.Errorf("repair: %w", err)
			}
			tx = j.Begin()
		}
		for _, r := range recs {
			tx.Write(r.off, r.data)
		}
		done = append(done, lines...)
	}
	if err := tx.Commit(); err != nil {
		return done, fmt.Errorf("repair: %w", err)
	}
	return done, nil
}
