package core

import (
	"github.com/dnnfs/dnnfs/alloc"
	"github.com/dnnfs/dnnfs/format"
)

// allocator is the DRAM free-space map (package alloc), rebuilt at every
// mount by package recovery from the live inodes. It is never on media,
// so a crash cannot leave it inconsistent. The lower-case methods keep
// the core's call sites unchanged.
type allocator struct{ m *alloc.Map }

func (a *allocator) free() uint64 { return a.m.Free() }

// markUsed marks [b, b+n) used while loading; it reports false if any
// block was already used (two owners: corruption).
func (a *allocator) markUsed(b Blk, n uint64) bool { return a.m.MarkUsed(b, n) }

// release returns [b, b+n) to the free map.
func (a *allocator) release(b Blk, n uint64) { a.m.Release(b, n) }

// allocContig takes exactly n contiguous blocks (alloc.Map.AllocContig).
func (a *allocator) allocContig(goal Blk, n uint64) (Blk, bool) { return a.m.AllocContig(goal, n) }

// allocRuns allocates exactly n blocks in one or more runs, or none.
func (a *allocator) allocRuns(goal Blk, n uint64) []format.Extent { return a.m.AllocRuns(goal, n) }
