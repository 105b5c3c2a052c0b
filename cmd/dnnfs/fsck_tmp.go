package main

import (
	"fmt"

	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/pool"
)

// Interim fsck: a full load of the pool on a private map.
func runFsck(args []string) error {
	fl := newFlags("fsck")
	poolPath := fl.String("pool", "", "pool")
	fl.Bool("repair", false, "repair")
	if err := parse(fl, args); err != nil {
		return err
	}
	m, err := pmem.OpenReadOnly(*poolPath)
	if err != nil {
		return exitError{2, err.Error()}
	}
	defer m.Close()
	if _, _, err := pool.Open(m, pool.Options{}); err != nil {
		return exitError{1, err.Error()}
	}
	fmt.Println("clean")
	return nil
}
