//go:build !race

package testenv

// RaceEnabled is true when this binary was built with -race.
const RaceEnabled = false
