package main

import (
	"math"
	"sort"
)

// Summary is the median and spread of one configuration on one system.
type Summary struct {
	ID     string    `json:"id"`
	System string    `json:"system"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	N      int       `json:"n"`
	Errors int       `json:"errors"`
	Values []float64 `json:"values"`
}

// Ratio is system/peer for one configuration, computed run by run (the two
// values of one run were measured minutes apart at most), then summarised.
type Ratio struct {
	ID     string  `json:"id"`
	System string  `json:"system"`
	Peer   string  `json:"peer"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return
}

type stats struct {
	sum    map[string]map[string]*Summary        // id -> system -> summary
	byRun  map[string]map[string]map[int]float64 // id -> system -> run -> value (good values only)
	ratios map[string]map[string]*Ratio          // id -> "sys/peer" -> ratio
}

func computeStats(meas []Measurement) *stats {
	st := &stats{sum: map[string]map[string]*Summary{}, byRun: map[string]map[string]map[int]float64{}, ratios: map[string]map[string]*Ratio{}}
	for _, m := range meas {
		if st.sum[m.ID] == nil {
			st.sum[m.ID] = map[string]*Summary{}
			st.byRun[m.ID] = map[string]map[int]float64{}
		}
		s := st.sum[m.ID][m.System]
		if s == nil {
			s = &Summary{ID: m.ID, System: m.System}
			st.sum[m.ID][m.System] = s
			st.byRun[m.ID][m.System] = map[int]float64{}
		}
		if m.Err != "" || m.Value <= 0 {
			s.Errors++
			continue
		}
		s.Values = append(s.Values, m.Value)
		st.byRun[m.ID][m.System][m.Run] = m.Value
	}
	for _, bySys := range st.sum {
		for _, s := range bySys {
			s.N = len(s.Values)
			if s.N > 0 {
				s.Median = median(s.Values)
				s.Min, s.Max = minMax(s.Values)
			}
		}
	}
	return st
}

// ratio computes system/peer pair by pair within each run.
func (st *stats) ratio(id, system, peer string) *Ratio {
	key := system + "/" + peer
	if r := st.ratios[id][key]; r != nil {
		return r
	}
	a, b := st.byRun[id][system], st.byRun[id][peer]
	var v []float64
	for run, x := range a {
		if y, ok := b[run]; ok && y > 0 {
			v = append(v, x/y)
		}
	}
	if len(v) == 0 {
		return nil
	}
	r := &Ratio{ID: id, System: system, Peer: peer, Median: median(v), N: len(v)}
	r.Min, r.Max = minMax(v)
	if st.ratios[id] == nil {
		st.ratios[id] = map[string]*Ratio{}
	}
	st.ratios[id][key] = r
	return r
}

// geomean of the median ratios of the given configurations.
func (st *stats) geomean(ids []string, system, peer string) (float64, int) {
	var s float64
	n := 0
	for _, id := range ids {
		if r := st.ratio(id, system, peer); r != nil && r.Median > 0 {
			s += math.Log(r.Median)
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return math.Exp(s / float64(n)), n
}
