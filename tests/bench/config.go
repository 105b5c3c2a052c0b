package main

import (
	"fmt"
	"strings"
	"time"
)

// Config identifies one measured configuration (the same for every system
// and run).
type Config struct {
	ID      string `json:"id"`
	Phase   string `json:"phase"` // fio, personality, checkpoint
	Layout  string `json:"layout,omitempty"`
	Jobs    int    `json:"jobs,omitempty"`
	BS      int64  `json:"bs,omitempty"`
	RW      string `json:"rw,omitempty"`   // write, randwrite, read, randread
	Temp    string `json:"temp,omitempty"` // cold, warm (reads)
	Pers    string `json:"personality,omitempty"`
	Threads int    `json:"threads,omitempty"`
	Op      string `json:"op,omitempty"`    // checkpoint: save, load-cold, load-warm; append: append, overwrite
	Prep    string `json:"prep,omitempty"`  // fresh: truncate or fallocate (how the file got its size)
	Fsync   int    `json:"fsync,omitempty"` // fresh: fsync every this many 1 MiB writes (0: only at the end)
	Unit    string `json:"unit"`            // MiB/s, IOPS or writes/s
}

func fioConfig(g group, bs int64, rw, temp string) Config {
	id := fmt.Sprintf("fio/%s/j%d/%s/%s", g.Layout, g.Jobs, sizeName(bs), rw)
	if temp != "" {
		id += "/" + temp
	}
	return Config{ID: id, Phase: "fio", Layout: g.Layout, Jobs: g.Jobs, BS: bs, RW: rw, Temp: temp, Unit: "MiB/s"}
}

func persConfig(name string, threads int) Config {
	return Config{ID: fmt.Sprintf("personality/%s/t%d", name, threads), Phase: "personality", Pers: name, Threads: threads, Unit: "IOPS"}
}

func ckptConfig(op string, threads int) Config {
	return Config{ID: fmt.Sprintf("checkpoint/%s/t%d", op, threads), Phase: "checkpoint", Op: op, Threads: threads, Unit: "MiB/s"}
}

// Title is a short human name.
func (c Config) Title() string {
	switch c.Phase {
	case "fio":
		t := fmt.Sprintf("%s %s, %d job(s), %s", c.Layout, c.RW, c.Jobs, sizeName(c.BS))
		if c.Temp != "" {
			t += ", " + c.Temp
		}
		return t
	case "personality":
		return fmt.Sprintf("%s, %d thread(s)", c.Pers, c.Threads)
	case "checkpoint":
		return fmt.Sprintf("checkpoint %s, %d thread(s)", c.Op, c.Threads)
	case "fresh":
		sync := "fsync at the end"
		if c.Fsync > 0 {
			sync = fmt.Sprintf("fsync every %d MiB", c.Fsync)
		}
		return fmt.Sprintf("write into a %sd file, %d job(s), %s", c.Prep, c.Jobs, sync)
	case "append":
		return fmt.Sprintf("%s %s writes", sizeName(c.BS), c.Op)
	}
	return c.ID
}

func (c Config) slug() string { return strings.ReplaceAll(c.ID, "/", "-") }

// Measurement is one value of one configuration on one system in one run.
type Measurement struct {
	ID      string  `json:"id"`
	System  string  `json:"system"`
	Run     int     `json:"run"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Cmd     string  `json:"cmd"`
	Seconds float64 `json:"seconds"`
	// Bytes moved and the CPU time the system's daemon used meanwhile
	// (FUSE systems, fio matrix only; -1 when not known).
	Bytes     int64   `json:"bytes,omitempty"`
	DaemonCPU float64 `json:"daemon_cpu_seconds,omitempty"`
	Err       string  `json:"error,omitempty"`
}

// Failure is something that went wrong: an errored measurement, a daemon
// that did not unmount cleanly, a warning in a daemon's log.
type Failure struct {
	System string `json:"system"`
	What   string `json:"what"`
	Cmd    string `json:"cmd,omitempty"`
	Err    string `json:"error"`
}

func (b *Bench) record(c Config, s *System, run int, v float64, cmd string, d time.Duration, err error) {
	b.recordX(c, s, run, v, cmd, d, 0, 0, err)
}

func (b *Bench) recordX(c Config, s *System, run int, v float64, cmd string, d time.Duration, bytes int64, cpu float64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.profiling {
		// Re-runs under the profiler are not results.
		if err != nil {
			b.failures = append(b.failures, Failure{System: s.Name, What: c.Title() + " (profiling re-run)", Cmd: cmd, Err: err.Error()})
		}
		return
	}
	m := Measurement{ID: c.ID, System: s.Name, Run: run, Value: v, Unit: c.Unit, Cmd: cmd, Seconds: d.Seconds(), Bytes: bytes, DaemonCPU: cpu}
	if err != nil {
		m.Err = err.Error()
		m.Value = 0
		b.failures = append(b.failures, Failure{System: s.Name, What: c.Title(), Cmd: cmd, Err: err.Error()})
		b.logf("  FAILED %s on %s: %v", c.ID, s.Name, oneLine(err.Error(), 300))
	}
	b.meas = append(b.meas, m)
	registerConfig(c)
}

func (b *Bench) fail(system, what, cmd string, err error) {
	b.mu.Lock()
	b.failures = append(b.failures, Failure{System: system, What: what, Cmd: cmd, Err: err.Error()})
	b.mu.Unlock()
	b.logf("  FAILED %s on %s: %v", what, system, oneLine(err.Error(), 300))
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// configs remembers every configuration measured, in first-seen order.
var (
	configs   []Config
	configIdx = map[string]int{}
)

func registerConfig(c Config) {
	if _, ok := configIdx[c.ID]; !ok {
		configIdx[c.ID] = len(configs)
		configs = append(configs, c)
	}
}

func sizeName(n int64) string {
	switch {
	case n >= GiB && n%GiB == 0:
		return fmt.Sprintf("%dGiB", n/GiB)
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%dMiB", n/MiB)
	case n >= KiB && n%KiB == 0:
		return fmt.Sprintf("%dKiB", n/KiB)
	}
	return fmt.Sprintf("%dB", n)
}
