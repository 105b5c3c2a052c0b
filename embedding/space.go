package embedding

import (
	"fmt"
	"sort"
	"sync"

	"github.com/dnnfs/dnnfs/format"
)

// extent is a byte range of a backing file.
type extent struct {
	off, n  int64
	punched bool // its blocks were given back to the file system (hole)
}

func (e extent) end() int64 { return e.off + e.n }

// spaceMap is a device's shard space (DESIGN.md §Placement): used ranges are what
// the translation tables name; free ranges below the high-water mark are
// "logically released" (kept allocated in the file for fast reuse) until
// more than retain bytes of them pile up, then the largest are punched
// out ("physically released"). Reservations take the best-fitting free
// range first and grow the file only when none fits. Nothing here is
// persistent: it is rebuilt at mount from the translation tables.
type spaceMap struct {
	mu       sync.Mutex
	capacity int64    // bytes of shard space the device may use
	end      int64    // high-water mark: bytes at or past end were never used
	free     []extent // sorted by off, coalesced, all below end
	used     int64
	retain   int64 // logically released bytes kept before punching
	punch    func(off, n int64) error
	shrink   func(size int64) error
}

func newSpaceMap(capacity, retain int64) *spaceMap {
	return &spaceMap{capacity: capacity, end: format.DevDataStart, retain: retain}
}

// load rebuilds the map from every used range (from the translation
// tables); it fails if two ranges overlap.
func (s *spaceMap) load(used []extent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sort.Slice(used, func(i, j int) bool { return used[i].off < used[j].off })
	s.free = s.free[:0]
	pos := int64(format.DevDataStart)
	s.used = 0
	for _, u := range used {
		if u.off < pos {
			return fmt.Errorf("shard space [%d, %d) overlaps the range before it (ends at %d)", u.off, u.end(), pos)
		}
		if u.off > pos {
			s.free = append(s.free, extent{off: pos, n: u.off - pos, punched: true})
		}
		pos = u.end()
		s.used += u.n
	}
	s.end = pos
	return nil
}

// reserve finds n bytes (a multiple of the block size): the smallest free
// range that fits, split; else fresh space at the high-water mark.
func (s *spaceMap) reserve(n int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := -1
	for i, e := range s.free {
		if e.n >= n && (best < 0 || e.n < s.free[best].n) {
			best = i
		}
	}
	if best >= 0 {
		e := s.free[best]
		if e.n == n {
			s.free = append(s.free[:best], s.free[best+1:]...)
		} else {
			s.free[best] = extent{off: e.off + n, n: e.n - n, punched: e.punched}
		}
		s.used += n
		return e.off, true
	}
	if s.end-format.DevDataStart+n > s.capacity {
		return 0, false
	}
	off := s.end
	s.end += n
	s.used += n
	return off, true
}

// release returns a range. A range reaching the high-water mark lowers it
// (and the file shrinks); otherwise it is retained, and above the retain
// threshold the largest retained ranges are punched.
func (s *spaceMap) release(off, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used -= n
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].off >= off })
	s.free = append(s.free, extent{})
	copy(s.free[i+1:], s.free[i:])
	s.free[i] = extent{off: off, n: n}
	// Coalesce with the neighbours (a merged range is punched only if
	// both halves were).
	if i+1 < len(s.free) && s.free[i].end() == s.free[i+1].off {
		s.free[i].n += s.free[i+1].n
		s.free[i].punched = false
		s.free = append(s.free[:i+1], s.free[i+2:]...)
	}
	if i > 0 && s.free[i-1].end() == s.free[i].off {
		s.free[i-1].n += s.free[i].n
		s.free[i-1].punched = false
		s.free = append(s.free[:i], s.free[i+1:]...)
	}
	if last := len(s.free) - 1; last >= 0 && s.free[last].end() == s.end {
		s.end = s.free[last].off
		s.free = s.free[:last]
		if s.shrink != nil {
			_ = s.shrink(s.end)
		}
	}
	var retained int64
	for _, e := range s.free {
		if !e.punched {
			retained += e.n
		}
	}
	for retained > s.retain {
		big := -1
		for j, e := range s.free {
			if !e.punched && (big < 0 || e.n > s.free[big].n) {
				big = j
			}
		}
		if big < 0 {
			break
		}
		if s.punch != nil {
			_ = s.punch(s.free[big].off, s.free[big].n)
		}
		s.free[big].punched = true
		retained -= s.free[big].n
	}
}

// SpaceStats describe a device's shard space.
type SpaceStats struct {
	Capacity  int64 `json:"capacity"`
	Used      int64 `json:"used"`
	Free      int64 `json:"free"`
	Retained  int64 `json:"retained"` // released, still allocated in the file (reused first)
	HighWater int64 `json:"high_water"`
}

func (s *spaceMap) stats() SpaceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SpaceStats{Capacity: s.capacity, Used: s.used, HighWater: s.end}
	st.Free = s.capacity - s.used
	for _, e := range s.free {
		if !e.punched {
			st.Retained += e.n
		}
	}
	return st
}

func (s *spaceMap) freeBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capacity - s.used
}
