package core

import (
	"fmt"
	"sort"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/lock"
)

const bs = format.BlockSize

// Data-path rule: a regular file's extents and size change only under
// Inode.mu, and only for blocks the changer holds an exclusive range lock
// on (size changes: the whole-file lock). So the holder of a range lock
// may use a snapshot of the extent list for its range after dropping mu.

// walk calls fn for each piece of [off, off+n) of the file: pool byte
// offset (or -1 for a hole), position in the caller's buffer, length.
func walk(exts []format.Extent, off, n int64, fn func(pool int64, pos, l int)) {
	pos := 0
	for n > 0 {
		fb := uint64(off) / bs
		inBlk := off % bs
		phys, run, ok := format.MapBlock(exts, fb)
		var l int64
		if run == 0 { // no extent at or after fb
			l = n
		} else { // run*bs is at most 2^63 (format.MaxFileBlocks): uint64
			l = int64(min(uint64(n), run*bs-uint64(inBlk)))
		}
		if ok {
			fn(int64(phys.Off())+inBlk, pos, int(l))
		} else {
			fn(-1, pos, int(l))
		}
		off += l
		n -= l
		pos += int(l)
	}
}

// ReadData is the result of Read: slices of the pool mapping (holes as
// zeros). Serving them straight from the mapping beat pread and splice of
// the pool file on emulated pools (2.1 vs 1.8 GB/s cold, 3.4 vs 1.7 warm,
// 1 MiB reads), so reads never go through the file.
type ReadData struct {
	Slices [][]byte
	Size   int
	// What Done releases, kept as fields, not a closure, and Slices
	// backed by inline while the range is at most two extents: a FUSE
	// read then allocates only the ReadData (DESIGN.md, "FUSE data path").
	fs     *FS
	in     *Inode
	l      *lock.Lock
	c      Caller
	sess   bool // a read session counts [off, off+Size) at Done
	off    int64
	inline [2][]byte
}

// Done releases the read; the data must not be used afterwards.
func (r *ReadData) Done() {
	if r.l == nil {
		return
	}
	if r.sess {
		// Progress before the lock goes: an abandon or truncate holding
		// the whole file cannot interleave.
		r.fs.sessionProgress(r.in, r.c, r.l.PID, uint64(r.off), uint64(r.Size), false)
	}
	r.in.locks.Release(r.l)
	r.l = nil
}

// Read returns the bytes of [off, off+n) clipped to the file size without
// copying them. The data stays valid, and writers to the range wait,
// until Done is called.
func (fs *FS) Read(in *Inode, off int64, n int) (*ReadData, error) {
	return fs.ReadAs(Caller{}, in, off, n)
}

// ReadAs is Read on behalf of a caller (its thread takes the range lock).
func (fs *FS) ReadAs(c Caller, in *Inode, off int64, n int) (*ReadData, error) {
	if off < 0 {
		return nil, ErrInvalid
	}
	if in.IsDir() {
		return nil, ErrIsDir
	}
	if in.IsTable() {
		return nil, fmt.Errorf("%w: its bytes are read through the SSD tier", ErrTable)
	}
	l, err := fs.lockData(c, in, off, int64(max(n, 1)), lock.Shared, false)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	size := int64(in.d.Size)
	exts := in.exts
	if !c.NoAtime {
		fs.touchAtimeLocked(in)
	}
	in.mu.Unlock()
	r := &ReadData{fs: fs, in: in, l: l}
	if off >= size || n <= 0 {
		r.Done()
		return r, nil
	}
	length := min(int64(n), size-off)
	r.Size = int(length)
	// A read session counts a read once its data is on its way.
	r.sess, r.c, r.off = in.sess.Load() != nil, c, off
	r.Slices = r.inline[:0]
	fs.stats.Reads.Add(1)
	fs.stats.ReadBytes.Add(uint64(length))
	b := fs.m.Bytes()
	walk(exts, off, length, func(p int64, _, k int) {
		if p < 0 {
			for k > 0 {
				z := min(k, len(fs.zero))
				r.Slices = append(r.Slices, fs.zero[:z])
				k -= z
			}
			return
		}
		r.Slices = append(r.Slices, b[p:p+int64(k)])
	})
	return r, nil
}

// ReadAt copies file bytes into p and returns how many were read (short at
// end of file).
func (fs *FS) ReadAt(in *Inode, p []byte, off int64) (int, error) {
	r, err := fs.Read(in, off, len(p))
	if err != nil {
		return 0, err
	}
	defer r.Done()
	n := 0
	for _, d := range r.Slices {
		n += copy(p[n:], d)
	}
	return n, nil
}

// Fsync makes the file's data and attributes durable, and an open
// session's progress with them.
func (fs *FS) Fsync(in *Inode) error {
	if err := fs.persistSessionTails(in); err != nil {
		return err
	}
	in.preflush()
	in.mu.Lock()
	fs.stats.Fsyncs.Add(1)
	lost, err := in.syncLocked()
	in.mu.Unlock()
	fs.LogLost(lost)
	return err
}

// Opened counts an open handle; Released drops one. An unlinked inode
// lives while a handle or a kernel reference remains (see KernelRef).
func (fs *FS) Opened(in *Inode) {
	in.mu.Lock()
	in.opens++
	in.mu.Unlock()
}

// Released drops an open handle and frees the inode if it was the last
// thing keeping an unlinked file alive.
func (fs *FS) Released(in *Inode) error {
	in.mu.Lock()
	in.opens--
	in.mu.Unlock()
	return fs.freeIfUnused(in)
}

// KernelRef records one more kernel reference to in: a FUSE node ID the
// kernel was handed (LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK,
// READDIRPLUS replies) and will release with FORGET. While the kernel
// holds one, it may still reach the inode without a name (an O_PATH
// descriptor, /proc/self/fd/N, the cwd, a file handle), so an unlinked
// inode is kept, data and number, until KernelForget drops the last
// reference (README, "File lifetime").
func (fs *FS) KernelRef(in *Inode) {
	in.mu.Lock()
	in.krefs++
	in.mu.Unlock()
}

// KernelForget drops a kernel reference taken by KernelRef; an unlinked
// inode with no open handles left is freed with the last one.
func (fs *FS) KernelForget(in *Inode) error {
	in.mu.Lock()
	if in.krefs > 0 {
		in.krefs--
	}
	in.mu.Unlock()
	return fs.freeIfUnused(in)
}

// inUseLocked reports whether anything but a name still reaches in.
func (in *Inode) inUseLocked() bool { return in.opens > 0 || in.krefs > 0 }

// freeIfUnused frees in if it has no links, handles or kernel references
// left. The slot stays marked orphan on media until then, so a crash in
// between leaves it for the next mount to free.
func (fs *FS) freeIfUnused(in *Inode) error {
	in.mu.Lock()
	orphan := !in.inUseLocked() && in.d.Nlink == 0
	in.mu.Unlock()
	if !orphan {
		return nil
	}
	fs.nsMu.Lock()
	defer fs.nsMu.Unlock()
	in.mu.Lock()
	still := !in.inUseLocked() && in.d.Nlink == 0 && fs.Inode(in.Ino) == in
	in.mu.Unlock()
	if !still || fs.closed.Load() {
		return nil
	}
	if err := fs.freeInode(in); err != nil {
		return fmt.Errorf("freeing unlinked inode %d: %w", in.Ino, err)
	}
	return nil
}

// SeekData answers lseek(2) SEEK_DATA (hole false) and SEEK_HOLE (hole
// true) from the extent map, at block granularity as ext4 and tmpfs do:
// a written block is data; an unmapped block, or one fallocate made and
// nothing wrote since (unwritten), is a hole; so is the end of the file.
// Embedding tables have no extents here and are all data.
func (fs *FS) SeekData(in *Inode, off uint64, hole bool) (uint64, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	size := in.d.Size
	if off >= size {
		return 0, ErrNoSuchOffset
	}
	if in.IsTable() || in.IsDir() {
		if hole {
			return size, nil
		}
		return off, nil
	}
	fb := off / bs
	exts := in.exts
	for _, e := range exts[sort.Search(len(exts), func(i int) bool { return exts[i].End() > fb }):] {
		if e.Unwritten {
			continue
		}
		if fb*bs >= size {
			break
		}
		if hole {
			if e.Logical > fb {
				break // fb is in a hole before e
			}
			fb = e.End() // data up to e's end; the next extent may continue it
			continue
		}
		if d := max(off, e.Logical*bs); d < size {
			return d, nil
		}
		break
	}
	if hole {
		return min(max(off, fb*bs), size), nil
	}
	return 0, ErrNoSuchOffset
}
