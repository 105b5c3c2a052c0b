package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

type profileOut struct {
	ID    string  `json:"id"`
	Title string  `json:"title"`
	Ratio float64 `json:"ratio_vs_tmpfs"`
	File  string  `json:"file"` // under the raw directory (bench-out/)
	Err   string  `json:"error,omitempty"`
}

// runProfiles re-runs the 3 configurations where dnnfs --lock=range is
// furthest behind tmpfs (lowest median ratio) on a dnnfs mounted with
// --cpuprofile, and writes `go tool pprof -top` of each to bench-out/.
func (b *Bench) runProfiles(ctx context.Context, systems []*System) error {
	var dn *System
	for _, s := range systems {
		if s.Name == "dnnfs-range" {
			dn = s
		}
	}
	if dn == nil {
		return fmt.Errorf("PROFILE needs dnnfs-range among the systems")
	}
	st := computeStats(b.meas)
	type cand struct {
		c Config
		r float64
	}
	var cands []cand
	for _, c := range configs {
		if r := st.ratio(c.ID, "dnnfs-range", "tmpfs"); r != nil {
			cands = append(cands, cand{c, r.Median})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].r < cands[j].r })
	if len(cands) > 3 {
		cands = cands[:3]
	}
	dir := b.raw
	os.MkdirAll(dir, 0o755)
	old, _ := filepath.Glob(filepath.Join(dir, "profile-*.txt"))
	for _, f := range old {
		os.Remove(f)
	}
	b.profiling = true
	defer func() { b.profiling = false; b.profileFor = nil }()
	for _, cd := range cands {
		c := cd.c
		prof := filepath.Join(b.w, "cpu-"+c.slug()+".pprof")
		b.profileFor = map[string]string{c.ID: prof}
		only := map[string]bool{c.ID: true}
		b.logf("profiling dnnfs --lock=range on %s (%.2f× tmpfs)", c.ID, cd.r)
		var err error
		switch c.Phase {
		case "fio":
			err = b.runMatrix(ctx, dn, -1, only)
		case "personality":
			err = b.runPersonalities(ctx, dn, -1, only)
		case "checkpoint":
			err = b.runCheckpoint(ctx, dn, -1, only)
		case "fresh":
			err = b.runFresh(ctx, dn, -1, only)
		case "append":
			err = b.runAppend(ctx, dn, -1, only)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		po := profileOut{ID: c.ID, Title: c.Title(), Ratio: cd.r, File: "profile-" + c.slug() + ".txt"}
		if err != nil {
			po.Err = err.Error()
		} else if st, serr := os.Stat(prof); serr != nil || st.Size() == 0 {
			po.Err = "no profile written (the daemon did not stop cleanly?)"
		} else {
			args := []string{"tool", "pprof", "-top", "-nodecount=40", b.dnnfs, prof}
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Dir = b.repo
			out, perr := cmd.CombinedOutput()
			if perr == nil {
				// The same sorted by cumulative time: where the daemon's
				// time goes by call path, not only in leaf functions.
				cargs := []string{"tool", "pprof", "-top", "-cum", "-nodecount=40", b.dnnfs, prof}
				ccmd := exec.CommandContext(ctx, "go", cargs...)
				ccmd.Dir = b.repo
				if cout, cerr := ccmd.CombinedOutput(); cerr == nil {
					out = append(append(out, "\n# go "+strings.Join(cargs, " ")+"\n\n"...), cout...)
				}
			}
			if perr != nil {
				po.Err = fmt.Sprintf("go tool pprof: %v: %s", perr, tail(string(out), 500))
			} else {
				head := fmt.Sprintf("# dnnfs --lock=range CPU profile: %s (%.2f× tmpfs in the run)\n# config id %s\n# go %s\n\n",
					c.Title(), cd.r, c.ID, strings.Join(args, " "))
				if werr := os.WriteFile(filepath.Join(dir, po.File), append([]byte(head), out...), 0o644); werr != nil {
					po.Err = werr.Error()
				}
			}
		}
		if po.Err != "" {
			b.fail("dnnfs-range", "profile of "+c.ID, "", fmt.Errorf("%s", po.Err))
			po.File = ""
		}
		b.profiles = append(b.profiles, po)
	}
	return nil
}
