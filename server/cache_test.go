package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/tokenizer"
)

// qwen35Loaded is tiny-qwen35moe (Gated DeltaNet layers: a recurrent state) for the
// prompt-cache tests.
var qwen35Loaded = sync.OnceValues(func() (*moe.Model, *tokenizer.Vocab) {
	return loadModel("../testdata/models/tiny-qwen35moe.gguf")
})

// cachedCompletion is what the prompt-cache tests read from a completion.
type cachedCompletion struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Timings struct {
		CacheN  int `json:"cache_n"`
		PromptN int `json:"prompt_n"`
	} `json:"timings"`
}

// TestPromptCache: a slot keeps its KV cache after a request, and the next request
// evaluates only the part of its prompt the cache does not hold, with the answer it gets
// without the cache ("cache_prompt": false). An attention-only model reuses any common
// prefix (the rest of the cache is overwritten); a model with recurrent layers only an
// exact continuation of what the slot evaluated, else it starts again. Usage and timings
// say how many prompt tokens came from the cache, /metrics counts them.
func TestPromptCache(t *testing.T) {
	qm, qv := qwen35Loaded()
	for _, c := range []struct {
		name      string
		edit      func(*Config)
		recurrent bool
	}{
		{"tiny-qwen3moe", nil, false},
		{"tiny-qwen35moe", func(c *Config) { c.Model, c.Vocab = qm, qv }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, func(cfg *Config) {
				cfg.Slots = 1
				if c.edit != nil {
					c.edit(cfg)
				}
			})
			complete := func(prompt []int32, maxTokens int, cache bool) cachedCompletion {
				t.Helper()
				return completeCached(t, ts, prompt, maxTokens, cache)
			}
			first := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
			// One token generated: the slot holds exactly the prompt (the sampled token is
			// not evaluated).
			if r := complete(first, 1, true); r.Usage.PromptTokensDetails.CachedTokens != 0 {
				t.Errorf("first request: %d cached tokens", r.Usage.PromptTokensDetails.CachedTokens)
			}
			longer := append(append([]int32{}, first...), 20, 21, 22)
			got := complete(longer, 6, true)
			want := complete(longer, 6, false)
			if got.Usage.PromptTokensDetails.CachedTokens != len(first) || want.Usage.PromptTokensDetails.CachedTokens != 0 {
				t.Errorf("a continuation: %d cached tokens (want %d), %d with cache_prompt false", got.Usage.PromptTokensDetails.CachedTokens, len(first), want.Usage.PromptTokensDetails.CachedTokens)
			}
			if got.Choices[0].Text != want.Choices[0].Text {
				t.Errorf("a continuation: %q from the cache, %q without", got.Choices[0].Text, want.Choices[0].Text)
			}
			// Prime the slot with longer, then diverge after 5 tokens.
			complete(longer, 1, true)
			diverging := append(append([]int32{}, first[:5]...), 30, 31)
			got = complete(diverging, 6, true)
			want = complete(diverging, 6, false)
			wantCached := 5
			if c.recurrent {
				wantCached = 0 // the state exists only where the slot's tokens end
			}
			if got.Usage.PromptTokensDetails.CachedTokens != wantCached || got.Choices[0].Text != want.Choices[0].Text {
				t.Errorf("a diverging prompt: %d cached tokens (want %d), text %q, without the cache %q", got.Usage.PromptTokensDetails.CachedTokens, wantCached, got.Choices[0].Text, want.Choices[0].Text)
			}
			status, metrics := call(t, ts, http.MethodGet, "/metrics", "")
			if status != http.StatusOK || !regexp.MustCompile(`(?m)^moerun_prompt_tokens_cached_total [1-9]`).Match(metrics) {
				t.Errorf("/metrics: %d, no cached-token counter:\n%s", status, metrics)
			}
		})
	}
}

// completeCached asks ts for a greedy completion of prompt (token ids) and checks that its
// usage and timings agree on the cached tokens.
func completeCached(t *testing.T, ts *httptest.Server, prompt []int32, maxTokens int, cache bool) cachedCompletion {
	t.Helper()
	p, _ := json.Marshal(prompt)
	status, body := call(t, ts, http.MethodPost, "/v1/completions",
		fmt.Sprintf(`{"prompt": %s, "max_tokens": %d, "temperature": 0, "cache_prompt": %t}`, p, maxTokens, cache))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var r cachedCompletion
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Usage.PromptTokensDetails.CachedTokens != r.Timings.CacheN || r.Timings.PromptN+r.Timings.CacheN != r.Usage.PromptTokens {
		t.Errorf("usage %+v and timings %+v disagree", r.Usage, r.Timings)
	}
	return r
}

// TestPromptCacheCheckpoints: on a model with recurrent layers a slot keeps checkpoints of
// the state 4 tokens before each prompt's end, and a prompt that diverges from the slot's
// tokens after that point restarts from the checkpoint, with the answer it gets without the
// cache; with --ctx-checkpoints 0 it starts again from nothing.
func TestPromptCacheCheckpoints(t *testing.T) {
	qm, qv := qwen35Loaded()
	first := make([]int32, 40)
	for i := range first {
		first[i] = int32(1 + i%50)
	}
	// The next turn keeps first's tokens but its last two, as a template that writes the
	// end of the last turn otherwise.
	next := append(append([]int32{}, first[:38]...), 60, 61, 62)
	for _, c := range []struct {
		checkpoints, wantCached int
	}{{0, 36}, {-1, 0}} {
		ts := newTestServer(t, func(cfg *Config) {
			cfg.Slots, cfg.Model, cfg.Vocab, cfg.ContextCheckpoints = 1, qm, qv, c.checkpoints
		})
		completeCached(t, ts, first, 3, true)
		got := completeCached(t, ts, next, 6, true)
		want := completeCached(t, ts, next, 6, false)
		if got.Usage.PromptTokensDetails.CachedTokens != c.wantCached || got.Choices[0].Text != want.Choices[0].Text {
			t.Errorf("--ctx-checkpoints %d: %d cached tokens (want %d), text %q, without the cache %q",
				c.checkpoints, got.Usage.PromptTokensDetails.CachedTokens, c.wantCached, got.Choices[0].Text, want.Choices[0].Text)
		}
	}
}

// TestCheckpointEviction: a slot keeps at most its count of checkpoints, dropping the
// oldest, and a new checkpoint first drops earlier requests' checkpoints within the minimum
// step after the one before them (llama-server's rules).
func TestCheckpointEviction(t *testing.T) {
	qm, _ := qwen35Loaded()
	ctx, err := qm.NewContext(moe.DefaultContextOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	s := &Server{checkpoints: 3, minStep: 10}
	sl := &slot{ctx: ctx}
	take := func(length int, request int64) {
		t.Helper()
		if _, err := ctx.Eval(make([]int32, length-ctx.Len()), false); err != nil {
			t.Fatal(err)
		}
		if err := s.keepCheckpoint(sl, request); err != nil {
			t.Fatal(err)
		}
	}
	lengths := func() (n []int) {
		for _, cp := range sl.checkpoints {
			n = append(n, cp.Len())
		}
		return n
	}
	take(5, 1)
	take(12, 1) // within 10 of 5, but the same request's: kept
	take(30, 2) // request 2 drops request 1's 12 (within 10 after 5)
	if got := lengths(); !slices.Equal(got, []int{5, 30}) {
		t.Fatalf("after the minimum step: %v, want [5 30]", got)
	}
	take(50, 3)
	take(70, 4) // four would be over the count: the oldest goes
	if got := lengths(); !slices.Equal(got, []int{30, 50, 70}) {
		t.Fatalf("after the count: %v, want [30 50 70]", got)
	}
}

// gptOSSLoaded is tiny-gpt-oss (sliding-window layers) for the prompt-cache tests.
var gptOSSLoaded = sync.OnceValues(func() (*moe.Model, *tokenizer.Vocab) {
	return loadModel("../testdata/models/tiny-gpt-oss.gguf")
})

// TestPromptCacheSlidingWindow: gpt-oss's sliding-window layers keep rings of their
// window and a ubatch (256 cells here), which overwrite older positions as a slot goes on.
// A prompt that shares a prefix whose window the rings have overwritten cannot reuse it
// as it stands: the slot restores its checkpoint within the prefix (taken 4 + -ub tokens
// before the last prompt's end) or, with none, evaluates the whole prompt again, as
// llama-server does; with --swa-full the whole prefix is reused. Every way gives the
// answer the prompt gets without the cache.
func TestPromptCacheSlidingWindow(t *testing.T) {
	gm, gv := gptOSSLoaded()
	first := make([]int32, 300)
	for i := range first {
		first[i] = int32(1 + i%50)
	}
	// The next prompt shares first's 270 tokens, whose window (from 143 on) the rings no
	// longer hold once the slot has gone on to about 500 positions.
	next := append(append([]int32{}, first[:270]...), 60, 61, 62)
	for _, c := range []struct {
		name                    string
		swaFull                 bool
		checkpoints, wantCached int
	}{
		{"checkpoints", false, 0, 300 - 4 - 32},
		{"no checkpoints", false, -1, 0},
		{"--swa-full", true, -1, 270},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, func(cfg *Config) {
				cfg.Slots, cfg.Model, cfg.Vocab, cfg.ContextCheckpoints = 1, gm, gv, c.checkpoints
				cfg.Context.Size, cfg.Context.UBatch, cfg.Context.SWAFull = 1024, 32, c.swaFull
			})
			p, _ := json.Marshal(first)
			status, body := call(t, ts, http.MethodPost, "/v1/completions",
				fmt.Sprintf(`{"prompt": %s, "max_tokens": 200, "temperature": 0, "ignore_eos": true}`, p))
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			got := completeCached(t, ts, next, 6, true)
			want := completeCached(t, ts, next, 6, false)
			if got.Usage.PromptTokensDetails.CachedTokens != c.wantCached || got.Choices[0].Text != want.Choices[0].Text {
				t.Errorf("%d cached tokens (want %d), text %q, without the cache %q",
					got.Usage.PromptTokensDetails.CachedTokens, c.wantCached, got.Choices[0].Text, want.Choices[0].Text)
			}
		})
	}
}
