package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// runCheck is -check: it loads the policy at path (the embedded default
// when path is ""), writes every error, or else every warning for replicas
// gatekeepers (0: as many as the policy's cluster.replicas says), to
// stderr, one a line naming the file, line and key, and
// returns errReported on errors, errWarned on warnings only (exit 1 and 3).
// A clean policy prints "FILE: ok" on stdout.
func runCheck(path string, replicas int, stdout, stderr io.Writer) error {
	name := displayName(path)
	cfg, err := policy.LoadRunnable(path, pressure.NVMLCompiled)
	if err != nil {
		reportErrors(stderr, name, err)
		return errReported
	}
	ws := cfg.Warnings(replicas)
	for _, w := range ws {
		fmt.Fprintln(stderr, finding(name, w.Line, w.Path, "warning", w.Msg))
	}
	if len(ws) > 0 {
		fmt.Fprintf(stdout, "%s: valid, %s\n", name, count(len(ws), "warning"))
		return errWarned
	}
	fmt.Fprintf(stdout, "%s: ok\n", name)
	return nil
}

// printConfig is -print-config: the effective policy of path (the embedded
// default when path is "") on stdout, every default filled in, as a file
// that -check accepts and that parses back to the same policy. A policy
// that does not load is reported as -check reports it.
func printConfig(path string, stdout, stderr io.Writer) error {
	name := displayName(path)
	cfg, err := policy.Load(path)
	if err != nil {
		reportErrors(stderr, name, err)
		return errReported
	}
	out, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	of := path
	if path == "" {
		of = "the embedded default policy"
	}
	fmt.Fprintf(stdout, "# gatekeeper -print-config: the effective policy of %s, every default filled in.\n", of)
	_, err = stdout.Write(out)
	return err
}

// reportErrors writes each problem of a failed load on its own line,
// naming the file, and a count.
func reportErrors(w io.Writer, name string, err error) {
	ps := problems(err)
	for _, p := range ps {
		var fe *config.FieldError
		if errors.As(p, &fe) {
			fmt.Fprintln(w, finding(name, fe.Line, fe.Path, "error", fe.Msg))
			continue
		}
		// Not about one key: a YAML syntax error, a file that cannot be read.
		fmt.Fprintln(w, finding(name, 0, "", "error", strings.TrimPrefix(p.Error(), "config: ")))
	}
	fmt.Fprintf(w, "%s: invalid, %s\n", name, count(len(ps), "error"))
}

// problems flattens the errors.Join that config's loaders return.
func problems(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, problems(e)...)
	}
	return out
}

// finding is one line of -check: "config.yaml: line 12: upstreams[0].url:
// error: …", without the line or key when there is none.
func finding(name string, line int, path, severity, msg string) string {
	return config.Located(name, line, path, severity+": "+msg)
}

// count writes "1 warning", "2 warnings".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
