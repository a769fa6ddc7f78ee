package server

import (
	"testing"
	"time"

	"github.com/moerun/moerun/grammar"
	"github.com/moerun/moerun/grammar/jsonschema"
	"github.com/moerun/moerun/moe"
)

// BenchmarkConstrainedDecode is a decode step of the tiny model (its forward pass and the
// sampling after it) with and without a JSON schema's grammar, greedy and sampled; ns/step
// is the figure to compare. Each generation releases its matcher, as the server's do, so
// the next one starts from the transitions computed before (a client sending the same
// schema again); the -cold cases parse the schema's grammar anew for each generation, as
// for a schema the server has not seen.
func BenchmarkConstrainedDecode(b *testing.B) {
	model, vocab := loaded()
	text, err := jsonschema.Convert([]byte(`{"type": "object", "properties": {"ok": {"type": "boolean"},
		"color": {"enum": ["red", "green", "blue"]}, "count": {"type": "integer"}, "name": {"type": "string"}},
		"required": ["ok", "color", "count", "name"]}`))
	if err != nil {
		b.Fatal(err)
	}
	g, err := grammar.Parse(text)
	if err != nil {
		b.Fatal(err)
	}
	texts := newTokenTexts(vocab)
	prompt := vocab.Encode("A record:", true, false)
	for _, c := range []struct {
		name        string
		constrained bool
		cold        bool // a grammar parsed anew for every generation: no transitions from before
		temperature float32
	}{{"free-greedy", false, false, 0}, {"schema-greedy", true, false, 0}, {"schema-greedy-cold", true, true, 0},
		{"free-sampled", false, false, 1}, {"schema-sampled", true, false, 1}, {"schema-sampled-cold", true, true, 1}} {
		b.Run(c.name, func(b *testing.B) {
			ctx, err := model.NewContext(moe.DefaultContextOptions())
			if err != nil {
				b.Fatal(err)
			}
			defer ctx.Close()
			var steps int
			var decoding time.Duration
			timed := &timedConstraint{}
			for b.Loop() {
				ctx.Reset()
				params := moe.DefaultSampler()
				params.Temperature, params.Seed = c.temperature, 1
				sampler, err := moe.NewSampler(params, nil)
				if err != nil {
					b.Fatal(err)
				}
				var gc *grammarConstraint
				if c.constrained {
					g := g
					if c.cold {
						if g, err = grammar.Parse(text); err != nil {
							b.Fatal(err)
						}
					}
					gc = newGrammarConstraint(g, texts, "", "", false, "")
					timed.Constraint = gc
					sampler.Constrain(timed)
				}
				st, err := ctx.Generate(prompt, moe.GenerateOptions{MaxTokens: 48, Sampler: sampler, IsEOG: vocab.IsEOG})
				if err != nil {
					b.Fatal(err)
				}
				if gc != nil {
					gc.m.Release()
				}
				steps += st.DecodeSteps
				decoding += st.DecodeTime
			}
			b.ReportMetric(float64(decoding.Nanoseconds())/float64(steps), "ns/step")
			b.ReportMetric(float64(timed.spent.Nanoseconds())/float64(steps), "grammar-ns/step")
		})
	}
}

// timedConstraint adds up the time a constraint's calls take: the grammar's own share of a
// step, which the step's time shows only through this host's noise (its speed swings by
// half from one minute to the next). The sampler's work on the masked logits is not in it.
type timedConstraint struct {
	moe.Constraint
	spent time.Duration
}

func (c *timedConstraint) Allows(token int32) bool {
	defer c.since(time.Now())
	return c.Constraint.Allows(token)
}

func (c *timedConstraint) Mask(allowed []bool) error {
	defer c.since(time.Now())
	return c.Constraint.Mask(allowed)
}

func (c *timedConstraint) Accept(token int32) error {
	defer c.since(time.Now())
	return c.Constraint.Accept(token)
}

func (c *timedConstraint) since(start time.Time) { c.spent += time.Since(start) }
