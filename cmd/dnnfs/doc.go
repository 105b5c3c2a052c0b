// Command dnnfs creates, mounts, checks and repairs dnnfs pools.
//
//	dnnfs mkfs  --pool PATH --size SIZE [--force]
//	dnnfs mount [-f] --pool PATH MOUNTPOINT [--log-level LEVEL] [--allow-other] [--read-cache]
//	dnnfs fsck  --pool PATH [--repair]
//	dnnfs status MOUNTPOINT [--json]
//	dnnfs cp [--threads N] SRC DST
//	dnnfs recover --pool PATH [--json] [--finish|--abandon]
//	dnnfs table create PATH --rows R --dim D --dtype f32|f16|bf16 | info PATH
//	dnnfs attach s3://BUCKET/PREFIX DIR
//	dnnfs warmup PATH... [--bytes N] [--parallel N]
//	dnnfs completion bash|zsh|fish
//	dnnfs version (or --version)
//
// `dnnfs help CMD` and `dnnfs CMD --help` list every flag. The commands
// are spf13/cobra commands (main.go); each run function still parses its
// own pflag set, which cobra is handed for help and completion.
//
// `dnnfs mount` is mountOptions (mountflags.go: AddFlags, validate) plus
// the cluster's flags (cluster.go: clusterFlags, check), then the daemon's
// steps in mount.go (mountRun: open the medium and the pool, start the
// tier, the cluster node and the FUSE mount, serve, shut down); -o options
// and the mount(8) helper are in mounthelper.go, backgrounding in
// daemon.go.
//
// What it owns: flags and their validation (one line per bad value, naming
// the flag), opening the medium (pmem) and refusing a pool in use, wiring
// core, embedding, cluster and fs together for a mount, and the admin commands'
// output (with a progress bar on stderr when it is a terminal).
//
// What it must not do: change the pool other than through core, recovery or
// pmem's pool creation; write anything when a command only reads or fails
// (the pool stays byte-identical); or panic on bad input.
package main
