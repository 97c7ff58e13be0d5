//go:build race

package deploy

// raceEnabled: the tests run with -race, so the gatekeeper binary they
// build is too (it reuses the race build of the packages the rest of
// `go test -race ./...` compiled, and races in the binary fail its run).
const raceEnabled = true
