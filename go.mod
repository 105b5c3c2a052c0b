module github.com/dnnfs/dnnfs

go 1.26.0

require (
	github.com/cockroachdb/datadriven v1.0.3
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/spf13/pflag v1.1.0
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
)
