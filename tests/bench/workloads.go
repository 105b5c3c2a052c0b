package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// fileSet returns the files of a personality: deterministic sizes, uniform
// in [MinSize, MaxSize] in 4 KiB steps, 250 files per directory.
func fileSet(ps personality) []fileSpec {
	steps := (ps.MaxSize-ps.MinSize)/(4*KiB) + 1
	x := uint64(len(ps.Name))*0x9E3779B97F4A7C15 + uint64(ps.Files)
	out := make([]fileSpec, ps.Files)
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		size := ps.MinSize + int64(x%uint64(steps))*4*KiB
		out[i] = fileSpec{fmt.Sprintf("d%02d/f%05d", i/250, i), size}
	}
	return out
}

// runPersonalities makes each personality's file set on s (not measured)
// and runs its fio job file with every thread count.
func (b *Bench) runPersonalities(ctx context.Context, s *System, run int, only map[string]bool) error {
	want := func(c Config) bool { return only == nil || only[c.ID] }
	var todo []personality
	var data int64
	for _, ps := range b.p.Personalities {
		for _, t := range b.p.Threads {
			if want(persConfig(ps.Name, t)) {
				todo = append(todo, ps)
				data += b.p.persData(ps)
				break
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if err := s.Start(ctx, data+data/4); err != nil {
		return err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			b.fail(s.Name, "unmount after the personalities", s.mountCmd, err)
		}
	}()
	for _, ps := range todo {
		dir := filepath.Join(s.dir, ps.Name)
		files := fileSet(ps)
		for d := 0; d*250 < len(files); d++ {
			if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("d%02d", d)), 0o755); err != nil {
				return fmt.Errorf("making the %s file set: %w", ps.Name, err)
			}
		}
		if err := writeFiles(ctx, dir, files); err != nil {
			return fmt.Errorf("making the %s file set: %w", ps.Name, err)
		}
		job := filepath.Join(b.repo, "tests", "bench", "fio", ps.Name+".fio")
		for _, t := range b.p.Threads {
			c := persConfig(ps.Name, t)
			if !want(c) {
				continue
			}
			rt := b.p.persTime
			if b.profileFor[c.ID] != "" {
				rt *= 3
			}
			env := []string{"SETDIR=" + dir, fmt.Sprintf("THREADS=%d", t), "RUNTIME=" + fioDur(rt)}
			err := b.profiled(ctx, s, c, func() error {
				start := time.Now()
				res, cmd, err := b.fio(ctx, env, []string{job})
				if ctx.Err() != nil {
					return ctx.Err()
				}
				v := 0.0
				for _, r := range res {
					v += r.ReadIOPS + r.WriteIOPS
				}
				if err == nil && v <= 0 {
					err = fmt.Errorf("fio did no I/O")
				}
				b.record(c, s, run, v, cmd, time.Since(start), err)
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// runCheckpoint saves a checkpoint (write ckpt.tmp, fsync it, rename it over
// ckpt, fsync the directory) and loads it back, cold (after a remount) and
// warm, with each thread count. An unmeasured first save makes every
// measured save replace an existing checkpoint, as a training job does.
func (b *Bench) runCheckpoint(ctx context.Context, s *System, run int, only map[string]bool) error {
	want := func(c Config) bool { return only == nil || only[c.ID] }
	size := b.p.CkptBytes
	if err := s.Start(ctx, 2*size); err != nil {
		return err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			b.fail(s.Name, "unmount after the checkpoint", s.mountCmd, err)
		}
	}()
	if _, err := saveCheckpoint(ctx, s.dir, size, 4); err != nil {
		return fmt.Errorf("first (unmeasured) checkpoint save: %w", err)
	}
	for _, t := range b.p.CkptThreads {
		save := ckptConfig("save", t)
		cold := ckptConfig("load-cold", t)
		warm := ckptConfig("load-warm", t)
		if want(save) {
			err := b.profiled(ctx, s, save, func() error {
				d, err := saveCheckpoint(ctx, s.dir, size, t)
				b.recordCkpt(save, s, run, size, d, err, fmt.Sprintf("save: write %s ckpt.tmp with %d thread(s) in 1 MiB writes, fsync, rename over ckpt, fsync dir", sizeName(size), t))
				return ctx.Err()
			})
			if err != nil {
				return err
			}
		}
		if !want(cold) && !want(warm) {
			continue
		}
		coldLoad := func() error {
			d, err := loadCheckpoint(ctx, s.dir, size, t)
			b.recordCkpt(cold, s, run, size, d, err, fmt.Sprintf("load after remount: read %s ckpt with %d thread(s) in 1 MiB reads", sizeName(size), t))
			return ctx.Err()
		}
		if b.profileFor[cold.ID] != "" {
			if err := b.profiled(ctx, s, cold, coldLoad); err != nil {
				return err
			}
		} else {
			if err := s.Remount(ctx, ""); err != nil {
				return fmt.Errorf("remount before loading: %w", err)
			}
			if err := coldLoad(); err != nil {
				return err
			}
		}
		if !want(warm) {
			continue
		}
		err := b.profiled(ctx, s, warm, func() error {
			if b.profileFor[warm.ID] != "" || b.profileFor[cold.ID] != "" {
				if _, err := loadCheckpoint(ctx, s.dir, size, t); err != nil {
					return fmt.Errorf("warm-up load: %w", err)
				}
			}
			d, err := loadCheckpoint(ctx, s.dir, size, t)
			b.recordCkpt(warm, s, run, size, d, err, fmt.Sprintf("load again: read %s ckpt with %d thread(s) in 1 MiB reads", sizeName(size), t))
			return ctx.Err()
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *Bench) recordCkpt(c Config, s *System, run int, size int64, d time.Duration, err error, what string) {
	v := 0.0
	if err == nil && d > 0 {
		v = float64(size) / float64(MiB) / d.Seconds()
	}
	b.record(c, s, run, v, "(tests/bench checkpoint.go) "+what, d, err)
}

// saveCheckpoint writes size bytes to dir/ckpt.tmp with threads writers
// (one writes sequentially; several first set the size, then each writes
// its contiguous segment), fsyncs it, renames it over dir/ckpt and fsyncs
// the directory. It returns the time the whole sequence took.
func saveCheckpoint(ctx context.Context, dir string, size int64, threads int) (time.Duration, error) {
	tmp, final := filepath.Join(dir, "ckpt.tmp"), filepath.Join(dir, "ckpt")
	start := time.Now()
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	if threads <= 1 {
		buf := make([]byte, MiB)
		fillRandom(buf, 7)
		for off := int64(0); off < size && err == nil; off += MiB {
			if ctx.Err() != nil {
				err = ctx.Err()
				break
			}
			_, err = f.Write(buf[:min(MiB, size-off)])
			if err != nil {
				err = fmt.Errorf("write at %d: %w", off, err)
			}
		}
	} else {
		if err = f.Truncate(size); err != nil {
			err = fmt.Errorf("ftruncate to %d: %w", size, err)
		} else {
			err = parallel(threads, size, func(t int, from, to int64) error {
				buf := make([]byte, MiB)
				fillRandom(buf, uint64(t)+7)
				for off := from; off < to; off += MiB {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if _, err := f.WriteAt(buf[:min(MiB, to-off)], off); err != nil {
						return fmt.Errorf("pwrite at %d: %w", off, err)
					}
				}
				return nil
			})
		}
	}
	if err == nil {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("fsync ckpt.tmp: %w", err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close ckpt.tmp: %w", cerr)
	}
	if err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return 0, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return 0, fmt.Errorf("fsync directory: %w", err)
	}
	return time.Since(start), nil
}

// loadCheckpoint reads dir/ckpt in full with threads readers (one reads
// sequentially; several each pread their contiguous segment).
func loadCheckpoint(ctx context.Context, dir string, size int64, threads int) (time.Duration, error) {
	start := time.Now()
	f, err := os.Open(filepath.Join(dir, "ckpt"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if threads <= 1 {
		buf := make([]byte, MiB)
		n, err := readAll(f, buf)
		if err != nil {
			return 0, err
		}
		if n != size {
			return 0, fmt.Errorf("read %d bytes of a %d-byte checkpoint", n, size)
		}
		return time.Since(start), nil
	}
	err = parallel(threads, size, func(_ int, from, to int64) error {
		buf := make([]byte, MiB)
		for off := from; off < to; off += MiB {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			want := min(MiB, to-off)
			n, err := f.ReadAt(buf[:want], off)
			if err != nil {
				return fmt.Errorf("pread at %d: %w", off, err)
			}
			if int64(n) != want {
				return fmt.Errorf("pread at %d: %d bytes, want %d", off, n, want)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// parallel splits [0, size) into n contiguous MiB-aligned segments and runs
// fn on each in its own goroutine.
func parallel(n int, size int64, fn func(t int, from, to int64) error) error {
	seg := (size/int64(n) + MiB - 1) / MiB * MiB
	var wg sync.WaitGroup
	errs := make([]error, n)
	for t := 0; t < n; t++ {
		from, to := int64(t)*seg, min(int64(t+1)*seg, size)
		if from >= to {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[t] = fn(t, from, to)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
