package crashimage_test

import (
	"strings"
	"testing"
)

// Crash images with early evictions (pmem.Recorder.Crashes, DESIGN
// §Persistence): between two fences, any cache line stored or flushed
// since the first may already be on media. Each crash point gets
// evictSubsets images, the fenced image with a seeded random subset of
// those lines laid over it, checked against the same states as the
// fence-only image (checkCrash): in-place data that was never promised may
// show early, but a committed transaction, a session's phase and a tail
// behind durable data may not.

const (
	evictSubsets = 2          // eviction images per crash point
	evictSeed    = 0x63726173 // fixed: the same images every run
)

// verifyEvictions checks subsets eviction images at every crash point
// from Open on, except in setup steps.
func verifyEvictions(t *testing.T, s *script, subsets int) {
	t.Helper()
	c := s.rec.Crashes(s.openFences, evictSeed)
	defer c.Close()
	points, images, dirty, fails := 0, 0, 0, 0
	for ok := true; ok; ok = c.Next() {
		k := c.Fence()
		i := inFlight(s, k)
		if i < len(s.steps) && s.steps[i].setup {
			continue
		}
		points++
		dirty += c.Dirty()
		for j := 0; j < subsets; j++ {
			lines := c.Evicted(j)
			if len(lines) == 0 {
				continue // the fence-only image, checked by verifyScript
			}
			images++
			img, release := c.EvictedImage(j)
			err := checkCrash(s, k, img, true)
			release()
			if err != nil {
				fails++
				if fails <= 5 {
					t.Errorf("crash before fence %d (in step %d %q) with %d of %d dirty lines evicted (subset %d): %v",
						k+1, i, stepName(s, i), len(lines), c.Dirty(), j, err)
				}
			}
		}
	}
	if fails > 5 {
		t.Errorf("... %d eviction images failed in all", fails)
	}
	t.Logf("%d crash points, %d subsets each: %d eviction images checked (%.0f dirty lines per crash point)",
		points, subsets, images, float64(dirty)/float64(max(points, 1)))
}

// inFlight is the step that issues fence k+1 (len(steps) after the last).
func inFlight(s *script, k int) int {
	for i, st := range s.steps {
		if st.fences > k {
			return i
		}
	}
	return len(s.steps)
}

func stepName(s *script, i int) string {
	if i < len(s.steps) {
		return s.steps[i].name
	}
	return "after the last step"
}

// TestEvictions sweeps mainScript (every kind of metadata change through
// the journal, delayed commits, orphans) over eviction images. Its
// thousands of dirty data lines per crash point make each image costly;
// under the race detector, which finds nothing in a sweep that runs one
// operation at a time, it is left to TestFencesWithRecoveryCheck, which
// runs it without the detector (and with recovery.Check) in the same
// `go test -race ./...`.
func TestEvictions(t *testing.T) {
	if raceEnabled {
		t.Skip("run without the race detector by TestFencesWithRecoveryCheck")
	}
	s := newScript(t, poolSize)
	mainScript(s)
	s.close()
	verifyEvictions(t, s, evictSubsets)
}

// TestEvictionsSessions sweeps sessionScript (segmented sessions with
// tree changes around them) over eviction images: the tail moves, the
// journal commits of StartSession, finish and abandon, and the recovery
// that settles a session.
func TestEvictionsSessions(t *testing.T) {
	s := newScript(t, poolSize)
	x := newExt(s)
	sessionScript(x)
	x.close()
	verifyEvictions(t, s, evictSubsets)
	t.Cleanup(func() { x.logChecks(t) })
}

// withoutTornSuperblock drops the problems of a superblock copy that is
// damaged while the other is good. A superblock write spans several cache
// lines, so a crash inside one may leave that copy torn when lines are
// evicted one by one; the copies are written one after the other for that
// reason, and the mount rewrites both from the good one (FORMAT.md
// "mount", steps 1 and 6). The fence-only images never show it.
func withoutTornSuperblock(probs []string) []string {
	var out []string
	for _, p := range probs {
		if strings.HasPrefix(p, "superblock ") && (strings.HasSuffix(p, "; replica is good") || strings.HasSuffix(p, "; primary is good")) {
			continue
		}
		out = append(out, p)
	}
	return out
}
