// Command streams measures a moerun (or llama-server) server's aggregate decode speed: it
// sends n completions at once, each generating -tokens tokens (greedy, end-of-generation
// ignored), and prints the tokens per second of all of them together, wall clock, and of
// each as the server timed it. docs/benchmarks.md uses it to compare 1 and 4 streams.
//
//	go run ./tools/streams -url http://127.0.0.1:8080 -n 4 -tokens 64
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "the server")
	n := flag.Int("n", 4, "concurrent streams")
	tokens := flag.Int("tokens", 64, "tokens each completion generates")
	flag.Parse()
	if err := run(*url, *n, *tokens); err != nil {
		fmt.Fprintln(os.Stderr, "streams:", err)
		os.Exit(1)
	}
}

// completion is what the driver reads of a response: the usage and llama-server's timings.
type completion struct {
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Timings struct {
		PromptN            int     `json:"prompt_n"`
		PredictedPerSecond float64 `json:"predicted_per_second"`
	} `json:"timings"`
}

func run(url string, n, tokens int) error {
	results := make([]completion, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Distinct prompts, so no slot reuses another's cache.
			body, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("Stream %d: tell me a story about the number %d.", i, 7*i+3),
				"max_tokens": tokens, "temperature": 0, "ignore_eos": true, "cache_prompt": false})
			resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("stream %d: %s", i, resp.Status)
				return
			}
			errs[i] = json.NewDecoder(resp.Body).Decode(&results[i])
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	total, decoding := 0, 0.0
	for i, r := range results {
		if errs[i] != nil {
			return errs[i]
		}
		total += r.Usage.CompletionTokens
		decoding += r.Timings.PredictedPerSecond
		fmt.Printf("stream %d: %d prompt tokens, %d generated, %.2f t/s decoding (server's timing)\n", i, r.Timings.PromptN, r.Usage.CompletionTokens, r.Timings.PredictedPerSecond)
	}
	fmt.Printf("%d streams: %d tokens in %.2f s: %.2f t/s aggregate (wall clock, prompts included), %.2f t/s decoding together\n",
		n, total, wall.Seconds(), float64(total)/wall.Seconds(), decoding)
	return nil
}
