// Command gatekeeper is the ingress in front of vLLM pods: a reverse proxy
// that refuses, queues or slows work before the GPU runs out of memory.
//
//	gatekeeper -config config.yaml      run with a policy file
//	gatekeeper -config config.yaml -check [-replicas N]
//	gatekeeper [-config config.yaml] -print-config
//	gatekeeper probe [-kind K] [-timeout D] URL
//	gatekeeper -version
//	gatekeeper -demo [-demo-load]      a simulated vLLM pod behind gatekeeper, on loopback
//	gatekeeper -h                      this usage, the subcommands and every flag
//
// -check lists every error and warning of the policy, one a line naming the
// file, line and key ("config.yaml: line 12: upstreams[0].sources: warning:
// …"); -replicas is how many gatekeepers will run it (unset: as many as
// the policy's cluster.replicas says, 1 without cluster). -print-config writes
// the effective policy, every default filled in, as a file -check accepts.
// probe reads one pressure source once and prints what gatekeeper would
// read from it (the kind is guessed from the answer unless -kind says it;
// -kind nvml reads the local GPUs and takes no URL).
//
// -h (or -help) prints the usage on stdout and exits 0, as does
// `gatekeeper probe -h` for probe's; a flag gatekeeper does not know prints
// it on stderr and exits 1.
//
// Exit status: 0 done (a -check without findings, -h); 1 an error (a policy
// that does not validate, a source that did not answer, a bad command
// line); 3 a -check with warnings but no error. (Not 2: Go's runtime exits
// 2 on a panic, and a warning must not read as a crash. Go's flag package
// exits 2 on a bad flag only when a FlagSet is built with ExitOnError;
// gatekeeper's return their error to main.)
//
// See README.md for the policy file, endpoints and metrics.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gatekeeper-dev/gatekeeper/internal/gcfloor"
	"github.com/gatekeeper-dev/gatekeeper/internal/memlimit"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure/probe"
	"github.com/gatekeeper-dev/gatekeeper/sim/demo"
	"github.com/redis/go-redis/v9"
)

// version is set at link time (-ldflags "-X main.version=..."); it is never
// written at run time.
var version = "dev"

func main() {
	// go-redis logs through a global logger of its own; its dial failures
	// are what gatekeeper reports once, as a switch to local mode (cluster).
	redis.SetLogger(quietRedis{})
	// GOMEMLIMIT from the container's memory limit and a floor under the
	// GC's heap goal, unless the environment sets them (docs/operations.md).
	memlimit.Set(os.Getenv, os.DirFS("/sys/fs/cgroup"))
	gcfloor.Start(os.Getenv)
	err := command(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errReported) && !errors.Is(err, errWarned) {
		fmt.Fprintln(os.Stderr, "gatekeeper:", err)
	}
	os.Exit(exitCode(err))
}

// The exit statuses (the package comment lists them).
const (
	exitOK       = 0
	exitError    = 1
	exitWarnings = 3 // not 2: Go's runtime exits 2 on a panic
)

// exitCode is the exit status for command's error.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errWarned):
		return exitWarnings
	}
	return exitError
}

// subcommand is a command gatekeeper runs when its first argument names it.
type subcommand struct {
	name    string
	summary string // one line, for the usage
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// subcommands are every subcommand command dispatches; the usage lists
// them all.
var subcommands = []subcommand{
	{name: "probe", summary: "read one pressure source once and print each signal gatekeeper reads from it (gatekeeper probe -h)",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return probe.Command(ctx, args, stdout, stderr, parse) // with the command's flag parsing
		}},
}

// command is main without the exit: a subcommand, or the flags parsed once
// and dispatched to what they ask for; serving is run's.
func command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		for _, s := range subcommands {
			if args[0] == s.name {
				return s.run(ctx, args[1:], stdout, stderr)
			}
		}
	}
	f, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	switch {
	case f.version:
		fmt.Fprintln(stdout, "gatekeeper", version)
		return nil
	case f.demo.Enabled():
		if err := f.demo.Validate(f.config, f.check); err != nil {
			return err
		}
		return runDemo(ctx, f.demo, stdout, stderr)
	case f.check:
		return runCheck(f.config, f.replicas, stdout, stderr)
	case f.printConfig:
		return printConfig(f.config, stdout, stderr)
	}
	return run(ctx, f.config, stderr)
}

// quietRedis drops go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// errReported means what went wrong is already printed (run, -check).
var errReported = errors.New("gatekeeper: error already reported")

// errWarned means -check printed warnings and no error.
var errWarned = errors.New("gatekeeper: warnings reported")

// flags are the command line.
type flags struct {
	config      string
	check       bool
	replicas    int // -check: the gatekeepers that will run the policy; 0: not given
	printConfig bool
	version     bool
	demo        demo.Flags
}

func parseFlags(args []string, stdout, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("gatekeeper", flag.ContinueOnError)
	fs.Usage = func() { usage(fs) }
	fs.StringVar(&f.config, "config", "", "policy file (YAML); empty runs the embedded default (config.yaml)")
	fs.BoolVar(&f.check, "check", false, "validate the policy file, list every error and warning and exit: 0 clean, 1 errors, 3 warnings only")
	fs.IntVar(&f.replicas, "replicas", 0, "with -check: how many gatekeeper replicas will run the policy (warns when they do not share limits through cluster, or cluster.replicas differs); unset: as many as cluster.replicas says, else 1")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective policy, every default filled in, as YAML and exit")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	f.demo.Register(fs)
	if err := parse(fs, args, stdout, stderr); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	replicasSet := false
	fs.Visit(func(fl *flag.Flag) { replicasSet = replicasSet || fl.Name == "replicas" })
	switch {
	case replicasSet && !f.check:
		return f, errors.New("-replicas goes with -check")
	case replicasSet && f.replicas < 1:
		return f, fmt.Errorf("-replicas must be at least 1, got %d", f.replicas)
	case f.printConfig && f.check:
		return f, errors.New("-check and -print-config: choose one")
	case f.printConfig && f.demo.Enabled():
		return f, errors.New("-demo builds its own policy; it takes no -print-config")
	}
	return f, nil
}

// usage is gatekeeper's usage: how it is run, its subcommands and its
// flags, written to fs's output.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: gatekeeper [-config FILE]                 serve (no -config: the embedded default policy)
       gatekeeper [-config FILE] -check [-replicas N]
       gatekeeper [-config FILE] -print-config
       gatekeeper -demo [-demo-load] [-demo-pod POD]
       gatekeeper -version
       gatekeeper SUBCOMMAND [flags] [args]

Subcommands:
`)
	for _, s := range subcommands {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.summary)
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.PrintDefaults()
}

// parse parses args with fs. The flag package writes the usage -h asks for
// and a bad flag's complaint (then the usage) to one output: parse sends
// the first to stdout, as asked for, and the second to stderr.
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	defer fs.SetOutput(stderr)
	err := fs.Parse(args)
	w := stderr
	if errors.Is(err, flag.ErrHelp) {
		w = stdout
	}
	if _, werr := w.Write(out.Bytes()); werr != nil && err == nil {
		return werr
	}
	return err
}
