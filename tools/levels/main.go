// Command levels prints the CPU kernel levels this build of package tensor can run on this
// machine, lowest first (the values MOERUN_ISA takes): make test runs the kernel and golden
// tests once per level.
package main

import (
	"fmt"
	"strings"

	"github.com/moerun/moerun/tensor"
)

func main() {
	var names []string
	for _, l := range tensor.Levels() {
		names = append(names, l.String())
	}
	fmt.Println(strings.Join(names, " "))
}
