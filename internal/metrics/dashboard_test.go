package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// metricName finds metric names in PromQL: ours, and the Go and process
// collectors'.
var metricName = regexp.MustCompile(`\b(?:dnnfs|go|process)_[a-zA-Z0-9_]+`)

// exprs collects every "expr" string in a Grafana dashboard.
func exprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			exprs(x, out)
		}
	case []any:
		for _, x := range v {
			exprs(x, out)
		}
	}
}

// TestDashboard: docs/grafana-dnnfs.json parses, every panel has a query,
// every metric it queries is in a scrape of a mount with an SSD tier (but
// the cluster's, which tests/cluster checks on a cluster mount), and
// every dnnfs metric of that scrape is on the dashboard and in docs/METRICS.md.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../../docs/grafana-dnnfs.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dnnfs.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("docs/grafana-dnnfs.json: title %q, uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if p["type"] == "row" {
			continue
		}
		var es []string
		exprs(p, &es)
		if len(es) == 0 {
			t.Errorf("panel %q queries nothing", p["title"])
		}
	}
	var all any
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	var es []string
	exprs(all, &es)
	queried := map[string]bool{}
	for _, e := range es {
		for _, name := range metricName.FindAllString(e, -1) {
			queried[name] = true
		}
	}

	mt := mountWithMetrics(t, true, true)
	f := mt.scrape(t)
	for name := range queried {
		if strings.HasPrefix(name, "dnnfs_cluster_") {
			continue // a cluster mount's: tests/cluster checks them on one
		}
		if !f.Has(name) {
			t.Errorf("the dashboard queries %s, which a scrape does not have", name)
		}
	}
	metricsDoc, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range f {
		if strings.HasPrefix(name, "dnnfs_") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		onDash := queried[name]
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			onDash = onDash || queried[name+suf]
		}
		if !onDash {
			t.Errorf("%s is not on the dashboard", name)
		}
		if !strings.Contains(string(metricsDoc), "`"+name+"`") {
			t.Errorf("%s is not in docs/METRICS.md", name)
		}
	}
}
