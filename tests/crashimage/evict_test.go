package crashimage_test

import (
	"fmt"
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
	skipped := 0
	n, errs := c.Sweep(subsets, func(k, _ int, img []byte) error {
		i := inFlight(s, k)
		if i == len(s.steps) {
			return checkCrash(s, k, img, true)
		}
		if s.steps[i].setup {
			skipped++
			return nil
		}
		if err := checkCrash(s, k, img, true); err != nil {
			return fmt.Errorf("in step %d %q: %w", i, s.steps[i].name, err)
		}
		return nil
	})
	for i, err := range errs {
		if i == 5 {
			t.Errorf("... %d eviction images failed in all", len(errs))
			break
		}
		t.Error(err)
	}
	t.Logf("%d subsets per crash point: %d eviction images checked (%d more in setup steps, not examined)", subsets, n-skipped, skipped)
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

// tornSuperblock says whether a problem recovery.Check reports is a
// superblock copy damaged beside a good one. A superblock write spans
// several cache lines, so with lines evicted one by one a crash inside it
// may leave that copy torn; the copies are written one after the other
// for that reason, and the mount rewrites both from the good one
// (FORMAT.md "mount", steps 1 and 6). Fence-only images never show it.
func tornSuperblock(problem string) bool {
	return strings.HasPrefix(problem, "superblock ") && strings.HasSuffix(problem, " is good")
}
