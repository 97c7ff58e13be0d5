package demo

import (
	"errors"
	"flag"
	"fmt"
)

// Flags are gatekeeper's -demo command line flags.
type Flags struct {
	On          bool   // -demo
	Load        bool   // -demo-load (implies -demo)
	Listen      string // -demo-listen
	AdminListen string // -demo-admin-listen
	Pod         string // -demo-pod
}

// Register declares the demo flags on fs.
func (d *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&d.On, "demo", false, "run a simulated vLLM pod (A10G, Llama-3-8B, real time) behind gatekeeper on loopback, with a demo policy; no -config")
	fs.BoolVar(&d.Load, "demo-load", false, "with the demo, send a built-in traffic pattern (2 QPS of mixed chats and long documents, a 4× burst, then a burst of documents only, repeating); implies -demo")
	fs.StringVar(&d.Listen, "demo-listen", "127.0.0.1:8080", "demo traffic `address` (the OpenAI API, /healthz, /readyz)")
	fs.StringVar(&d.AdminListen, "demo-admin-listen", "127.0.0.1:9090", "demo admin `address` (/metrics, /admin/state)")
	usage := "the demo's simulated `pod`:"
	for _, p := range Pods() {
		usage += fmt.Sprintf("\n%s: %s", p.Name, p.About)
	}
	fs.StringVar(&d.Pod, "demo-pod", Default.Name, usage)
}

// Enabled reports whether the command line asks for the demo.
func (d Flags) Enabled() bool { return d.On || d.Load }

// Validate refuses the flags the demo cannot honour: it builds its own
// policy, so a policy file or -check is a mistake; and a pod it does not
// have.
func (d Flags) Validate(config string, check bool) error {
	if config != "" || check {
		return errors.New("gatekeeper: -demo builds its own policy; it takes no -config or -check (use -demo-listen, -demo-admin-listen)")
	}
	if _, err := PodByName(d.Pod); err != nil {
		return fmt.Errorf("gatekeeper: -demo-pod: %w", err)
	}
	return nil
}
