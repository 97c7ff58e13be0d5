package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// uiFiles is the status page: plain HTML, JS and CSS, no build step. It is
// read-only, so a package-level variable is safe (//go:embed needs one).
//
//go:embed ui/index.html ui/app.js ui/style.css ui/favicon.svg
var uiFiles embed.FS

// statusPageCSP allows the page's own files and same-origin fetches
// (/admin/state, /metrics) only: no inline script or style, no remote load,
// no framing.
const statusPageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// StatusPage serves the live status page on the admin listener: /admin
// redirects to /admin/, which serves index.html; /admin/app.js and the other
// embedded assets follow. Mount it at /admin; the page polls /admin/state and
// /metrics, which the admin listener serves beside it.
func StatusPage() http.Handler {
	ui, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic("admin: embedded ui: " + err.Error()) // wiring mistake: the embed pattern names ui/
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/admin" {
			http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/admin/")
		if !ok || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		if _, err := fs.Stat(ui, name); err != nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", statusPageCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, ui, name)
	})
}
