package tlscert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Settings configures a Loader.
type Settings struct {
	// CertFile and KeyFile are the PEM files of the certificate (chain) and
	// its private key. Both are required.
	CertFile, KeyFile string
	// Logger receives one line per rotation: Info when a changed pair
	// loaded, Warn when it did not and the previous one stays. Nil means
	// discard.
	Logger *slog.Logger
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// Loader holds the certificate the files held when last read, and reads
// them again when their modification times or sizes change, checked at most
// once a second (at handshakes: no goroutine, no timer). A pair that fails
// to load, such as a rotation half written, is logged and the previous one
// stays. Create one with New. Safe for concurrent use; must not be copied.
type Loader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	// mu guards the fields below.
	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // modification times and sizes of both files
	checked time.Time
}

// New reads the pair named by s. Empty file names are an error naming the
// field; a file that cannot be read or a pair that does not load returns
// os.Stat's or tls.LoadX509KeyPair's error unchanged (the caller says which
// setting named the files).
func New(s Settings) (*Loader, error) {
	var errs []error
	if s.CertFile == "" {
		errs = append(errs, errors.New("tlscert: Settings.CertFile is empty"))
	}
	if s.KeyFile == "" {
		errs = append(errs, errors.New("tlscert: Settings.KeyFile is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l := &Loader{certFile: s.CertFile, keyFile: s.KeyFile, log: s.Logger, now: s.Now}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.now == nil {
		l.now = time.Now
	}
	stamp, err := l.fileStamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, err
	}
	l.cert, l.stamp, l.checked = &cert, stamp, l.now()
	return l, nil
}

func (l *Loader) fileStamp() (string, error) {
	var b strings.Builder
	for _, f := range []string{l.certFile, l.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return b.String(), nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, re-read
// first when a second has passed since the last look and the files
// changed. It never returns an error.
func (l *Loader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.checked) < time.Second {
		return l.cert, nil
	}
	l.checked = now
	stamp, err := l.fileStamp()
	if err != nil || stamp == l.stamp {
		return l.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
	if err != nil { // a half-written rotation: keep serving the old pair
		l.log.LogAttrs(context.Background(), slog.LevelWarn, "tls certificate reload failed; keeping the previous one",
			slog.String("err", err.Error()))
		return l.cert, nil
	}
	l.cert, l.stamp = &cert, stamp
	l.log.LogAttrs(context.Background(), slog.LevelInfo, "tls certificate reloaded", slog.String("state", "reloaded"))
	return l.cert, nil
}
