package sessioncrash_test

import (
	"strings"

	"github.com/dnnfs/dnnfs/core"
)

// Crash images with early evictions (pmem.Recorder.Crashes, DESIGN
// §Persistence): between two fences any cache line stored or flushed
// since the first may already be on media (a Tail_ptr before its fence, a
// part of a journal transaction). Each crash point gets evictSubsets
// images, checked against the states the fence-only image may show: the
// session's phase is the step's, no tail is behind a persisted one or
// ahead of durable data.

const (
	evictSubsets = 2          // eviction images per crash point
	evictSeed    = 0x73657373 // fixed: the same images every run
)

// verifyEvictions checks the eviction images of every crash point after
// the base content was durable. The images are copy-on-write mappings,
// so the race detector does not shadow them.
func (s *script) verifyEvictions() {
	t := s.t
	c := s.rec.Crashes(s.steps[0].fences, evictSeed)
	defer c.Close()
	points, images, resumed := 0, 0, 0
	for ok := true; ok; ok = c.Next() {
		k := c.Fence()
		cands := s.candidates(k)
		points++
		for j := 0; j < evictSubsets; j++ {
			lines := c.Evicted(j)
			if len(lines) == 0 {
				continue // the fence-only image, checked by verify
			}
			images++
			img, release := c.EvictedImage(j)
			fail := func(format string, a ...any) {
				s.errf("crash before fence %d with %d of %d dirty lines evicted (subset %d): "+format,
					append([]any{k + 1, len(lines), c.Dirty(), j}, a...)...)
			}
			if s.checkEvicted(img, cands, j == 0 && s.deepCheck(k), fail) {
				resumed++
			}
			release()
		}
	}
	t.Logf("%d crash points, %d subsets each: %d eviction images checked, %d of them resumed to the end",
		points, evictSubsets, images, resumed)
}

// checkEvicted opens one eviction image, matches it with the candidate
// states and, with deep, resumes it to the end. It reports whether it
// resumed.
func (s *script) checkEvicted(img []byte, cands []cand, deep bool, fail func(string, ...any)) bool {
	if recoveryCheck != nil {
		probs, err := recoveryCheck(sliceMedium(img))
		if err != nil {
			fail("recovery.Check: %v", err)
		} else if probs = withoutTornSuperblock(probs); len(probs) > 0 {
			fail("recovery.Check found problems in the raw image:\n    %s", strings.Join(probs, "\n    "))
		}
	}
	p, rep, err := core.Open(sliceMedium(img), core.Options{TailInterval: fenceInterval})
	if err != nil {
		fail("Open: %v", err)
		return false
	}
	o, st, _, err := s.classify(p, rep, cands)
	if err != nil {
		fail("%v", err)
		return false
	}
	if !deep {
		return false
	}
	if err := s.resume(p, o, st); err != nil {
		fail("resuming on the recovered pool: %v", err)
	}
	return true
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
