package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dnnfs/dnnfs/internal/units"
)

// version is set by the Makefile (-ldflags "-X main.version=...").
var version = "dev"

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError carries a specific exit code (fsck: 1 = problems found).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

var commands = map[string]struct {
	run  func(args []string) error
	help string
}{
	"mkfs":    {runMkfs, "create a pool: --pool PATH --size SIZE [--force]"},
	"mount":   {runMount, "mount a pool, returning once it is live (-f: stay in the foreground): --pool PATH MOUNTPOINT | [-o OPTS] POOL MOUNTPOINT"},
	"fsck":    {runFsck, "check a pool (exit 0 clean, 1 problems, 2 could not run): --pool PATH [--repair]"},
	"status":  {runStatus, "lock queues, waits and counters of a mounted pool: MOUNTPOINT [--json]"},
	"version": {runVersion, "print the version"},
	"cp":      {runCp, "copy a file onto a mount through a resumable segmented session: [--threads N] SRC DST"},
	"table":   {runTable, "make or describe an embedding table on a mount with --ssd: create PATH --rows R --dim D --dtype f32|f16|bf16 | info PATH"},
	"recover": {runRecover, "list (and --finish/--abandon) sessions left open in an unmounted pool: --pool PATH [--json]"},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: dnnfs COMMAND [flags]\n\ncommands:")
	for _, name := range []string{"mkfs", "mount", "fsck", "status", "cp", "recover", "table", "version"} {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", name, commands[name].help)
	}
	fmt.Fprintln(os.Stderr, "\nrun 'dnnfs COMMAND --help' for a command's flags")
}

func main() {
	os.Args = mountHelperArgs(os.Args) // as mount.fuse.dnnfs: mount(8)'s helper
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "dnnfs: unknown command %q (run dnnfs --help for the commands)\n", os.Args[1])
		os.Exit(2)
	}
	err := cmd.run(os.Args[2:])
	if err == nil {
		return
	}
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	var ue usageError
	var ee exitError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "dnnfs %s: %s\n", os.Args[1], msg)
		os.Exit(2)
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintf(os.Stderr, "dnnfs %s: %s\n", os.Args[1], msg)
		}
		os.Exit(ee.code)
	default:
		fmt.Fprintf(os.Stderr, "dnnfs %s: %s\n", os.Args[1], msg)
		os.Exit(1)
	}
}

// newFlags returns a flag set whose parse errors become usage errors.
func newFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	return fs
}

func parse(fs *pflag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

func runVersion(args []string) error {
	fmt.Println("dnnfs", version)
	return nil
}

// parseSize reads sizes like 8GiB, 512MiB, 1G, 4096.
func parseSize(s string) (int64, error) { return units.ParseSize(s) }
