package server

import (
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostileTemplate renders ChatML for ordinary conversations, so that it passes the check at
// load, and attacks the server when the first message says so: unbounded recursion,
// exponentially growing strings, a huge loop, a huge repetition, and recursion as deep as
// the request's (JSON-bounded) tool schema.
const hostileTemplate = `{%- set first = messages[0].content -%}
{%- macro forever(n) -%}{{ forever(n + 1) }}{%- endmacro -%}
{%- macro walk(v) -%}{%- if v is mapping -%}{%- for k, x in v.items() -%}{{ walk(x) }}{%- endfor -%}{%- elif v is iterable and v is not string -%}{%- for x in v -%}{{ walk(x) }}{%- endfor -%}{%- endif -%}{%- endmacro -%}
{%- if first == 'recursion' -%}{{ forever(0) }}
{%- elif first == 'strings' -%}{%- set ns = namespace(s='ab') -%}{%- for i in range(64) -%}{%- set ns.s = ns.s ~ ns.s -%}{%- endfor -%}{{ ns.s }}
{%- elif first == 'loop' -%}{%- for i in range(1000000000) -%}{%- endfor -%}
{%- elif first == 'repeat' -%}{{ 'a' * 100000000000 }}
{%- elif first == 'nesting' -%}{{ walk(tools) }}
{%- else -%}{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor -%}{{ '<|im_start|>assistant\n' }}
{%- endif -%}`

// TestHostileTemplates: each attack is answered with an error within 2 s and costs at most
// 256 MB of heap while it runs; between attacks an ordinary request is served and /health
// stays 200 (issue 39).
func TestHostileTemplates(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.ChatTemplate = hostileTemplate })
	deep := strings.Repeat(`{"a": `, 250) + "1" + strings.Repeat("}", 250)
	var m runtime.MemStats
	for _, attack := range []struct{ name, tools string }{
		{"recursion", ""}, {"strings", ""}, {"loop", ""}, {"repeat", ""},
		{"nesting", `, "tools": [{"type": "function", "function": {"name": "f", "parameters": ` + deep + `}}]`},
	} {
		runtime.GC()
		runtime.ReadMemStats(&m)
		base := m.HeapAlloc
		var peak atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() { // the heap's high-water mark while the request runs
			defer close(sampled)
			var s runtime.MemStats
			for {
				runtime.ReadMemStats(&s)
				if s.HeapAlloc > peak.Load() {
					peak.Store(s.HeapAlloc)
				}
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		status, body := call(t, ts, http.MethodPost, "/v1/chat/completions",
			`{"max_tokens": 1, "messages": [{"role": "user", "content": "`+attack.name+`"}]`+attack.tools+`}`)
		took := time.Since(start)
		close(stop)
		<-sampled
		extra := int64(peak.Load()) - int64(base)
		t.Logf("%s: %d in %v, %.1f MB extra heap: %.200s", attack.name, status, took.Round(time.Millisecond), float64(extra)/1e6, body)
		if status < 400 || took > 2*time.Second || extra > 256<<20 {
			t.Errorf("%s: status %d after %v with %.1f MB extra heap, want an error within 2 s and 256 MB", attack.name, status, took, float64(extra)/1e6)
		}
		if status, body := call(t, ts, http.MethodPost, "/v1/chat/completions", `{"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}`); status != http.StatusOK {
			t.Fatalf("after %s, an ordinary request: %d %s", attack.name, status, body)
		}
		if status, _ := call(t, ts, http.MethodGet, "/health", ""); status != http.StatusOK {
			t.Fatalf("after %s, /health: %d", attack.name, status)
		}
	}
}
