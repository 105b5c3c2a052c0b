package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/journal/seglog"
	"github.com/dnnfs/dnnfs/pmem"
)

// recoverSession is one open session in `dnnfs recover` output.
type recoverSession struct {
	Path string `json:"path"`
	Ino  uint64 `json:"ino"`
	seglog.Report
	Remaining uint64 `json:"remaining"` // bytes the job still has to do
}

// recoverReport is the --json output of `dnnfs recover`.
type recoverReport struct {
	Pool             string           `json:"pool"`
	ClosedByRecovery int              `json:"closed_by_recovery"` // sessions whose segments had all finished
	Finished         []string         `json:"finished"`
	Abandoned        []string         `json:"abandoned"`
	Sessions         []recoverSession `json:"sessions"` // still open, resumable

	listOnly bool // nothing was changed: ClosedByRecovery are closed by the next mount
}

// runRecover opens an unmounted pool (which runs the session recovery of
// DESIGN.md §Two-layer log, as a mount does), lists the segmented sessions
// left open with each segment's resume offset (seglog.Report), and
// finishes or abandons the ones named.
func runRecover(args []string) error {
	fl := newFlags("recover")
	poolPath := fl.String("pool", "", "pool file or DAX device (required; must not be mounted)")
	asJSON := fl.Bool("json", false, "print the sessions as JSON")
	finish := fl.StringArray("finish", nil, "declare every segment of FILE's session done and close it (FILE: path inside the pool, e.g. /ckpt/w.bin; repeatable)")
	abandon := fl.StringArray("abandon", nil, "drop FILE's session, keeping its data as it is (repeatable)")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fl.Arg(0))}
	}
	if *poolPath == "" {
		return usageError{"--pool is required"}
	}
	seen := map[string]string{}
	for _, l := range []struct {
		flag  string
		files []string
	}{{"--finish", *finish}, {"--abandon", *abandon}} {
		for _, f := range l.files {
			p := path.Clean("/" + f)
			if prev, ok := seen[p]; ok {
				return usageError{fmt.Sprintf("%s given twice (%s and %s)", p, prev, l.flag)}
			}
			seen[p] = l.flag
		}
	}

	// Listing only reads: the pool is opened read-only and the mount's
	// recovery runs in a private copy-on-write map, so the pool file is
	// never written (it may be read-only). --finish and --abandon first run
	// the same way, so that a typo or a failing change writes nothing, then
	// for real.
	listOnly := len(*finish)+len(*abandon) == 0
	// The bar's steps: each pass opens (and recovers), changes and closes
	// the pool.
	passes := int64(1)
	if !listOnly {
		passes = 2
	}
	bar := newBar("recover", 3*passes, false)
	var steps int64
	step := func(name string) {
		bar.set(name, steps, 0)
		steps++
	}
	report, notes, err := recoverPool(*poolPath, pmem.OpenPrivate, *finish, *abandon, step)
	if err == nil && !listOnly {
		report, notes, err = recoverPool(*poolPath, pmem.Open, *finish, *abandon, step)
	}
	bar.done(err == nil)
	if err != nil {
		return err
	}
	report.listOnly = listOnly
	if *asJSON {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		fmt.Println(string(b))
		return nil
	}
	printRecover(report, notes)
	return nil
}

// recoverPool opens the pool with open, runs the mount's recovery, applies
// finish and abandon (FILE paths inside the pool) and closes it, telling
// step as it starts each of those three.
func recoverPool(poolPath string, open func(string) (pmem.Medium, error), finish, abandon []string, step func(string)) (recoverReport, []string, error) {
	step("recovering")
	m, err := open(poolPath)
	if err != nil {
		if errors.Is(err, pmem.ErrInUse) {
			return recoverReport{}, nil, fmt.Errorf("%v; recover works on an unmounted pool (a mounted one resumes sessions through user.dnnfs.session)", err)
		}
		return recoverReport{}, nil, openPoolError(poolPath, err)
	}
	p, rep, err := core.Open(m, core.Options{})
	if err != nil {
		m.Close()
		return recoverReport{}, nil, poolError(poolPath, err)
	}
	step("sessions")
	report := recoverReport{Pool: poolPath, ClosedByRecovery: rep.SessionsClosed, Finished: []string{}, Abandoned: []string{}}
	var notes []string
	err = func() error {
		// Resolve every FILE before changing anything: a typo changes nothing.
		type action struct {
			name   string
			in     *core.Inode
			finish bool
		}
		var todo []action
		for _, l := range []struct {
			files  []string
			finish bool
		}{{finish, true}, {abandon, false}} {
			for _, f := range l.files {
				name := path.Clean("/" + f)
				in, err := resolve(p, name)
				if err != nil {
					return fmt.Errorf("%s: %s: %w", poolPath, name, err)
				}
				if _, ok := p.Session(in); !ok {
					return fmt.Errorf("%s: %s has no open session", poolPath, name)
				}
				todo = append(todo, action{name, in, l.finish})
			}
		}
		for _, a := range todo {
			info, _ := p.Session(a.in)
			if a.finish {
				var short []string
				for _, g := range info.Short() {
					short = append(short, fmt.Sprintf("%d (tail %d of [%d, %d))", g.Index, g.Tail, g.Start, g.End()))
				}
				if err := p.FinishSession(a.in); err != nil {
					return fmt.Errorf("%s: finishing the session of %s: %w", poolPath, a.name, err)
				}
				report.Finished = append(report.Finished, a.name)
				note := "finished the " + info.Mode + " session of " + a.name
				if len(short) > 0 && info.Mode == "write" {
					note += "; segments " + strings.Join(short, ", ") + " had not reached their ends: the bytes past their tails are whatever was written"
				}
				notes = append(notes, note)
			} else {
				if err := p.AbandonSession(a.in); err != nil {
					return fmt.Errorf("%s: abandoning the session of %s: %w", poolPath, a.name, err)
				}
				report.Abandoned = append(report.Abandoned, a.name)
				notes = append(notes, "abandoned the "+info.Mode+" session of "+a.name+" (the file keeps its size and data)")
			}
		}
		return nil
	}()
	if err == nil {
		report.Sessions = openSessions(p)
	}
	// Close cleanly whatever happened: the pool is marked clean again.
	step("closing")
	if cerr := p.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("%s: closing the pool: %w", poolPath, cerr)
	}
	if cerr := m.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("%s: closing the pool: %w", poolPath, cerr)
	}
	return report, notes, err
}

// resolve walks name ("/a/b") from the root.
func resolve(p *core.FS, name string) (*core.Inode, error) {
	in := p.Root()
	for _, el := range strings.Split(strings.Trim(name, "/"), "/") {
		if el == "" {
			continue
		}
		next, err := p.Lookup(in, el)
		if err != nil {
			return nil, err
		}
		in = next
	}
	if in.IsDir() {
		return nil, core.ErrIsDir
	}
	return in, nil
}

func openSessions(p *core.FS) []recoverSession {
	out := []recoverSession{}
	for _, in := range p.Inodes() {
		info, ok := p.Session(in)
		if !ok {
			continue
		}
		out = append(out, recoverSession{Path: p.PathOf(in), Ino: uint64(in.Ino), Report: info, Remaining: info.Remaining()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func printRecover(r recoverReport, notes []string) {
	for _, n := range notes {
		fmt.Println(n)
	}
	switch {
	case r.ClosedByRecovery > 0 && r.listOnly:
		fmt.Printf("%d session(s) had all their segments finished: the next mount closes them\n", r.ClosedByRecovery)
	case r.ClosedByRecovery > 0:
		fmt.Printf("recovery closed %d session(s) whose segments had all finished\n", r.ClosedByRecovery)
	}
	if len(r.Sessions) == 0 {
		fmt.Printf("%s: no open sessions\n", r.Pool)
		return
	}
	fmt.Printf("%s: %d open session(s); a job resumes each unfinished segment from TAIL\n", r.Pool, len(r.Sessions))
	for _, s := range r.Sessions {
		name := s.Path
		if name == "" {
			name = "(unlinked)"
		}
		fmt.Printf("\n%s  ino %d  mode %s  threads %d  size %d  remaining %d\n", name, s.Ino, s.Mode, s.Threads, s.Size, s.Remaining)
		w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  SEGMENT\tSTART\tLENGTH\tTAIL\tDONE\tPID")
		for _, g := range s.Segments {
			done := "no"
			if g.Done {
				done = "yes"
			}
			fmt.Fprintf(w, "  %d\t%d\t%d\t%d\t%s\t%d\n", g.Index, g.Start, g.Length, g.Tail, done, g.Pid)
		}
		w.Flush()
	}
}
