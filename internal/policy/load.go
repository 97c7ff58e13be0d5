package policy

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery/inferencepool"
)

// Load reads the policy file, or the embedded default when path is "".
func Load(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.LoadFile(path)
}

// LoadRunnable is Load for a policy this binary is to run (start, reload,
// -check): it also refuses one naming a source the binary was built
// without (UnbuiltSources; nvml is pressure.NVMLCompiled). -print-config
// shows any valid policy.
func LoadRunnable(path string, nvml bool) (*config.Config, error) {
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	if err := unbuiltSources(cfg, nvml); err != nil {
		return nil, err
	}
	return cfg, nil
}

// NVMLNotCompiled is what a policy's nvml source earns in a build without
// the nvml build tag (pressure.ErrNVMLNotCompiled says the same to callers
// of package pressure).
const NVMLNotCompiled = "kind nvml is not compiled into this gatekeeper: use a build with the nvml build tag " +
	"(go build -tags nvml, which needs cgo; the image's nvml variant, docker build --build-arg VARIANT=nvml), " +
	"or read the same GPU memory through the DCGM exporter (kind: dcgm) or the allocator exporter (kind: memory_blocks)"

// unbuiltSources returns an error per source of c that this binary cannot
// read: every nvml source when nvml is false (pressure.NVMLCompiled). The
// policy is valid, so config accepts it (and -print-config shows it);
// LoadRunnable refuses it, so -check, start and reload name the file, line
// and key instead of running with a source that can never answer.
func unbuiltSources(c *config.Config, nvml bool) error {
	if nvml {
		return nil
	}
	var errs []error
	check := func(path string, s config.Source) {
		if s.Kind == config.SourceNVML {
			errs = append(errs, &config.FieldError{Path: path + ".kind", Line: c.Line(path + ".kind"), Msg: NVMLNotCompiled})
		}
	}
	for i, s := range c.Pressure.Sources {
		check(fmt.Sprintf("pressure.sources[%d]", i), s)
	}
	for i, u := range c.Upstreams {
		for j, s := range u.Sources {
			check(fmt.Sprintf("upstreams[%d].sources[%d]", i, j), s)
		}
	}
	return errors.Join(errs...)
}

// loadAdminToken reads server.admin_token_file. An empty path means no
// token; an empty file is an error, so a missing Secret never opens the door.
func loadAdminToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("gatekeeper: server.admin_token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("gatekeeper: server.admin_token_file: %s is empty", path)
	}
	return tok, nil
}

// ownNamespace is gatekeeper's namespace when the policy names a pool
// without one; "" when it needs none. given (tests) wins.
func ownNamespace(c *config.Config, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	for _, u := range c.Upstreams {
		if u.InferencePool != nil && u.InferencePool.Namespace == "" {
			ns, err := inferencepool.OwnNamespace()
			if err != nil {
				return "", fmt.Errorf("gatekeeper: upstreams[%s].inference_pool.namespace is empty and gatekeeper's own namespace is unknown "+
					"(not in a pod, and $POD_NAMESPACE unset): %w", u.Name, err)
			}
			return ns, nil
		}
	}
	return "", nil
}
