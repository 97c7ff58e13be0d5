// Package tlscert serves the traffic listener's TLS certificate and picks up
// a rotated one without a restart: a Loader re-reads the certificate and key
// files when they change (looked at, at most once a second, at handshakes)
// and keeps serving the previous pair when the new one does not load. It is
// tls.Config.GetCertificate; choosing to serve TLS stays with the command.
package tlscert
