package crashimage_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// lossy is a Recorder that silently drops the flushes drop selects once
// armed: a stand-in for a missing flush in the code under test.
type lossy struct {
	pmem.Medium
	armed bool
	drop  func(off, n int64) bool
}

func (l *lossy) Flush(off, n int64) error {
	if l.armed && l.drop(off, n) {
		return nil
	}
	return l.Medium.Flush(off, n)
}

func (l *lossy) Persist(off, n int64) error {
	err := l.Flush(off, n)
	if ferr := l.Medium.Fence(); err == nil {
		err = ferr
	}
	return err
}

// Punch goes through l's own Persist, so its flushes may be dropped too.
func (l *lossy) Punch(off, n int64) error { return pmem.PunchByStores(l, off, n) }

// shortScript is a few operations touching data, directories and xattrs.
func shortScript(s *script) {
	s.mkdir("/a")
	s.create("/a/f", 0o644)
	s.write("/a/f", 0, 3*format.BlockSize+100, 1)
	s.setxattr("/a/f", "user.k", []byte("value"), 0, nil)
	s.create("/g", 0o644)
	s.write("/g", 0, 5000, 2)
	s.rename("/g", "/a/f", 0, nil)
	s.write("/a/f", 100, 10, 3)
	s.fsync("/a/f")
}

// TestSweepDetectsLostFlushes checks that the fence sweep notices the bugs
// it exists for: with flushes dropped, some crash image must fail.
func TestSweepDetectsLostFlushes(t *testing.T) {
	sb, err := format.Geometry(poolSize)
	if err != nil {
		t.Fatal(err)
	}
	jStart := int64(sb.JournalStart.Off())
	cases := []struct {
		name string
		drop func(off, n int64) bool
	}{
		{"data blocks", func(off, n int64) bool { return off >= int64(sb.DataStart.Off()) }},
		{"journal transaction area", func(off, n int64) bool {
			return off >= jStart+format.BlockSize && off < int64(sb.InodeStart.Off())
		}},
		{"inode table (journal apply)", func(off, n int64) bool {
			return off >= int64(sb.InodeStart.Off()) && off < int64(sb.DataStart.Off())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l *lossy
			s := newScriptOn(t, poolSize, func(m pmem.Medium) pmem.Medium {
				l = &lossy{Medium: m, drop: tc.drop}
				return l
			})
			l.armed = true
			shortScript(s)
			failures := 0
			im := s.imagesFrom(s.openFences)
			for k := s.openFences; k <= s.rec.Fences(); k, _ = k+1, im.next() {
				if err := checkFence(s, k, im.image()); err != nil {
					failures++
					if failures == 1 {
						t.Logf("detected (fence %d): %v", k, err)
					}
				}
			}
			if failures == 0 {
				t.Errorf("with %s flushes dropped, no crash image of %d fences failed the checks", tc.name, s.rec.Fences()-s.openFences+1)
			}
		})
	}
}
