package main

import (
	"os"
	"path/filepath"
)

// The ids are those `moerun run -m testdata/models/tiny-qwen3moe.gguf -p Hello -n 8 --temp 0
// --print-ids` prints.
func Example() {
	if err := generate(os.Stdout, filepath.Join("..", "..", "testdata", "models", "tiny-qwen3moe.gguf"), "Hello", 8); err != nil {
		panic(err)
	}
	// Output:
	// 268 "nd"
	// 22 "7"
	// 401 " are"
	// 177 "\xf5"
	// 292 "api"
	// 340 " u"
	// 262 " o"
	// 310 "llo"
}
