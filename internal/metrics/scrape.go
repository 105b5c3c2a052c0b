package metrics

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is a parsed scrape: metric families by name.
type Families map[string]*dto.MetricFamily

// Scrape fetches and parses a Prometheus text exposition (the tests'
// client of /metrics).
func Scrape(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return fams, nil
}

// Has reports whether the scrape has a series of name: a family, or a
// histogram's or summary's _count, _sum or _bucket series.
func (f Families) Has(name string) bool {
	if _, ok := f[name]; ok {
		return true
	}
	for _, suf := range []string{"_count", "_sum", "_bucket"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if fam, ok := f[base]; ok && (fam.GetType() == dto.MetricType_HISTOGRAM || fam.GetType() == dto.MetricType_SUMMARY) {
				return true
			}
		}
	}
	return false
}

// Value is the value of the series of name with the given label pairs
// (name, value, ...; other labels may be anything): a counter's or
// gauge's value, or with name ending in _count or _sum a histogram's or
// summary's. ok is false when there is no such series.
func (f Families) Value(name string, labels ...string) (v float64, ok bool) {
	fam, part := f[name], ""
	if fam == nil {
		for _, suf := range []string{"_count", "_sum"} {
			if base, cut := strings.CutSuffix(name, suf); cut && f[base] != nil {
				fam, part = f[base], suf
			}
		}
	}
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil && part == "_count":
			return float64(m.Histogram.GetSampleCount()), true
		case m.Histogram != nil && part == "_sum":
			return m.Histogram.GetSampleSum(), true
		case m.Summary != nil && part == "_count":
			return float64(m.Summary.GetSampleCount()), true
		case m.Summary != nil && part == "_sum":
			return m.Summary.GetSampleSum(), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
