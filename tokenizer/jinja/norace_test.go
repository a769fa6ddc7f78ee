//go:build !race

package jinja

const raceEnabled = false
