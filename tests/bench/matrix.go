package main

import (
	"context"
	"fmt"
	"time"
)

var (
	writeOps = []string{"write", "randwrite"}
	readOps  = []string{"read", "randread"}
)

// runMatrix is the fio matrix on one system: the group's files are written
// first (not measured), then overwritten by the write configurations, then
// read cold and warm. only, when set, restricts it to those configuration
// ids (profiling).
func (b *Bench) runMatrix(ctx context.Context, s *System, run int, only map[string]bool) error {
	groups, files := b.matrixGroups(only)
	if len(groups) == 0 {
		return nil
	}
	var data int64
	for _, f := range files {
		data += f.Size
	}
	if err := s.Start(ctx, data); err != nil {
		return err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			b.fail(s.Name, "unmount after the fio matrix", s.mountCmd, err)
		}
	}()
	if err := writeFiles(ctx, s.dir, files); err != nil {
		return fmt.Errorf("preparing the matrix files: %w", err)
	}
	if err := b.matrixWrites(ctx, s, run, groups, only); err != nil {
		return err
	}
	for _, g := range groups {
		for _, rw := range readOps {
			if err := b.matrixReads(ctx, s, run, g, rw, only); err != nil {
				return err
			}
		}
	}
	return nil
}

// wanted says whether configuration c is in only (nil: every one is).
func wanted(only map[string]bool, c Config) bool { return only == nil || only[c.ID] }

// matrixGroups returns the groups (jobs and layout) with a configuration
// in only, and their files, each once.
func (b *Bench) matrixGroups(only map[string]bool) ([]group, []fileSpec) {
	p := b.p
	var groups []group
	var files []fileSpec
	seen := map[string]bool{}
	for _, g := range p.Groups {
		used := false
		for _, bs := range p.Blocks {
			for _, rw := range writeOps {
				used = used || wanted(only, fioConfig(g, bs, rw, ""))
			}
			for _, rw := range readOps {
				used = used || wanted(only, fioConfig(g, bs, rw, "cold")) || wanted(only, fioConfig(g, bs, rw, "warm"))
			}
		}
		if !used {
			continue
		}
		groups = append(groups, g)
		for _, f := range p.matrixFiles(g) {
			if !seen[f.Name] {
				seen[f.Name] = true
				files = append(files, f)
			}
		}
	}
	return groups, files
}

// matrixWrites runs the write configurations, one fio process per group
// and operation with a section per block size.
func (b *Bench) matrixWrites(ctx context.Context, s *System, run int, groups []group, only map[string]bool) error {
	for _, g := range groups {
		for _, rw := range writeOps {
			var batch []Config
			for _, bs := range b.p.Blocks {
				if c := fioConfig(g, bs, rw, ""); wanted(only, c) {
					batch = append(batch, c)
				}
			}
			if len(batch) == 0 {
				continue
			}
			if err := b.profiled(ctx, s, batch[0], func() error {
				_, err := b.measureFio(ctx, s, run, batch, true)
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// matrixReads runs group g's read configurations of operation rw: each
// block size cold, after its own remount, then the warm ones together.
func (b *Bench) matrixReads(ctx context.Context, s *System, run int, g group, rw string, only map[string]bool) error {
	p := b.p
	var warm []Config
	complete := false // the last cold read read every byte
	for _, bs := range p.Blocks {
		cold := fioConfig(g, bs, rw, "cold")
		if w := fioConfig(g, bs, rw, "warm"); wanted(only, w) {
			warm = append(warm, w)
		}
		if !wanted(only, cold) {
			continue
		}
		coldRead := func() error {
			res, err := b.measureFio(ctx, s, run, []Config{cold}, false)
			complete = err == nil && len(res) == 1 && res[0].ReadBytes >= p.MatrixBytes
			return err
		}
		if b.profileFor[cold.ID] != "" {
			if err := b.profiled(ctx, s, cold, coldRead); err != nil {
				return err
			}
			complete = false // the profiling remount emptied the caches
		} else {
			if err := s.Remount(ctx, ""); err != nil {
				return fmt.Errorf("remount before %s: %w", cold.ID, err)
			}
			if err := coldRead(); err != nil {
				return err
			}
		}
	}
	if len(warm) == 0 {
		return nil
	}
	return b.profiled(ctx, s, warm[0], func() error {
		// The last cold read may have stopped at its time cap, and a
		// profiling remount empties the caches: read everything once
		// so the measured reads are warm throughout.
		if !complete || b.profileFor[warm[0].ID] != "" {
			if err := readFiles(ctx, s.dir, p.matrixFiles(g)); err != nil {
				return fmt.Errorf("warm-up read for %s: %w", warm[0].ID, err)
			}
		}
		_, err := b.measureFio(ctx, s, run, warm, true)
		return err
	})
}

// measureFio runs fio matrix configurations that differ only in the block
// size, one fio process with a section per block size (separated by
// stonewall, so they run one after another), and records each. The error
// returned is only for the system being unusable (ctx); a failed fio run is
// recorded as a failure of its configurations.
func (b *Bench) measureFio(ctx context.Context, s *System, run int, cs []Config, timed bool) ([]fioResult, error) {
	p := b.p
	c0 := cs[0]
	seg := p.MatrixBytes / int64(c0.Jobs)
	args := []string{
		"--directory=" + s.dir,
		"--ioengine=psync", "--thread", fmt.Sprintf("--numjobs=%d", c0.Jobs),
		"--rw=" + c0.RW, "--invalidate=0", "--fallocate=none", "--group_reporting",
		fmt.Sprintf("--size=%d", seg),
	}
	if c0.Layout == "shared" {
		args = append(args, "--filename=shared", fmt.Sprintf("--offset_increment=%d", seg))
	} else {
		args = append(args, fmt.Sprintf("--filename_format=pj%d.$jobnum", c0.Jobs))
	}
	if timed {
		rt := p.fioTime
		if b.profileFor[c0.ID] != "" {
			rt *= 10 // a profile wants samples
		}
		args = append(args, "--time_based", "--runtime="+fioDur(rt))
	} else {
		args = append(args, "--runtime="+fioDur(p.coldCap))
	}
	for i, c := range cs {
		args = append(args, fmt.Sprintf("--name=%s-bs%d", c.RW, c.BS), fmt.Sprintf("--bs=%d", c.BS))
		if i > 0 {
			args = append(args, "--stonewall")
		}
	}
	start := time.Now()
	cpu0 := s.cpu()
	res, cmd, err := b.fio(ctx, nil, args)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	cpu := -1.0
	if c1 := s.cpu(); cpu0 >= 0 && c1 >= 0 {
		cpu = c1 - cpu0
	}
	el := time.Since(start) / time.Duration(len(cs))
	if err == nil && len(res) != len(cs) {
		err = fmt.Errorf("fio reported %d groups, want %d", len(res), len(cs))
	}
	var total int64
	moved := make([]int64, len(cs))
	if err == nil {
		for i, c := range cs {
			moved[i] = res[i].ReadBytes
			if c.RW == "write" || c.RW == "randwrite" {
				moved[i] = res[i].WriteBytes
			}
			total += moved[i]
		}
	}
	for i, c := range cs {
		v, cerr := 0.0, err
		if cerr == nil {
			v = res[i].ReadBW
			if c.RW == "write" || c.RW == "randwrite" {
				v = res[i].WriteBW
			}
			if v <= 0 {
				cerr = fmt.Errorf("fio moved no data")
			}
		}
		// The daemon's CPU time of a batch is shared out by bytes moved.
		share := -1.0
		if cpu >= 0 && total > 0 {
			share = cpu * float64(moved[i]) / float64(total)
		}
		b.recordX(c, s, run, v/float64(MiB), cmd, el, moved[i], share, cerr)
	}
	return res, nil
}

func fioDur(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// profiled runs fn; when c is being profiled, inside a dnnfs mount started
// with --cpuprofile just before and unmounted (writing the profile) right
// after.
func (b *Bench) profiled(ctx context.Context, s *System, c Config, fn func() error) error {
	prof := b.profileFor[c.ID]
	if prof == "" || s.kind != "dnnfs" {
		return fn()
	}
	if err := s.Remount(ctx, prof); err != nil {
		return fmt.Errorf("remount with --cpuprofile for %s: %w", c.ID, err)
	}
	err := fn()
	if rerr := s.Remount(ctx, ""); rerr != nil && err == nil {
		err = fmt.Errorf("remount after profiling %s: %w", c.ID, rerr)
	}
	return err
}
