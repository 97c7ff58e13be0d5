//go:build !race

package deploy

// raceEnabled: the tests run without -race; so does the binary they build.
const raceEnabled = false
