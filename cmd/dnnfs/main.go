package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dnnfs/dnnfs/internal/units"
)

// version is set by the Makefile (-ldflags "-X main.version=...").
var version = "dev"

// command is one subcommand: its run function parses its own flags (newFlags
// and parse, as every run function did before cobra), and cobra gets the same
// flags for help and completion (see flagsOf).
type command struct {
	use, short, long string
	run              func(args []string) error
	// argsDirs: the positional arguments are directories (completion).
	argsDirs bool
	// noArgs: the positional arguments complete to nothing.
	noArgs bool
}

var commands = []command{
	{use: "mkfs --pool PATH --size SIZE [--force]", short: "create a pool",
		long: "Create a pool: a file of --size bytes (made or resized), or a whole DAX device (/dev/daxX.Y: no --size).\n" +
			"An existing dnnfs pool is only overwritten with --force.",
		run: runMkfs, noArgs: true},
	{use: "mount [-f] --pool PATH MOUNTPOINT | mount [-o OPTS] POOL MOUNTPOINT", short: "mount a pool on MOUNTPOINT, returning once it is live (-f: stay in the foreground)",
		long: "Mount a pool on MOUNTPOINT, an existing directory with nothing mounted on it, and return once the\n" +
			"mount is live, leaving a daemon (exit 0), or exit non-zero with the reason; -f stays in the foreground.\n" +
			"Every flag is also an -o option (FLAG=VALUE or a bare boolean), as mount(8) passes them.\n" +
			"SIGINT or SIGTERM to the daemon (or fusermount3 -u / umount MOUNTPOINT) unmounts it cleanly.",
		run: runMount, argsDirs: true},
	{use: "fsck --pool PATH [--repair]", short: "check a pool (exit 0 clean, 1 problems, 2 could not run)",
		long: "Check an unmounted pool's metadata and say what is wrong; with --repair fix what is safe.\n" +
			"Exit status: 0 clean, 1 problems found, 2 the check could not run.",
		run: runFsck, noArgs: true},
	{use: "status MOUNTPOINT [--json]", short: "lock queues, waits and counters of a mounted pool, files named by path",
		long: "Show a mounted pool's counters and, for every file with lock activity, its path,\n" +
			"running and waiting lock holders and waits; with --json the daemon's raw status.",
		run: runStatus, argsDirs: true},
	{use: "cp [--threads N] SRC DST", short: "copy a file onto a mount through a resumable segmented session",
		long: "Copy SRC onto a dnnfs mount as DST (a file, or a directory to copy into) with --threads writers.\n" +
			"An interrupted cp, run again, writes only what its session has not persisted yet.",
		run: runCp},
	{use: "recover --pool PATH [--json] [--finish FILE]... [--abandon FILE]...",
		short: "list (and --finish/--abandon) sessions left open in an unmounted pool",
		long: "Open an unmounted pool, run the mount's recovery, and list the segmented sessions left open\n" +
			"with each segment's resume offset; --finish or --abandon closes the sessions named.",
		run: runRecover, noArgs: true},
	{use: "attach s3://BUCKET/PREFIX DIR", short: "show the objects under an S3 prefix as read-only files of a cluster mount",
		long: "On a cluster mount (--etcd), name every object under s3://BUCKET/PREFIX (on the cluster's S3 endpoint,\n" +
			"with its credentials) as a read-only file below DIR, on every node; their bytes load in chunks\n" +
			"through the peer tier like any file's.",
		run: runAttach},
	{use: "warmup PATH... [--bytes N] [--parallel N]", short: "pull files' chunks into the cluster's pools ahead of a job",
		long: "On a cluster mount (--etcd), have the chunks of the files named (directories: every file below)\n" +
			"pulled from S3 into their home nodes' pools, spread over the live nodes, so that reads\n" +
			"then come from the pools; --bytes stops after that much.",
		run: runWarmup},
	{use: "version", short: "print the version", run: runVersion, noArgs: true},
}

// tableCommands are `dnnfs table create` and `dnnfs table info`.
var tableCommands = []command{
	{use: "create PATH --rows R --dim D [--dtype f32|f16|bf16] [--shard SIZE]",
		short: "make PATH an embedding table on a mount with --ssd",
		long:  "Create PATH (a new file on a dnnfs mount with an SSD tier) as an embedding table of --rows rows of --dim values.",
		run:   runTableCreate},
	{use: "info PATH", short: "describe the embedding table PATH",
		long: "Print the layout of the embedding table PATH (rows, dim, dtype, shards) as the daemon reports it.",
		run:  runTableInfo},
}

// flagValues are the completions of flag values that are one of a fixed set,
// by flag name (the same meaning in every command that has the flag).
var flagValues = map[string][]string{
	"lock":       {"range\tper-thread byte-range locks", "file\tone lock per file"},
	"atime":      {"relatime", "noatime", "strictatime"},
	"log-level":  {"debug", "info", "warn", "error"},
	"log-format": {"console", "json"},
	"sched":      {"size\ta queue per size class", "fifo\tone queue"},
	"dtype":      {"f32", "f16", "bf16"},
}

// fileFlags complete to file names, dirFlags to directories.
var (
	fileFlags = []string{"pool", "cpuprofile", "cluster-token-file", "etcd-cert", "etcd-key", "etcd-cacert", "peer-cert", "peer-key", "peer-cacert"}
	dirFlags  = []string{"ssd"}
)

// collect is set while flagsOf runs a command only to learn its flags.
var collect struct {
	on bool
	fs *pflag.FlagSet
}

// flagsOf returns the flag set run defines, without running it: run stops
// at parse. So run functions must do nothing before parse but define flags
// (and look at args).
func flagsOf(run func([]string) error) *pflag.FlagSet {
	collect.on, collect.fs = true, nil
	defer func() { collect.on = false }()
	_ = run(nil)
	return collect.fs
}

// newFlags returns a flag set whose parse errors become usage errors.
func newFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.BoolP("help", "h", false, "show this help and exit")
	return fs
}

// parse parses args into fs. pflag.ErrHelp (--help, -h) is returned as it is:
// cobra then prints the command's help on stdout and the exit status is 0.
func parse(fs *pflag.FlagSet, args []string) error {
	if collect.on {
		collect.fs = fs
		return errCollected
	}
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if help, _ := fs.GetBool("help"); help {
		return pflag.ErrHelp
	}
	return nil
}

// newCommand makes c a cobra command. Unless completing, cobra leaves the
// flags to c.run's own parse (DisableFlagParsing), so a command parses its
// command line once and exactly as before; for completion cobra parses
// them itself to know which flag a value belongs to.
func newCommand(c command, completing bool) *cobra.Command {
	cc := &cobra.Command{
		Use:   c.use,
		Short: c.short,
		Long:  c.long,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.run(args)
		},
	}
	fs := flagsOf(c.run)
	if fs == nil {
		panic(c.use + ": the run function did not call parse")
	}
	cc.DisableFlagParsing = !completing
	cc.Flags().SortFlags = false
	cc.Flags().AddFlagSet(fs)
	for name, vals := range flagValues {
		if fs.Lookup(name) != nil {
			_ = cc.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	for _, name := range fileFlags {
		if fs.Lookup(name) != nil {
			_ = cc.MarkFlagFilename(name)
		}
	}
	for _, name := range dirFlags {
		if fs.Lookup(name) != nil {
			_ = cc.MarkFlagDirname(name)
		}
	}
	switch {
	case c.argsDirs:
		cc.ValidArgsFunction = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		}
	case c.noArgs:
		cc.ValidArgsFunction = cobra.NoFileCompletions
	}
	return cc
}

// newRoot builds the command tree.
func newRoot(completing bool) *cobra.Command {
	root := &cobra.Command{
		Use:   "dnnfs",
		Short: "a FUSE file system for DNN parameters and checkpoints on persistent memory",
		Long: "dnnfs creates, mounts, checks and repairs dnnfs pools.\n\n" +
			"Run 'dnnfs COMMAND --help' (or 'dnnfs help COMMAND') for a command's flags.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		// Without a command: the usage on stderr and exit status 2, as a
		// bad command line; an unknown command is a usage error too.
		RunE: func(cmd *cobra.Command, args []string) error {
			if v, _ := cmd.Flags().GetBool("version"); v {
				return runVersion(nil)
			}
			if len(args) == 0 {
				cmd.SetOut(os.Stderr)
				_ = cmd.Usage()
				return exitError{2, ""}
			}
			msg := fmt.Sprintf("unknown command %q (run dnnfs --help for the commands)", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg = fmt.Sprintf("unknown command %q; did you mean %q? (run dnnfs --help for the commands)", args[0], s[0])
			}
			return usageError{msg}
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	root.SuggestionsMinimumDistance = 2
	// --version is a flag of ours, not cobra's Version: that one prints
	// through text/template, whose reflection keeps the linker from
	// dropping unused methods (a third bigger binary).
	root.Flags().BoolP("version", "v", false, "print the version")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	for _, c := range commands {
		root.AddCommand(newCommand(c, completing))
	}
	table := &cobra.Command{
		Use:   "table create|info PATH",
		Short: "make or describe an embedding table on a mount with --ssd",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{"want 'table create PATH --rows R --dim D --dtype f32|f16|bf16 [--shard SIZE]' or 'table info PATH'"}
		},
	}
	for _, c := range tableCommands {
		table.AddCommand(newCommand(c, completing))
	}
	root.AddCommand(table)
	// help and completion are cobra's, but a topic or shell it does not
	// know is a usage error (exit 2), not the help with exit 0.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [COMMAND]...",
		Short: "show a command's usage and flags",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Sprintf("unknown help topic %q (run dnnfs --help for the commands)", strings.Join(args, " "))}
			}
			// As cobra does before the help it prints for CMD --help.
			c.InitDefaultHelpFlag()
			c.InitDefaultVersionFlag()
			return c.Help()
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			c, _, err := root.Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
	})
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{"want a shell: bash, zsh, fish or powershell"}
			}
			return usageError{fmt.Sprintf("unknown shell %q: want bash, zsh, fish or powershell", args[0])}
		}
	}
	return root
}

func main() {
	os.Args = mountHelperArgs(os.Args) // as mount.fuse.dnnfs: mount(8)'s helper
	completing := len(os.Args) > 1 && (os.Args[1] == cobra.ShellCompRequestCmd || os.Args[1] == cobra.ShellCompNoDescRequestCmd)
	root := newRoot(completing)
	cmd, err := root.ExecuteC()
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return
	}
	name := "dnnfs"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	var ue usageError
	var ee exitError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, msg)
		os.Exit(2)
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintf(os.Stderr, "%s: %s\n", name, msg)
		}
		os.Exit(ee.code)
	default:
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, msg)
		os.Exit(1)
	}
}

func runVersion(args []string) error {
	fl := newFlags("version")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fl.Arg(0))}
	}
	fmt.Println("dnnfs", version)
	return nil
}

// parseSize reads sizes like 8GiB, 512MiB, 1G, 4096.
func parseSize(s string) (int64, error) { return units.ParseSize(s) }
