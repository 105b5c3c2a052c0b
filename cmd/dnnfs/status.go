package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	dfs "github.com/dnnfs/dnnfs/fs"
)

func runStatus(args []string) error {
	fl := newFlags("status")
	asJSON := fl.Bool("json", false, "print the raw JSON")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return usageError{"want exactly one MOUNTPOINT argument"}
	}
	mnt := fl.Arg(0)
	buf := make([]byte, 1<<20)
	n, err := unix.Getxattr(mnt, dfs.XattrStatus, buf)
	if errors.Is(err, unix.ERANGE) {
		buf = make([]byte, 64<<20)
		n, err = unix.Getxattr(mnt, dfs.XattrStatus, buf)
	}
	if err != nil {
		return fmt.Errorf("%s: not a dnnfs mount point (reading %s: %v)", mnt, dfs.XattrStatus, err)
	}
	if *asJSON {
		os.Stdout.Write(buf[:n])
		fmt.Println()
		return nil
	}
	var st dfs.StatusJSON
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		return fmt.Errorf("%s: bad status: %v", mnt, err)
	}
	fmt.Printf("mount %s  lock mode %s\n", mnt, st.LockMode)
	keys := make([]string, 0, len(st.Counters))
	for k := range st.Counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %-16s %d\n", k, st.Counters[k])
	}
	sort.Slice(st.Files, func(i, j int) bool { return st.Files[i].Stats.WaitNanos > st.Files[j].Stats.WaitNanos })
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nINO\tRUNNING\tWAITING\tLOCKS\tWAITS\tWAITED\tMAX-WRITES\tINTERRUPTED")
	for _, f := range st.Files {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\n", f.Ino, len(f.Run), len(f.Wait), f.Stats.Acquired,
			f.Stats.Waits, time.Duration(f.Stats.WaitNanos).Round(time.Microsecond), f.Stats.MaxWrites, f.Stats.Interrupted)
	}
	return w.Flush()
}
