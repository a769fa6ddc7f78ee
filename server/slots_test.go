package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// slotReport is what TestSlots reads of GET /slots.
type slotReport struct {
	ID           int   `json:"id"`
	NCtx         int   `json:"n_ctx"`
	IsProcessing bool  `json:"is_processing"`
	IDTask       int64 `json:"id_task"`
	NPrompt      int   `json:"n_prompt_tokens"`
	NProcessed   int   `json:"n_prompt_tokens_processed"`
	NCache       int   `json:"n_prompt_tokens_cache"`
	NextToken    []struct {
		NDecoded int `json:"n_decoded"`
	} `json:"next_token"`
}

func getSlots(t *testing.T, base string, query string) (int, []slotReport) {
	t.Helper()
	resp, err := http.Get(base + "/slots" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var slots []slotReport
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, slots
}

// TestSlots: GET /slots reports each slot as llama-server's does: idle and empty at first,
// the last request's counts after it, busy while a generation runs (when
// fail_on_no_slot=1 answers 503 if none is idle); --no-slots turns it off.
func TestSlots(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.Slots = 1 })
	status, slots := getSlots(t, ts.URL, "")
	if status != http.StatusOK || len(slots) != 1 || slots[0].ID != 0 || slots[0].NCtx != 256 || slots[0].IsProcessing || slots[0].IDTask != 0 {
		t.Fatalf("at first: %d %+v", status, slots)
	}
	prompt := `[1, 2, 3, 4, 5, 6, 7, 8]`
	for range 2 {
		if status, body := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": `+prompt+`, "max_tokens": 4, "temperature": 0}`); status != http.StatusOK {
			t.Fatalf("completion: %d %s", status, body)
		}
	}
	_, slots = getSlots(t, ts.URL, "")
	s := slots[0]
	if s.IsProcessing || s.IDTask != 2 || s.NPrompt != 8 || s.NCache != 7 || s.NProcessed != 1 || len(s.NextToken) != 1 || s.NextToken[0].NDecoded != 4 {
		t.Errorf("after two requests: %+v (want task 2, 8 prompt tokens, 7 cached, 1 processed, 4 decoded)", s)
	}

	// While a stream runs, the only slot is busy.
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "a", "max_tokens": 200, "stream": true, "ignore_eos": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, slots = getSlots(t, ts.URL, ""); !slots[0].IsProcessing {
		t.Errorf("during a stream: %+v", slots[0])
	}
	if status, _ = getSlots(t, ts.URL, "?fail_on_no_slot=1"); status != http.StatusServiceUnavailable {
		t.Errorf("fail_on_no_slot with the slot busy: %d, want 503", status)
	}

	off := newTestServer(t, func(c *Config) { c.NoSlots = true })
	if status, _ = getSlots(t, off.URL, ""); status != http.StatusNotImplemented {
		t.Errorf("--no-slots: %d, want 501", status)
	}
}
