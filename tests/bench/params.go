package main

import (
	"fmt"
	"time"
)

const (
	KiB = int64(1) << 10
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)

// group is one file layout of the fio matrix: a shared file whose jobs each
// own a contiguous segment, or one file per job (the control).
type group struct {
	Layout string // "shared" or "perjob"
	Jobs   int
}

// personality is a Filebench-like workload run by a fio job file in
// tests/bench/fio/NAME.fio over a file set made beforehand.
type personality struct {
	Name     string
	Files    int
	MinSize  int64 // file sizes are uniform in [MinSize, MaxSize], multiples of 4 KiB
	MaxSize  int64
	Describe string // the I/O itself is in tests/bench/fio/NAME.fio
}

// params are the sizes of one mode. Full mode is sized to finish in about
// 40 minutes on an idle 2-core machine; quick mode in under 5.
type params struct {
	Mode string `json:"mode"`
	Runs int    `json:"runs"`

	MatrixBytes int64   `json:"matrix_bytes"` // data per fio configuration (all jobs together)
	Blocks      []int64 `json:"blocks"`
	Groups      []group `json:"groups"`
	FioTime     string  `json:"fio_runtime"`   // time_based runtime of writes and warm reads
	ColdCap     string  `json:"cold_read_cap"` // a cold read stops after its data or this long
	fioTime     time.Duration
	coldCap     time.Duration

	Personalities []personality `json:"personalities"`
	Threads       []int         `json:"threads"`
	PersTime      string        `json:"personality_runtime"`
	persTime      time.Duration

	CkptBytes   int64 `json:"checkpoint_bytes"`
	CkptThreads []int `json:"checkpoint_threads"`

	FreshBytes int64  `json:"fresh_bytes"`    // the file of the fresh-write phase
	AppendTime string `json:"append_runtime"` // each append/overwrite measurement
	AppendCap  int64  `json:"append_cap"`     // an append run also stops at this size
	appendTime time.Duration

	ClusterBytes int64 `json:"cluster_bytes"` // the cluster phase's checkpoint
}

func newParams(o options) params {
	p := params{
		Mode:        "full",
		Runs:        3,
		MatrixBytes: 512 * MiB,
		Blocks:      []int64{4 * KiB, 16 * KiB, 256 * KiB, 1 * MiB},
		Groups: []group{{"shared", 1}, {"shared", 2}, {"shared", 4},
			{"perjob", 2}, {"perjob", 4}},
		fioTime:  500 * time.Millisecond,
		coldCap:  1500 * time.Millisecond,
		Threads:  []int{1, 2, 4, 8},
		persTime: time.Second,
		Personalities: []personality{
			{Name: "webserver", Files: 1000, MinSize: 16 * KiB, MaxSize: 128 * KiB,
				Describe: "1000 files of 16–128 KiB, 16 KiB random I/O, read:write 10:1"},
			{Name: "varmail", Files: 1000, MinSize: 4 * KiB, MaxSize: 64 * KiB,
				Describe: "1000 files of 4–64 KiB, 4 KiB random I/O, read:write 1:1, fsync after every write"},
			{Name: "fileserver", Files: 5000, MinSize: 16 * KiB, MaxSize: 256 * KiB,
				Describe: "5000 files of 16–256 KiB, 16 KiB random I/O, read:write 1:10"},
		},
		CkptBytes:   2 * GiB,
		CkptThreads: []int{1, 4},
		FreshBytes:  1 * GiB,
		appendTime:  3 * time.Second,
		AppendCap:   512 * MiB,

		ClusterBytes: 4 * GiB,
	}
	if o.quick {
		p.Mode = "quick"
		p.Runs = 1
		p.MatrixBytes = 128 * MiB
		p.Blocks = []int64{4 * KiB, 1 * MiB}
		p.Groups = []group{{"shared", 1}, {"shared", 4}, {"perjob", 4}}
		p.fioTime = 300 * time.Millisecond
		p.coldCap = time.Second
		p.Threads = []int{1, 4}
		p.persTime = 500 * time.Millisecond
		p.Personalities[2].Files = 1000
		p.Personalities[2].Describe = "1000 files of 16–256 KiB, 16 KiB random I/O, read:write 1:10"
		p.CkptBytes = 256 * MiB
		p.FreshBytes = 256 * MiB
		p.appendTime = time.Second
		p.AppendCap = 128 * MiB
		p.ClusterBytes = 512 * MiB
	}
	if o.runs > 0 {
		p.Runs = o.runs
	}
	p.FioTime = p.fioTime.String()
	p.ColdCap = p.coldCap.String()
	p.PersTime = p.persTime.String()
	p.AppendTime = p.appendTime.String()
	return p
}

// matrixFiles returns the files a group reads and writes, with sizes.
func (p params) matrixFiles(g group) []fileSpec {
	if g.Layout == "shared" {
		return []fileSpec{{"shared", p.MatrixBytes}}
	}
	var fs []fileSpec
	for j := 0; j < g.Jobs; j++ {
		fs = append(fs, fileSpec{fmt.Sprintf("pj%d.%d", g.Jobs, j), p.MatrixBytes / int64(g.Jobs)})
	}
	return fs
}

type fileSpec struct {
	Name string
	Size int64
}

func (p params) matrixData() int64 {
	seen := map[string]bool{}
	var n int64
	for _, g := range p.Groups {
		for _, f := range p.matrixFiles(g) {
			if !seen[f.Name] {
				seen[f.Name] = true
				n += f.Size
			}
		}
	}
	return n
}

func (p params) persData(ps personality) int64 {
	return int64(ps.Files) * (ps.MinSize + ps.MaxSize) / 2
}

// tmpfsSize bounds our tmpfs mount: the largest phase's data, with room.
func (p params) tmpfsSize() int64 {
	n := max(p.matrixData(), 2*p.CkptBytes, p.FreshBytes, p.AppendCap+64*MiB)
	for _, ps := range p.Personalities {
		n = max(n, p.persData(ps))
	}
	return n + n/2 + 512*MiB
}

// poolSize is a dnnfs pool for a phase holding data bytes.
func poolSize(data int64) int64 {
	n := data + data/4 + 256*MiB
	return (n + MiB - 1) / MiB * MiB
}

// systemCount is how many systems of each sort a run measures: the disk
// systems run only the fresh and append phases, the others every phase.
type systemCount struct{ mem, disk, plain int } // plain: loopback-plain, plainConfigs only

func (sc systemCount) of(phase string) int {
	if phase == "fresh" || phase == "append" {
		return sc.mem + sc.disk
	}
	return sc.mem
}

// count returns how many measurements the runs of everything take.
func (p params) count(sc systemCount, phases []string) int {
	total := 0
	for _, ph := range phases {
		n := 0
		switch ph {
		case "fio":
			n += len(p.Groups) * len(p.Blocks) * 2 * 3 // writes: seq+rand; reads: seq+rand, cold+warm
			total += len(plainConfigs()) * sc.plain
		case "personality":
			n += len(p.Personalities) * len(p.Threads)
		case "checkpoint":
			n += len(p.CkptThreads) * 3
		case "fresh":
			n += 2 * 2 * len(freshFsyncs)
		case "append":
			n += 2 * len(appendSizes)
		case "cluster": // not per system
			for _, r := range clusterReaderCounts {
				total += r
			}
			total += 4
			for _, r := range clusterS3Counts {
				total += r
			}
		}
		total += n * sc.of(ph)
	}
	return total * p.Runs
}

// estimate guesses the wall time on an idle 2-core machine from the sizes
// (about 0.3 s to start a fio, 0.3 s to remount, 1 GiB/s through FUSE).
func (p params) estimate(sc systemCount, phases []string) time.Duration {
	const proc, remount = 300 * time.Millisecond, 300 * time.Millisecond
	gib := func(n int64) time.Duration { return time.Duration(float64(n) / float64(GiB) * float64(time.Second)) }
	var total time.Duration
	for _, ph := range phases {
		var per time.Duration // one run of the phase on one system
		switch ph {
		case "fio":
			nb := time.Duration(len(p.Blocks))
			for range p.Groups {
				for range 2 { // seq, rand
					per += proc + nb*p.fioTime                                        // writes
					per += nb * (proc + remount + min(p.coldCap, gib(p.MatrixBytes))) // cold reads
					per += proc + gib(p.MatrixBytes) + nb*p.fioTime                   // warm reads
				}
			}
			per += gib(p.matrixData())
		case "personality":
			per += time.Duration(len(p.Personalities)*len(p.Threads)) * (p.persTime + proc)
			for _, ps := range p.Personalities {
				per += gib(p.persData(ps)) + time.Duration(ps.Files)*200*time.Microsecond
			}
		case "checkpoint":
			per += gib(int64(len(p.CkptThreads)*3+1)*p.CkptBytes) + time.Duration(len(p.CkptThreads))*remount
		case "fresh": // a new file system each; the disk systems are slower
			per += time.Duration(2*2*len(freshFsyncs)) * (proc + remount + 2*gib(p.FreshBytes))
		case "append":
			per += remount + gib(64*MiB) + time.Duration(2*len(appendSizes))*(proc+p.appendTime)
		case "cluster": // not per system: the write, then every reader reads
			// it all at about 300 MiB/s in all (2 cores for the daemons, S3
			// and the readers); 11 mounts a round.
			moved := int64(1)
			for _, r := range clusterReaderCounts {
				moved += int64(r)
			}
			moved += 4
			for _, r := range clusterS3Counts {
				moved += int64(r)
			}
			total += time.Duration(moved)*gib(p.ClusterBytes)*10/3 + 11*4*remount + 5*time.Second
		}
		total += per * time.Duration(sc.of(ph))
		if ph == "fio" { // loopback-plain: its few configurations, a written file each
			total += time.Duration(sc.plain*len(plainConfigs())) * (proc + remount + p.fioTime + gib(p.MatrixBytes))
		}
	}
	return total * time.Duration(p.Runs)
}
