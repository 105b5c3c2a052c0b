package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/cluster"
	dfs "github.com/dnnfs/dnnfs/fs"
)

// warmChunk is one chunk warm-up asks the daemon for.
type warmChunk struct {
	path string
	idx  int64
	size int64
}

// runWarmup has the cluster pull the chunks of files into their home
// nodes' pools ahead of a job: each chunk through the daemon's
// XattrWarmup on its file, several at once (DESIGN §Attach and warm-up).
func runWarmup(args []string) error {
	fl := newFlags("warmup")
	limit := fl.String("bytes", "", "warm about this much (whole chunks, a size like 64GiB), files in the order given; default: all")
	parallel := fl.Int("parallel", 4, "chunks asked for at once")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() == 0 {
		return usageError{"want one or more PATHs on a cluster mount"}
	}
	if *parallel < 1 || *parallel > 256 {
		return usageError{fmt.Sprintf("--parallel %d: want 1 to 256", *parallel)}
	}
	max := int64(-1)
	if *limit != "" {
		n, err := parseSize(*limit)
		if err != nil {
			return usageError{"--bytes: " + err.Error()}
		}
		max = n
	}
	var chunks []warmChunk
	var total int64
	files := 0
	for _, root := range fl.Args() {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := warmInfo(p)
			if err != nil {
				return err
			}
			files++
			for i := int64(0); i < info.Chunks && (max < 0 || total < max); i++ {
				size := min(info.ChunkSize, info.Size-i*info.ChunkSize)
				chunks = append(chunks, warmChunk{p, i, size})
				total += size
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	bar := newBar("warmup", total, true)
	work := make(chan warmChunk)
	var mu sync.Mutex
	var firstErr error
	failed := 0
	var wg sync.WaitGroup
	for w := 0; w < *parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				err := unix.Setxattr(c.path, dfs.XattrWarmup, []byte("chunk="+strconv.FormatInt(c.idx, 10)), 0)
				if err != nil {
					mu.Lock()
					failed++
					if firstErr == nil {
						firstErr = fmt.Errorf("%s chunk %d: %w", c.path, c.idx, err)
					}
					mu.Unlock()
					continue
				}
				bar.add(c.size)
			}
		}()
	}
	for _, c := range chunks {
		work <- c
	}
	close(work)
	wg.Wait()
	bar.done(firstErr == nil)
	if firstErr != nil {
		return fmt.Errorf("warm-up: %d of %d chunks failed, the first: %w", failed, len(chunks), firstErr)
	}
	fmt.Printf("warmed %d chunks (%d bytes) of %d files\n", len(chunks), total, files)
	return nil
}

// warmInfo reads a file's XattrWarmup.
func warmInfo(path string) (cluster.WarmInfo, error) {
	var info cluster.WarmInfo
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, dfs.XattrWarmup, buf)
	if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
		return info, fmt.Errorf("%s: not a committed file of a dnnfs cluster mount", path)
	}
	if err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(buf[:n], &info); err != nil {
		return info, fmt.Errorf("%s: bad warm-up info: %v", path, err)
	}
	return info, nil
}
