package main

import "os"

// The whole-layer speed is the one `moerun place --preset qwen3-30b-a3b --gpu 8GiB --ram 64GiB
// -ngl 99 --n-cpu-moe 37 -ctk q8_0 -ctv q8_0 -c 32768 --gpu-model rtx4060-laptop
// --ram-channels 2 --ram-speed 5600 --cpu-threads 8 --predict` prints (docs/guide.md).
func Example() {
	if err := whatIf(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// whole layers (llama.cpp): tg 39.2 tokens/s
	// hottest experts in VRAM:  tg 53.5 tokens/s (+37%), 1523 experts serve 69% of expert reads
	// recommendation: expert-granular
}
