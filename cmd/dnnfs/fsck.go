package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// afterCrash reports whether p is a state an unclean shutdown leaves and
// the next mount resolves by itself (an unlinked-while-open file), rather
// than damage.
func afterCrash(p recovery.Problem) bool {
	return strings.Contains(p.What, "orphan")
}

func runFsck(args []string) error {
	fl := newFlags("fsck")
	poolPath := fl.String("pool", "", "pool file or DAX device (required)")
	repair := fl.Bool("repair", false, "fix what is safe (orphans, link counts, unreachable inodes, damaged entries, a bad superblock copy) and say what changed")
	if err := parse(fl, args); err != nil {
		return err // usage errors exit 2 too; --help exits 0
	}
	if *poolPath == "" {
		return exitError{2, "--pool is required"}
	}
	var (
		m   pmem.Medium
		err error
	)
	if *repair {
		m, err = pmem.Open(*poolPath)
	} else {
		m, err = pmem.OpenReadOnly(*poolPath)
	}
	if err != nil {
		return exitError{2, openPoolError(*poolPath, err).Error()}
	}
	defer m.Close()
	check := recovery.CheckProgress
	if *repair {
		check = recovery.RepairProgress
	}
	bar := newBar("fsck", 1, false)
	rep, err := check(m, func(step string, done, total int) { bar.set(step, int64(done), int64(total)) })
	bar.done(err == nil)
	if err != nil {
		if errors.Is(err, recovery.ErrNotPool) {
			err = poolError(*poolPath, core.ErrNotPool)
		}
		return exitError{2, err.Error()}
	}
	for _, line := range rep.Repaired {
		fmt.Println("repaired:", line)
	}
	var damage int
	for _, p := range rep.Problems {
		if afterCrash(p) {
			fmt.Println("note:", p.String(), "(left by an unclean shutdown; the next mount frees it)")
			continue
		}
		damage++
		fix := ""
		if !p.Repairable {
			fix = " [not repairable]"
		} else if !*repair {
			fix = " [--repair fixes it]"
		}
		fmt.Println("problem:", p.String()+fix)
	}
	if rep.JournalPending {
		fmt.Println("note: a committed journal transaction awaits replay (the next mount applies it)")
	}
	if rep.ReplicaUsed {
		fmt.Println("note: the primary superblock is bad; the replica is good")
	}
	fmt.Printf("%s: %d inodes (%d files, %d directories, %d symlinks), %d blocks used, %d free: ",
		*poolPath, rep.Inodes, rep.Files, rep.Dirs, rep.Symlinks, rep.UsedBlocks, rep.FreeBlocks)
	if damage == 0 {
		fmt.Println("clean")
		return nil
	}
	fmt.Printf("%d problems\n", damage)
	return exitError{1, ""}
}
