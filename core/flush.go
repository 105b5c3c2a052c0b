package core

import (
	"cmp"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// with ErrIO while any of the file's data failed to persist and has not
// been rewritten since; lost lists the failures new in this call, for the
// caller to log (see LogLost) once it holds no inode lock.
func (in *Inode) syncLocked() (lost []LostRange, err error) {
	lost = in.flushDataLocked()
	if in.timesDirty || in.metaDirty {
		c := in.fs.begin()
		c.putInode(in, in.d)
		err = c.commit()
	}
	if ioe := in.lostErrLocked(); ioe != nil {
		err = ioe
	}
	return lost, err
}

// LostRange is file data whose flush failed.
type LostRange struct {
	Ino          Ino
	Off, Len     int64 // file bytes
	Phys         Blk   // first pool block
	Err          error
	Unattributed bool // the medium reported a write-back failure elsewhere while this data was unflushed
}

// wbGen is the medium's count of write-back failures it may have reported
// to a flush of another range (0 when it has no such notion).
func (fs *FS) wbGen() uint64 {
	if fs.wb != nil {
		return fs.wb.WritebackErrors()
	}
	return 0
}

// flushDataLocked persists the data written since the last call. Ranges
// whose flush failed are remembered in in.lost (until rewritten) and
// returned. When the medium reported a write-back failure anywhere since
// the oldest of these writes, every range flushed counts as failed: the
// failure may have been theirs (msync tells only that some page of the
// pool file was lost).
func (in *Inode) flushDataLocked() []LostRange {
	m := in.fs.m
	ranges := in.dirty
	if in.allDirty {
		ranges = in.exts
	}
	var lost []LostRange
	var failed []format.Extent
	var firstErr error
	for _, g := range flushGroups(ranges, m.Kind() == pmem.Emulated) {
		if err := m.Flush(int64(g.Phys.Off()), int64(g.Len*format.BlockSize)); err != nil {
			for _, e := range ranges {
				if e.Phys >= g.Phys && e.Phys < g.Phys+Blk(g.Len) {
					failed = append(failed, format.Extent{Phys: e.Phys, Len: e.Len})
					lost = append(lost, in.lostRangesLocked(e.Phys, e.Len, err, false)...)
				}
			}
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if len(ranges) > 0 {
		if err := m.Fence(); err != nil {
			// Nothing flushed here is known durable.
			failed, lost = failed[:0], lost[:0]
			for _, e := range ranges {
				failed = append(failed, format.Extent{Phys: e.Phys, Len: e.Len})
				lost = append(lost, in.lostRangesLocked(e.Phys, e.Len, err, false)...)
			}
		} else if g := in.fs.wbGen(); g != in.dirtyGen {
			if firstErr == nil {
				firstErr = fmt.Errorf("the pool medium reported %d write-back failure(s) while this data was unflushed", g-in.dirtyGen)
			}
			failed, lost = failed[:0], lost[:0]
			for _, e := range ranges {
				failed = append(failed, format.Extent{Phys: e.Phys, Len: e.Len})
				lost = append(lost, in.lostRangesLocked(e.Phys, e.Len, firstErr, true)...)
			}
		}
	}
	for _, e := range failed {
		in.lost = addRange(in.lost, e.Phys, e.Len)
	}
	in.dirty, in.allDirty = in.dirty[:0], false
	return lost
}

// flushGap: on an emulated pool, dirty ranges closer than this (blocks)
// are flushed by one msync over both. Each msync is an fsync of the pool
// file to the file system under it (a journal commit and a cache flush on
// ext4), and writing back the few clean pages between costs nothing, so
// 4 writers' interleaved ranges go out in a few calls instead of
// thousands.
const flushGap = 4096 // 16 MiB

// flushGroups returns the pool ranges to flush for ranges (Phys, Len): on
// an emulated pool merged across gaps up to flushGap, else as they are
// (a cache-line flush costs per line, so nothing is gained by covering
// clean lines).
func flushGroups(ranges []format.Extent, emulated bool) []format.Extent {
	if !emulated || len(ranges) < 2 {
		return ranges
	}
	sorted := slices.Clone(ranges)
	slices.SortFunc(sorted, func(a, b format.Extent) int { return cmp.Compare(a.Phys, b.Phys) })
	out := []format.Extent{{Phys: sorted[0].Phys, Len: sorted[0].Len}}
	for _, e := range sorted[1:] {
		last := &out[len(out)-1]
		end := last.Phys + Blk(last.Len)
		if e.Phys <= end+flushGap {
			last.Len = uint64(max(end, e.Phys+Blk(e.Len)) - last.Phys)
			continue
		}
		out = append(out, format.Extent{Phys: e.Phys, Len: e.Len})
	}
	return out
}

// lostErrLocked is ErrIO naming the file's data lost and not rewritten
// since, or nil. Ranges that left the file (truncate, punch) are dropped:
// no byte of the file is unpersisted there any more.
func (in *Inode) lostErrLocked() error {
	if len(in.lost) == 0 {
		return nil
	}
	var kept []format.Extent
	var first LostRange
	var bytes int64
	for _, l := range in.lost {
		for _, r := range in.lostRangesLocked(l.Phys, l.Len, nil, false) {
			kept = addRange(kept, r.Phys, uint64(r.Len/format.BlockSize))
			if bytes == 0 || r.Off < first.Off {
				first = r
			}
			bytes += r.Len
		}
	}
	in.lost = kept
	if len(kept) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d bytes of inode %d (first at file byte %d) failed to persist and have not been rewritten since",
		ErrIO, bytes, in.Ino, first.Off)
}

// lostRangesLocked maps pool blocks [b, b+n) to the file ranges they hold.
func (in *Inode) lostRangesLocked(b Blk, n uint64, err error, unattributed bool) []LostRange {
	var out []LostRange
	for _, e := range in.exts {
		lo, hi := max(b, e.Phys), min(b+Blk(n), e.Phys+Blk(e.Len))
		if lo >= hi {
			continue
		}
		out = append(out, LostRange{Ino: in.Ino, Off: int64(e.Logical+uint64(lo-e.Phys)) * format.BlockSize,
			Len: int64(hi-lo) * format.BlockSize, Phys: lo, Err: err, Unattributed: unattributed})
	}
	return out
}

// addRange adds pool blocks [b, b+n) to a list of ranges (Phys, Len).
func addRange(rs []format.Extent, b Blk, n uint64) []format.Extent {
	return append(cutRange(rs, b, n), format.Extent{Phys: b, Len: n})
}

// cutRange removes pool blocks [b, b+n) from a list of ranges.
func cutRange(rs []format.Extent, b Blk, n uint64) []format.Extent {
	var out []format.Extent
	end := b + Blk(n)
	for _, r := range rs {
		rEnd := r.Phys + Blk(r.Len)
		if rEnd <= b || r.Phys >= end {
			out = append(out, r)
			continue
		}
		if r.Phys < b {
			out = append(out, format.Extent{Phys: r.Phys, Len: uint64(b - r.Phys)})
		}
		if rEnd > end {
			out = append(out, format.Extent{Phys: end, Len: uint64(rEnd - end)})
		}
	}
	return out
}

// LogLost logs each lost range once, with the file's path when it still
// has one. The caller holds no inode lock (PathOf locks directories).
func (fs *FS) LogLost(lost []LostRange) { fs.logLost(lost, true) }

// logLostLocked is LogLost for a caller holding an inode lock: the
// message names the inode, not its path.
// Precondition: the caller may hold any Inode.mu (nothing here locks an inode).
func (fs *FS) logLostLocked(lost []LostRange) { fs.logLost(lost, false) }

func (fs *FS) logLost(lost []LostRange, withPath bool) {
	for _, l := range lost {
		path := ""
		if in := fs.Inode(l.Ino); in != nil && withPath {
			path = fs.PathOf(in)
		}
		msg := "file data failed to persist: rewrite these bytes (fsync of the file fails with EIO until then) and check the device holding the pool"
		if l.Unattributed {
			msg = "the pool medium lost data somewhere while this file data was unflushed: rewrite these bytes (fsync of the file fails with EIO until then) and check the device holding the pool"
		}
		fs.log.Error(msg, zap.Uint64("ino", uint64(l.Ino)), zap.String("path", path),
			zap.Int64("offset", l.Off), zap.Int64("length", l.Len), zap.Uint64("pool_block", uint64(l.Phys)),
			zap.Error(l.Err))
	}
}

// markDirtyLocked records pool blocks [b, b+n) as written by a write that
// began when the medium's write-back error count was gen. Writing a lost
// range makes it dirty again: the next fsync persists it anew.
func (in *Inode) markDirtyLocked(b Blk, n uint64, gen uint64) {
	if len(in.lost) > 0 {
		in.lost = cutRange(in.lost, b, n)
	}
	if len(in.dirty) == 0 && !in.allDirty {
		in.dirtyGen = gen
	} else {
		in.dirtyGen = min(in.dirtyGen, gen)
	}
	if in.allDirty {
		return
	}
	if k := len(in.dirty); k > 0 {
		last := &in.dirty[k-1]
		if last.Phys+Blk(last.Len) == b {
			last.Len += n
			return
		}
		if last.Phys <= b && b+Blk(n) <= last.Phys+Blk(last.Len) {
			return
		}
	}
	if len(in.dirty) >= 4096 {
		in.allDirty = true
		return
	}
	in.dirty = append(in.dirty, format.Extent{Phys: b, Len: n})
}
