package sessioncrash_test

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dnnfs/dnnfs/core"
)

// evictSubsets is how many eviction images (pmem.Recorder.Crashes, with a
// fixed seed) each crash point gets.
const evictSubsets = 2

// verifyEvictions checks the crash points after the base content was
// durable with cache lines that reached media before their fence (DESIGN
// §Persistence: a Tail_ptr stored before its persist, a part of a journal
// transaction): the states allowed are those of the fence-only image, so
// the session's phase is the step's and no tail is behind a persisted one
// or ahead of durable data. The first image of a crash point is also
// resumed to the end where deepCheck says so.
func (s *script) verifyEvictions() {
	c := s.rec.Crashes(s.steps[0].fences, 0x73657373)
	defer c.Close()
	resumed := 0
	n, errs := c.Sweep(evictSubsets, func(k, j int, img []byte) error {
		deep := j == 0 && s.deepCheck(k)
		if deep {
			resumed++
		}
		return s.checkEvicted(img, s.candidates(k), deep)
	})
	for _, err := range errs {
		s.errf("%v", err)
	}
	s.t.Logf("%d subsets per crash point: %d eviction images checked, %d of them resumed to the end", evictSubsets, n, resumed)
}

// checkEvicted opens one eviction image, matches it with the candidate
// states and, with deep, resumes it to the end.
func (s *script) checkEvicted(img []byte, cands []cand, deep bool) error {
	if recoveryCheck != nil {
		probs, err := recoveryCheck(sliceMedium(img))
		if err != nil {
			return fmt.Errorf("recovery.Check: %v", err)
		}
		if probs = slices.DeleteFunc(probs, tornSuperblock); len(probs) > 0 {
			return fmt.Errorf("recovery.Check found problems in the raw image:\n    %s", strings.Join(probs, "\n    "))
		}
	}
	p, rep, err := core.Open(sliceMedium(img), core.Options{TailInterval: fenceInterval})
	if err != nil {
		return fmt.Errorf("Open: %v", err)
	}
	o, st, _, err := s.classify(p, rep, cands)
	if err != nil || !deep {
		return err
	}
	if err := s.resume(p, o, st); err != nil {
		return fmt.Errorf("resuming on the recovered pool: %v", err)
	}
	return nil
}

// tornSuperblock: a superblock copy torn by a crash inside its write
// (lines evicted one by one), the other copy good, is what the two copies
// are for: the mount rewrites both (FORMAT.md "mount"), so an eviction
// image may show it (tests/crashimage/evict_test.go says more).
func tornSuperblock(problem string) bool {
	return strings.HasPrefix(problem, "superblock ") && strings.HasSuffix(problem, " is good")
}
