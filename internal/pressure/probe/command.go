package probe

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// flags are the command line of `gatekeeper probe`.
type flags struct {
	url     string
	kind    string
	timeout time.Duration
}

// parseFlags reads probe's arguments: one URL, and flags before or
// after it (`gatekeeper probe URL -kind dcgm` as well).
func parseFlags(args []string, stdout, stderr io.Writer, parse Parse) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("gatekeeper probe", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gatekeeper probe [-kind K] [-timeout D] URL\n\nRead one pressure source once and print each signal gatekeeper reads from it.")
		fs.PrintDefaults()
	}
	fs.StringVar(&f.kind, "kind", "", "vllm, dcgm, memory_blocks or nvml (local GPUs, no URL); empty: guessed from the answer (JSON: memory_blocks; DCGM_FI_DEV_ series: dcgm; vllm: series: vllm)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "bound on the whole read")
	var urls []string
	for {
		if err := parse(fs, args, stdout, stderr); err != nil {
			return f, err
		}
		if fs.NArg() == 0 {
			break
		}
		urls, args = append(urls, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(urls) > 1:
		return f, fmt.Errorf("probe: unexpected argument %q: one URL at a time", urls[1])
	case len(urls) == 0 && f.kind != string(pressure.KindNVML):
		return f, errors.New("probe: which source? gatekeeper probe [-kind K] URL (or -kind nvml)")
	case f.timeout <= 0:
		return f, fmt.Errorf("probe: -timeout must be positive, got %v", f.timeout)
	}
	if len(urls) == 1 {
		f.url = urls[0]
	}
	return f, nil
}

// Parse parses args with fs, sending the usage -h asks for to stdout and a
// bad flag's complaint to stderr (the command's own flag parsing).
type Parse func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error

// Command is `gatekeeper probe`: one read of one source, printed as a
// table on stdout; an error names the URL and what was wrong.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, parse Parse) error {
	f, err := parseFlags(args, stdout, stderr, parse)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	r, err := Read(ctx, Settings{URL: f.url, Kind: pressure.Kind(f.kind)})
	if err != nil {
		return err
	}
	return r.writeTable(stdout)
}
