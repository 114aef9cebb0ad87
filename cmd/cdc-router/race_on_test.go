//go:build race

package main

// raceEnabled builds the router under test with -race too, when the tests run with -race.
const raceEnabled = true
