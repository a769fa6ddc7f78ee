package main

import "os"

// The numbers are those `moerun place --preset qwen3-30b-a3b --gpu 8GiB --ram 64GiB -ngl 99
// --n-cpu-moe 37 -ctk q8_0 -ctv q8_0 -c 32768` prints (docs/guide.md shows them too).
func Example() {
	if err := plan(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// DEVICE    WEIGHTS         KV   COMPUTE~      TOTAL  FITS
	// CUDA0    4744 MiB   1632 MiB    602 MiB   6979 MiB  true
	// CPU     12947 MiB      0 MiB     40 MiB  12987 MiB  true
}
