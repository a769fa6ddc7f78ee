package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// golden is the part of testdata/golden/<model>.golden.json (llama.cpp's outputs for the
// tiny models) that concerns the tokenizer.
type golden struct {
	Prompts []struct {
		Name                   string  `json:"name"`
		Text                   string  `json:"text"`
		TokenIDs               []int32 `json:"token_ids"`
		TokenIDsNoParseSpecial []int32 `json:"token_ids_no_parse_special"`
		Detokenized            string  `json:"detokenized"`
		Greedy                 struct {
			TokenIDs []int32 `json:"token_ids"`
			IsEOG    []bool  `json:"is_eog"`
		} `json:"greedy"`
	} `json:"prompts"`
	ChatTemplateRender struct {
		Messages            []map[string]string `json:"messages"`
		AddGenerationPrompt bool                `json:"add_generation_prompt"`
		Prompt              string              `json:"prompt"`
	} `json:"chat_template_render"`
}

func readGolden(t *testing.T, model string) golden {
	var g golden
	readJSON(t, "testdata/golden/"+model+".golden.json", &g)
	return g
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGoldenTinyModels checks llama-tokenize's ids (special tokens parsed and not, BOS as
// the file says), llama-server's /detokenize text, the EOG flags of the greedy tokens, and
// the EOG sets llama.cpp printed when loading the tiny models.
func TestGoldenTinyModels(t *testing.T) {
	for _, tc := range []struct {
		model string
		eog   []int32
	}{
		{"tiny-qwen3moe", []int32{496, 498}},
		{"tiny-deepseek2", []int32{497, 500, 502}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			v := loadVocab(t, "../testdata/models/"+tc.model+".gguf")
			if got := v.EOG(); !slices.Equal(got, tc.eog) {
				t.Errorf("EOG set %v, want %v", got, tc.eog)
			}
			g := readGolden(t, tc.model)
			for _, p := range g.Prompts {
				if got := v.Encode(p.Text, true, true); !slices.Equal(got, p.TokenIDs) {
					t.Errorf("%s: ids\n got %v\nwant %v", p.Name, got, p.TokenIDs)
				}
				if got := v.Encode(p.Text, true, false); !slices.Equal(got, p.TokenIDsNoParseSpecial) {
					t.Errorf("%s: ids without special parsing\n got %v\nwant %v", p.Name, got, p.TokenIDsNoParseSpecial)
				}
				var pieces strings.Builder
				for _, id := range p.TokenIDs {
					pieces.WriteString(v.Piece(id, true))
				}
				if pieces.String() != p.Detokenized {
					t.Errorf("%s: pieces %q, want %q", p.Name, pieces.String(), p.Detokenized)
				}
				if got := v.Decode(p.TokenIDs, false, true); got != p.Detokenized {
					t.Errorf("%s: Decode %q, want %q", p.Name, got, p.Detokenized)
				}
				for k, id := range p.Greedy.TokenIDs {
					if v.IsEOG(id) != p.Greedy.IsEOG[k] {
						t.Errorf("%s: greedy token %d (%d) EOG %v, want %v", p.Name, k, id, v.IsEOG(id), p.Greedy.IsEOG[k])
					}
				}
			}
		})
	}
}
