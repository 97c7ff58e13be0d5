package replay

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

func TestCSVTrace(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Arrival
		wantErr string
	}{
		{name: "header, comment, max_tokens", in: "arrival_seconds,prompt_tokens,output_tokens,max_tokens\n# x\n0.5,100,20,64\n1,1500,30\n",
			want: []Arrival{{At: 500 * time.Millisecond, Prompt: 100, Output: 20, MaxToken: 64},
				{At: time.Second, Class: 1, Prompt: 1500, Output: 30, MaxToken: 30}}},
		{name: "no header", in: "0,1,1\n", want: []Arrival{{Prompt: 1, Output: 1, MaxToken: 1}}},
		{name: "time goes back", in: "2,10,10\n1,10,10\n", want: []Arrival{{At: 2 * time.Second, Prompt: 10, Output: 10, MaxToken: 10}}, wantErr: "line 2"},
		{name: "zero tokens", in: "0,0,10\n", wantErr: "line 1"},
		{name: "max below output", in: "0,10,10,5\n", wantErr: "max_tokens"},
		{name: "too few fields", in: "0,10\n", wantErr: "fields"},
		{name: "bad header later", in: "0,1,1\nx,1,1\n", want: []Arrival{{Prompt: 1, Output: 1, MaxToken: 1}}, wantErr: "arrival_seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCSVTrace(strings.NewReader(tt.in), 0)
			var got []Arrival
			for a, ok := c.Next(); ok; a, ok = c.Next() {
				got = append(got, a)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("arrivals = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("arrival %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
			if err := c.Err(); (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Err() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunFromCSV(t *testing.T) {
	var b strings.Builder
	b.WriteString("arrival_seconds,prompt_tokens,output_tokens\n")
	for i := range 600 {
		prompt := 100
		if i%10 == 0 {
			prompt = 1500
		}
		b.WriteString(formatSec(float64(i)/10) + "," + itoa(prompt) + ",20\n")
	}
	r, err := Run(Settings{Engine: sim.Settings{GPU: h100()}, Source: NewCSVTrace(strings.NewReader(b.String()), 0)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Arrivals != 600 || r.Outcomes.Served == 0 || r.Classes[1].Name != "long" || r.Classes[1].P50 == 0 {
		t.Fatalf("result %+v", r)
	}
	if _, err := Run(Settings{Source: NewCSVTrace(strings.NewReader("1,2\n"), 0)}); err == nil {
		t.Fatal("Run with a malformed trace = nil error")
	}
}

func formatSec(s float64) string { return strings.TrimRight(strings.TrimRight(ftoa(s), "0"), ".") }

func FuzzCSVTrace(f *testing.F) {
	f.Add("arrival_seconds,prompt_tokens,output_tokens,max_tokens\n0.5,100,20,64\n1,1500,30\n")
	f.Add("0,1,1\n2,10,10\n1,10,10\n")
	f.Add("# c\n\n0,10,10,5\n")
	f.Add("\"0\",\"1\",\"1\"\n1e3,5,5\n")
	f.Fuzz(func(t *testing.T, in string) {
		c := NewCSVTrace(strings.NewReader(in), 0)
		last := time.Duration(0)
		for a, ok := c.Next(); ok; a, ok = c.Next() {
			if a.At < last || a.Prompt < 1 || a.Output < 1 || a.MaxToken < a.Output || a.Class < 0 || a.Class > 1 {
				t.Fatalf("accepted a bad arrival %+v after %v from %q", a, last, in)
			}
			last = a.At
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
