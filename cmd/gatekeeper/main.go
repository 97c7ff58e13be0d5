// Command gatekeeper is the ingress in front of vLLM pods: a reverse proxy
// that refuses, queues or slows work before the GPU runs out of memory.
//
//	gatekeeper -config config.yaml      run with a policy file
//	gatekeeper -config config.yaml -check
//	gatekeeper -version
//	gatekeeper -demo [-demo-load]      a simulated vLLM pod behind gatekeeper, on loopback
//
// See README.md for the policy file, endpoints and metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gatekeeper-dev/gatekeeper/memlimit"
	"github.com/redis/go-redis/v9"
)

// version is set at link time (-ldflags "-X main.version=..."); it is never
// written at run time.
var version = "dev"

func main() {
	// go-redis logs through a global logger of its own; its dial failures
	// are what gatekeeper reports once, as a switch to local mode (cluster).
	redis.SetLogger(quietRedis{})
	// GOMEMLIMIT from the container's memory limit, unless the environment
	// sets it (README, Performance tuning).
	memlimit.Set(os.Getenv, os.DirFS("/sys/fs/cgroup"))
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "gatekeeper:", err)
		}
		os.Exit(1)
	}
}

// quietRedis drops go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// errReported means run already printed what went wrong.
var errReported = errors.New("gatekeeper: error already reported")

// flags are the command line.
type flags struct {
	config  string
	check   bool
	version bool
	demo    demoFlags
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("gatekeeper", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "policy file (YAML); empty runs the embedded default (config.yaml)")
	fs.BoolVar(&f.check, "check", false, "validate the policy file and exit: 0 when valid, 1 with every problem listed")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	f.demo.register(fs)
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return f, nil
}
