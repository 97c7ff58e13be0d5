package demo

import (
	"flag"
	"io"
	"testing"
)

func TestDemoFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		config      string
		check       bool
		wantEnabled bool
		wantLoad    bool
		wantErr     bool
	}{
		{name: "off", args: nil},
		{name: "demo", args: []string{"-demo"}, wantEnabled: true},
		{name: "load implies demo", args: []string{"-demo-load"}, wantEnabled: true, wantLoad: true},
		{name: "listeners", args: []string{"-demo", "-demo-listen", "127.0.0.1:18080", "-demo-admin-listen", "127.0.0.1:19090"}, wantEnabled: true},
		{name: "with a policy file", args: []string{"-demo"}, config: "config.yaml", wantEnabled: true, wantErr: true},
		{name: "with check", args: []string{"-demo"}, check: true, wantEnabled: true, wantErr: true},
		{name: "tight pod", args: []string{"-demo-load", "-demo-pod", "tight"}, wantEnabled: true, wantLoad: true},
		{name: "unknown pod", args: []string{"-demo", "-demo-pod", "huge"}, wantEnabled: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Flags
			fs := flag.NewFlagSet("gatekeeper", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			d.Register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if d.Enabled() != tt.wantEnabled || d.Load != tt.wantLoad {
				t.Errorf("flags %v: enabled %v load %v, want %v %v", tt.args, d.Enabled(), d.Load, tt.wantEnabled, tt.wantLoad)
			}
			if err := d.Validate(tt.config, tt.check); (err != nil) != tt.wantErr {
				t.Errorf("validate(%q, %v) = %v, want error %v", tt.config, tt.check, err, tt.wantErr)
			}
		})
	}
	var d Flags
	fs := flag.NewFlagSet("gatekeeper", flag.ContinueOnError)
	d.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if d.Listen != "127.0.0.1:8080" || d.AdminListen != "127.0.0.1:9090" || d.Pod != "default" {
		t.Errorf("default listeners %q %q, pod %q, want 127.0.0.1:8080 and 127.0.0.1:9090, default", d.Listen, d.AdminListen, d.Pod)
	}
}
