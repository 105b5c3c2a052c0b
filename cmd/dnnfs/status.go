package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/dnnfs/dnnfs/embedding"
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
	fmt.Fprintln(w, "\nFILE\tRUNNING\tWAITING\tLOCKS\tWAITS\tWAITED\tMAX-WRITES\tINTERRUPTED")
	for _, f := range st.Files {
		// The daemon names each file by a path from the mount's root; one
		// without (unlinked, kept by an open descriptor) by its inode.
		name := fmt.Sprintf("(deleted, ino %d)", f.Ino)
		if f.Path != "" {
			name = filepath.Join(mnt, f.Path)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\n", name, len(f.Run), len(f.Wait), f.Stats.Acquired,
			f.Stats.Waits, time.Duration(f.Stats.WaitNanos).Round(time.Microsecond), f.Stats.MaxWrites, f.Stats.Interrupted)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if e := st.Embedding; e != nil {
		printEmbedding(e)
	}
	if c := st.Cluster; c != nil {
		printCluster(c)
	}
	return nil
}

// printCluster prints a cluster node's membership and where its chunks
// came from.
func printCluster(c *cluster.Status) {
	fmt.Printf("\ncluster: node %s of %s (live: %s), %d file versions held, %d chunks cached for others\n",
		c.Node, c.FSID, strings.Join(c.Nodes, " "), len(c.Held), c.CachedChunks)
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SOURCE\tREQUESTS\tCHUNKS\tMiB")
	for _, s := range []struct {
		name string
		st   peer.SourceStats
	}{{"local", c.Fetch.Local}, {"peer", c.Fetch.Peer}, {"home", c.Fetch.Home}, {"s3", c.Fetch.S3}} {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\n", s.name, s.st.Requests, s.st.Hits, float64(s.st.Bytes)/(1<<20))
	}
	w.Flush()
	fmt.Printf("served %d chunks (%.1f MiB) to peers; S3: %d chunk GETs, %d PUTs, %d requests\n",
		c.Fetch.Served, float64(c.Fetch.ServedBytes)/(1<<20), c.S3.ChunkGets, c.S3.Puts, c.S3.Requests)
	fmt.Printf("evicted %d chunks (%.1f MiB) in %d passes to keep %.1f MiB free\n",
		c.Evicted.Chunks, float64(c.Evicted.Bytes)/(1<<20), c.Evicted.Passes, float64(c.Evicted.MinFree)/(1<<20))
}

// printEmbedding prints the SSD tier: size classes, devices, moves.
func printEmbedding(e *embedding.Status) {
	fmt.Printf("\nSSD tier: scheduler %s, max piece %d bytes, %d tables, %d shards, %d replicas, %d moves, %d replications\n",
		e.Sched, e.MaxPiece, e.Tables, e.Shards, e.Replicas, e.Moves, e.Replications)
	fmt.Printf("  backing bytes read per useful byte: %.2f\n", e.ReadAmplification)
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nCLASS\tQUEUED\tIN-FLIGHT\tREQUESTS\tFAILED\tQUEUE p50/p99/p99.9 us\tSERVICE p50/p99/p99.9 us")
	for _, c := range e.Classes {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%.0f/%.0f/%.0f\t%.0f/%.0f/%.0f\n", c.Name, c.QueuedPieces, c.InFlight, c.Requests, c.Failed,
			c.Queue.P50, c.Queue.P99, c.Queue.P999, c.Service.P50, c.Service.P99, c.Service.P999)
	}
	fmt.Fprintln(w, "\nDEVICE\tDIR\tMODEL\tLOADERS\tQUEUED s/m/l\tREAD MiB\tWRITE MiB\tERRORS\tPIECE p50/p99 us\tUSED/CAP GiB\tSHARDS\tMOVES-IN")
	for _, d := range e.Devices {
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d/%d/%d\t%.1f\t%.1f\t%d\t%.0f/%.0f\t%.2f/%.2f\t%d\t%d\n", d.ID, d.Dir, d.Model, d.Channels,
			d.Queued[0], d.Queued[1], d.Queued[2], float64(d.ReadBytes)/(1<<20), float64(d.WriteBytes)/(1<<20), d.Errors,
			d.Latency.P50, d.Latency.P99, float64(d.Space.Used)/(1<<30), float64(d.Space.Capacity)/(1<<30), d.Shards, d.Moves)
	}
	if len(e.Compute.Elements) == 0 {
		fmt.Fprintf(w, "\ncompute: on the loaders (no compute elements), %d requests, %.2f s\n", e.Compute.OnLoader, e.Compute.OnLoaderSeconds)
	} else {
		fmt.Fprintf(w, "\ncompute: %d elements, wait p50/p99 %.0f/%.0f us, %d requests on the loaders (%.2f s)\n",
			len(e.Compute.Elements), e.Compute.Wait.P50, e.Compute.Wait.P99, e.Compute.OnLoader, e.Compute.OnLoaderSeconds)
		fmt.Fprintln(w, "ELEMENT\tKIND\tOPS\tRANK\tQUEUED\tOUTSTANDING\tBUSY s\tCOMPLETIONS\tTAKEN")
		for _, c := range e.Compute.Elements {
			fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%d\t%.2f\t%d\t%d\n", c.Index, c.Kind, c.Ops, c.Rank, c.Queued, c.Outstanding,
				c.BusySeconds, c.Completions, c.Taken)
		}
	}
	w.Flush()
}
