package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tokenizer"
)

// tokenizeCmd mirrors llama-tokenize: the same flags and, but for --ids (space-separated
// unless --brackets), the same output.
type tokenizeCmd struct {
	Model          string `short:"m" required:"" help:"GGUF model file (only its metadata is read)."`
	Prompt         string `short:"p" xor:"input" required:"" help:"Text to tokenize."`
	File           string `short:"f" xor:"input" required:"" help:"Read the text to tokenize from this file."`
	IDs            bool   `name:"ids" help:"Print only the ids, space-separated on one line (llama-tokenize prints them as [1, 2, 3]; see --brackets)."`
	Brackets       bool   `help:"With --ids, print the list as llama-tokenize does: [1, 2, 3]."`
	NoBOS          bool   `name:"no-bos" help:"Do not add the BOS token even if the model asks for it."`
	NoParseSpecial bool   `name:"no-parse-special" help:"Treat control-token text such as <|im_start|> as plain text."`
	NoEscape       bool   `name:"no-escape" help:"Do not process escapes (\\n, \\t, \\xHH, …) in the text."`
	ShowCount      bool   `name:"show-count" help:"Print the number of tokens at the end."`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*tokenizeCmd) Help() string {
	return "Example:\n" +
		"\n" +
		"    moerun tokenize -m testdata/models/tiny-qwen3moe.gguf -p \"Hello world\" --ids"
}

func (c *tokenizeCmd) Run(e *env) error {
	v, err := loadVocab(c.Model)
	if err != nil {
		return err
	}
	text := c.Prompt
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return err
		}
		text = string(b)
	}
	if !c.NoEscape {
		text = processEscapes(text)
	}
	ids := v.Encode(text, !c.NoBOS, !c.NoParseSpecial)
	var b strings.Builder
	if c.IDs {
		sep, open, close := " ", "", ""
		if c.Brackets {
			sep, open, close = ", ", "[", "]"
		}
		b.WriteString(open)
		for i, id := range ids {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(strconv.Itoa(int(id)))
		}
		b.WriteString(close + "\n")
	} else {
		for _, id := range ids {
			fmt.Fprintf(&b, "%6d -> '%s'\n", id, v.Piece(id, true))
		}
	}
	if c.ShowCount {
		fmt.Fprintf(&b, "Total number of tokens: %d\n", len(ids))
	}
	_, err = fmt.Fprint(e.stdout, b.String())
	return err
}

// loadVocab reads a model's vocabulary; a file without a usable one is bad input.
func loadVocab(path string) (*tokenizer.Vocab, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := tokenizer.Load(f.Metadata)
	if err != nil {
		return nil, badInput("%s: %v", path, err)
	}
	return v, nil
}

// processEscapes turns \n, \r, \t, \', \", \\ and \xHH into the characters they name, as
// llama.cpp does with prompts unless --no-escape is given. Other backslashes stay.
func processEscapes(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case '\'', '"', '\\':
			b.WriteByte(s[i])
		case 'x':
			if i+2 < len(s) {
				if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
					b.WriteByte(byte(n))
					i += 2
					continue
				}
			}
			b.WriteString(`\x`)
		default:
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
