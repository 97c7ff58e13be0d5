package deploy

import (
	"encoding/json"
	"os"
	"testing"
)

type dashboardPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, W int
	} `json:"gridPos"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) (title string, panels []dashboardPanel) {
	t.Helper()
	data, err := os.ReadFile("grafana/gatekeeper.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/gatekeeper.json is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("grafana/gatekeeper.json: title %q, uid %q, want both", d.Title, d.UID)
	}
	return d.Title, d.Panels
}

// dashboardExprs returns every PromQL expression of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	_, panels := readDashboard(t)
	var exprs []string
	for _, p := range panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// TestDashboard checks the dashboard's shape; the metric names it uses are
// checked against a running gatekeeper by TestGatekeeperMetrics.
func TestDashboard(t *testing.T) {
	t.Parallel()
	_, panels := readDashboard(t)
	ids := map[int]bool{}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d is used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos x=%d w=%d, want inside the 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || len(promqlMetrics(tg.Expr)) == 0 {
				t.Errorf("panel %q query %s: %q names no gatekeeper metric", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	if len(ids) < 10 {
		t.Errorf("dashboard has %d panels, want the metrics covered", len(ids))
	}
}
