//go:build race

package main

// raceEnabled: the tests run with -race, which slows the replay tenfold;
// the seed sweep then runs in scripts/test.sh's own step without it.
const raceEnabled = true
