// Package grammar implements llama.cpp's GBNF grammars for constrained
// sampling: Parse reads a grammar, a Matcher follows generated text through
// it, and AllowedTokens masks a vocabulary so that only tokens the grammar
// allows next can be sampled.
//
// # Syntax
//
// The syntax is llama.cpp's (grammars/README.md there): rules
// "name ::= alternatives" separated by newlines, alternatives separated by
// "|", sequences of string literals "...", character classes [a-z] and
// [^...], "." for any character, rule names, groups ( ... ) in which
// newlines are allowed, the repetitions *, +, ?, {m}, {m,} and {m,n}, and
// comments from # to the end of the line. Literals and classes take the
// escapes \n \t \r \\ \" \[ \] \xHH \uHHHH and \UHHHHHHHH. Matching starts at
// the rule named root. Repetitions are expanded into copies and helper rules
// exactly as llama.cpp expands them, so rule counts and behaviour agree.
//
// # Matching
//
// Like llama.cpp, a Matcher keeps the set of pushdown stacks of grammar
// positions that the text so far allows, each stack topped by the next
// character class to match. A code point is accepted when some stack's top
// matches it; rule references are expanded eagerly after each code point,
// and duplicate stacks are dropped. Input is bytes: a UTF-8 sequence may be
// split across calls, and a partial sequence is allowed only when some code
// point the grammar allows can complete it. Malformed UTF-8 is refused.
//
// Stack sets are interned as states and transitions between them are cached
// per matcher, so after warming up, following a token or masking a
// vocabulary mostly costs a table lookup per byte. AllowedTokens walks a
// trie of the vocabulary (see Vocab), so a refused prefix rules out every
// token that starts with it at once.
//
// # Limits
//
// Parse refuses, with a *ParseError naming the line and column where there
// is one: text over MaxGrammarBytes (1 MiB), groups nested over MaxNesting
// (256) deep, repetition minimums over MaxRepetition (2000) or nested
// repetitions whose copies multiply to 2000 or more (a maximum over 2000
// means no maximum, as in llama.cpp), grammars that expand to over
// MaxElements (2 Mi) elements, and grammars whose root rule alone breaks the
// matching limits below.
//
// Matching refuses a character, and Matcher.Err reports why, when the
// stacks alive at one position would exceed MaxStacks (32768), when
// expanding rules after one character would visit more than MaxExpansion
// (262144) stacks or MaxExpansionElements (8 Mi) stack elements, or when a
// matcher's cache would exceed 8 Mi cached stack elements or 65536 byte-level
// positions (64 MiB of transitions). Between calls the cache is emptied once
// it holds over 4096 states, 1 Mi stack elements or 8192 byte-level
// positions, so memory stays bounded over long generations. Like llama.cpp,
// the cost of a character grows with the nesting depth of the text, since
// stacks are copied.
//
// # Differences from llama.cpp
//
//   - Token references (<[id]>, <token>, !<...>) are refused: matching is over
//     text only, and lazy grammars with triggers are not implemented.
//   - Empty character classes [] and [^] are refused rather than silently
//     matching the empty string, a maximum repetition below its minimum is
//     refused rather than looping, \U escapes beyond U+10FFFF are refused, and
//     grammar text must be valid UTF-8.
//   - Malformed UTF-8 in generated text is refused (llama.cpp decodes it
//     loosely), and a NUL byte is the code point 0 rather than the end of
//     the text.
//   - A partial UTF-8 sequence is checked against negated classes exactly;
//     llama.cpp refuses it whenever the class excludes any completion.
//   - AcceptBytes checks a trailing partial sequence, as llama.cpp's masking
//     does, and CanEnd is false while one is pending.
//   - Growing past the limits above refuses text, where llama.cpp keeps
//     going (or runs out of memory).
package grammar
