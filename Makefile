# dnnfs — see README.md. `make run` mounts a pool on ./mnt; `make test` runs everything.
GO        ?= go
BIN       := bin/dnnfs
POOL      ?= var/dnnfs.pool
POOL_SIZE ?= 8GiB
MNT       ?= mnt
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# Test pools live in memory: the suite measures correctness, and msync on a
# disk-backed pool only makes it slower.
TEST_TMP  ?= /dev/shm/dnnfs-test
# Fuzz runs are bounded by executions, not time: a time bound makes the Go
# fuzz coordinator fail with "context deadline exceeded" on a loaded machine.
FUZZEXECS ?= 50000x
# versitygw, the S3 server of the cluster tests (DESIGN.md §Cluster); `make deps` installs it.
VERSITYGW_VERSION ?= v1.8.0
VERSITYGW := $(shell $(GO) env GOPATH)/bin/versitygw
# staticcheck (honnef.co/go/tools), pinned; `make deps` installs it.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
# etcd for the cluster tests (DESIGN.md §Cluster): the server of the Go client's release
# line, built by `make deps` at the version pinned in tests/clusterenv/etcdserver.
ETCD_VERSION := $(shell awk '$$1 == "go.etcd.io/etcd/server/v3" { sub(/^v/, "", $$2); print $$2 }' tests/clusterenv/etcdserver/go.mod)
ETCD := $(shell $(GO) env GOPATH)/bin/etcd

# make install: PREFIX and DESTDIR as usual. mount(8) looks for its helpers
# (mount.fuse.dnnfs) in /sbin only, whatever the prefix.
PREFIX         ?= /usr/local
BINDIR         ?= $(PREFIX)/bin
SBINDIR        ?= /sbin
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR    ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR     ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR    ?= $(PREFIX)/share/fish/vendor_completions.d
PYTHON         ?= /usr/bin/python3
# The Python package goes where $(PYTHON) looks under PREFIX (Debian:
# /usr/local/lib/python3.X/dist-packages; pip's --prefix would put it in
# /usr/local/local/... there, off sys.path).
PYSITEDIR      ?= $(shell $(PYTHON) -c 'import site, sysconfig; p = "$(PREFIX)"; print(next((d for d in site.getsitepackages() if d.startswith(p + "/")), sysconfig.get_path("purelib", "posix_prefix", vars={"base": p, "platbase": p})))')

.PHONY: all build run test deps cluster-engines vet unit fuzz clean bench bench-dlrm install uninstall

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/dnnfs

# deps installs what the suite needs on a fresh machine (Debian: fuse3 for
# fusermount3, fio for benchmarks, attr for getfattr/setfattr, acl for
# setfacl/getfacl, python3-numpy, python3-torch, python3-venv, python3-setuptools
# and python3-pip for the Python package's tests) and the Go modules.
deps: cluster-engines
	@missing=""; \
	for pair in fusermount3:fuse3 fio:fio setfattr:attr setfacl:acl; do \
		command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# The Python tests use Debian's /usr/bin/python3 with numpy and torch, and
	@# pip install ./python into a venv of it (tests/python): venv, setuptools, pip.
	@missing=""; \
	for pair in numpy:python3-numpy torch:python3-torch venv:python3-venv ensurepip:python3-venv setuptools:python3-setuptools pip:python3-pip; do \
		/usr/bin/python3 -c "import $${pair%%:*}" 2>/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		echo "installing:$$missing"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# The completion test sources the bash script with bash-completion loaded.
	@test -e /usr/share/bash-completion/bash_completion || { \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		echo "installing: bash-completion"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bash-completion >/dev/null; }
	@test -e /dev/fuse || { echo "/dev/fuse is missing: load the fuse module (modprobe fuse)"; exit 1; }
	$(GO) mod download
	@$(STATICCHECK) -version 2>/dev/null | grep -qF '($(patsubst v%,%,$(STATICCHECK_VERSION)))' || \
		{ echo "installing: staticcheck $(STATICCHECK_VERSION)"; $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }

# cluster-engines: the etcd and S3 servers of the cluster tests and of make
# bench's cluster phase (DESIGN.md §Cluster), built or installed when missing.
cluster-engines:
	@$(GO) version -m $(VERSITYGW) 2>/dev/null | grep -qE '^[[:space:]]+mod[[:space:]]+github.com/versity/versitygw[[:space:]]+$(VERSITYGW_VERSION)[[:space:]]' || \
		{ echo "installing: versitygw $(VERSITYGW_VERSION)"; $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }
	@$(ETCD) --version 2>/dev/null | grep -qx 'etcd Version: $(ETCD_VERSION)' || \
		{ echo "installing: etcd $(ETCD_VERSION)"; cd tests/clusterenv/etcdserver && $(GO) build -trimpath -o $(ETCD) go.etcd.io/etcd/server/v3; }

run: build
	@mkdir -p $(dir $(POOL)) $(MNT)
	@test -e $(POOL) || $(BIN) mkfs --pool $(POOL) --size $(POOL_SIZE)
	@echo "dnnfs: mounting $(POOL) on $(MNT) in the foreground; use it from another shell, Ctrl-C unmounts."
	@echo "  e.g.  dd if=/dev/zero of=$(MNT)/weights.bin bs=1M count=256 && ls -l $(MNT)"
	$(BIN) mount -f --pool $(POOL) $(MNT)

# install: the binary, mount(8)'s helper (links to it: it acts as the
# helper under that name), the systemd unit (README, Install), shell
# completions and the Python package. uninstall removes exactly these.
install: build
	install -D -m 755 $(BIN) $(DESTDIR)$(BINDIR)/dnnfs
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(BINDIR)/dnnfs $(DESTDIR)$(SBINDIR)/mount.fuse.dnnfs
	ln -sf $(BINDIR)/dnnfs $(DESTDIR)$(SBINDIR)/mount.dnnfs
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	sed 's|@BINDIR@|$(BINDIR)|g' dist/dnnfs@.service.in > $(DESTDIR)$(SYSTEMDUNITDIR)/dnnfs@.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/dnnfs@.service
	install -d $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	$(BIN) completion bash > $(DESTDIR)$(BASHCOMPDIR)/dnnfs
	$(BIN) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_dnnfs
	$(BIN) completion fish > $(DESTDIR)$(FISHCOMPDIR)/dnnfs.fish
	@# Built from a copy: an in-tree build leaves build/ and *.egg-info in python/.
	@if test -f python/pyproject.toml; then \
		set -e; src=$$(mktemp -d); trap 'rm -rf "$$src"' EXIT; cp -R python/. "$$src"; \
		echo "$(PYTHON) -m pip install --target=$(DESTDIR)$(PYSITEDIR) --no-build-isolation --no-deps ./python"; \
		PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install --target=$(DESTDIR)$(PYSITEDIR) --no-build-isolation --no-deps --no-warn-script-location --disable-pip-version-check -q "$$src"; \
	fi

# The Python package's files are those its RECORD lists (pip's own
# uninstall cannot work under a DESTDIR).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/dnnfs $(DESTDIR)$(SBINDIR)/mount.fuse.dnnfs $(DESTDIR)$(SBINDIR)/mount.dnnfs \
		$(DESTDIR)$(SYSTEMDUNITDIR)/dnnfs@.service $(DESTDIR)$(BASHCOMPDIR)/dnnfs \
		$(DESTDIR)$(ZSHCOMPDIR)/_dnnfs $(DESTDIR)$(FISHCOMPDIR)/dnnfs.fish
	@for rec in $(DESTDIR)$(PYSITEDIR)/dnnfs-*.dist-info/RECORD; do \
		test -f "$$rec" || continue; \
		site=$$(dirname "$$(dirname "$$rec")"); \
		echo "removing the Python package under $$site"; \
		files=$$(cut -d, -f1 "$$rec"); \
		echo "$$files" | while read -r f; do rm -f "$$site/$$f"; done; \
		echo "$$files" | grep / | sed 's|/[^/]*$$||' | sort -ru | while read -r d; do rmdir "$$site/$$d" 2>/dev/null || true; done; \
	done

vet:
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

# The end-to-end packages mount a daemon built with -race, so a data race in
# the real FUSE paths fails the run; it is built once and shared.
unit: export DNNFS_ETCD_BIN ?= $(ETCD)
unit:
	@mkdir -p $(TEST_TMP)
	$(GO) build -race -o bin/dnnfs-race ./cmd/dnnfs
	DNNFS_BIN=$(CURDIR)/bin/dnnfs-race TMPDIR=$(TEST_TMP) $(GO) test -race -count=1 -timeout 25m ./...

# fuzz runs every fuzz target briefly (go test -fuzz takes one target at a time).
fuzz:
	@mkdir -p $(TEST_TMP)
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f ($(FUZZEXECS))"; \
			out=$$(TMPDIR=$(TEST_TMP) $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZEXECS) $$pkg 2>&1) || { echo "$$out" | tail -40; exit 1; }; \
		done; \
	done

# The cluster tests must run, not skip, once deps installed their engines.
test: export DNNFS_REQUIRE_CLUSTER = 1
test: deps vet build unit fuzz

# bench measures dnnfs against native tmpfs and go-fuse's loopback example
# (fio matrix, Filebench-like personalities, checkpoint save/load, Go
# micro-benchmarks; and, for the disk-pool goals (DESIGN.md §An fsync,
# §Delayed commit), a pool on disk vs the disk's file system, appends vs
# overwrites; for DESIGN.md §Cluster, a checkpoint written on one cluster
# node loaded by 1, 2 and 4 others against rclone reading S3, with the etcd
# and versitygw of `make deps`) and regenerates the reports
# (docs/BENCHMARKS.md, docs/bench/DLRM.md) and their headline plots
# (docs/bench/*.png); the raw results (results.json, dlrm.json, every plot,
# micro.txt, profiles) go to bench-out/, which git ignores. Needs root. QUICK=1: under 5 minutes; RUNS=N: runs per
# configuration; PROFILE=1: CPU profiles of dnnfs where it is furthest
# behind tmpfs; DISKDIR=DIR: the disk directory (default /var/tmp);
# CLUSTER_POOLS=shm|disk: where the cluster readers' pools go (default: shm
# when they fit in memory); CLUSTER_S3_MIBPS=N: the cluster phase's first
# run also reads S3 through a proxy pacing all replies to N MiB/s, a remote
# store (default 200; 0: S3 only at memory speed on this machine).
bench: cluster-engines
	$(GO) build -o bin/bench ./tests/bench
	QUICK="$(QUICK)" RUNS="$(RUNS)" PROFILE="$(PROFILE)" DISKDIR="$(DISKDIR)" CLUSTER_POOLS="$(CLUSTER_POOLS)" CLUSTER_S3_MIBPS="$(CLUSTER_S3_MIBPS)" ./bin/bench
	$(MAKE) bench-dlrm

# bench-dlrm: the synthetic DLRM workload on the SSD tier (DESIGN.md §Embedding tier):
# docs/bench/DLRM.md, and bench-out/dlrm.json (raw, not tracked). QUICK=1: small tables.
bench-dlrm: build
	$(GO) build -o bin/dlrm ./tests/dlrm
	./bin/dlrm -bin bin/dnnfs -out docs/bench -raw bench-out $(if $(QUICK),-quick,)

clean:
	rm -rf bin bench-out $(TEST_TMP)
