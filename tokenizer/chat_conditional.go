package tokenizer

import (
	"regexp"
	"strings"
)

// gonja parses Jinja's conditional expression (A if C else B) only as the whole of an
// output tag or a set statement, while Jinja allows it anywhere; gpt-oss's template writes
// {{- (tool_call.content_type if tool_call.content_type is defined else "json") + "<|message|>" }}.
// liftConditionals rewrites an output tag whose expression holds one parenthesized
// conditional into the form gonja parses, the conditional over the whole expression:
//
//	{{ E[(A if C else B)] }}  →  {{ E[(A)] if C else E[(B)] }}
//
// which evaluates C once and only the chosen branch, as Jinja does. Tags with more than
// one such conditional, or already conditional as a whole, or spanning lines (the rewrite
// must not move later lines, which parse errors name) are left as they are, and gonja
// reports its parse error.
func liftConditionals(src string) string {
	return outputTag.ReplaceAllStringFunc(src, func(tag string) string {
		m := outputTag.FindStringSubmatch(tag)
		open, body, close := m[1], m[2], m[3]
		if len(topLevelWords(body)) > 0 {
			return tag
		}
		var groups [][2]int // parenthesized groups holding a top-level "if"
		forEachGroup(body, func(start, end int) {
			if len(topLevelWords(body[start+1:end])) > 0 {
				groups = append(groups, [2]int{start, end})
			}
		})
		if len(groups) != 1 {
			return tag
		}
		start, end := groups[0][0], groups[0][1]
		inner := body[start+1 : end]
		words := topLevelWords(inner)
		if len(words) != 2 || !strings.HasPrefix(inner[words[0]:], "if") || !strings.HasPrefix(inner[words[1]:], "else") {
			return tag
		}
		a, c, b := inner[:words[0]], inner[words[0]+len("if"):words[1]], inner[words[1]+len("else"):]
		with := func(branch string) string { return body[:start] + "(" + branch + ")" + body[end+1:] }
		return open + " " + with(a) + " if " + c + " else " + with(b) + " " + close
	})
}

// outputTag matches a one-line output tag {{ … }} with its whitespace control (a "}}"
// inside a string would end it early: rare enough to leave alone).
var outputTag = regexp.MustCompile(`(\{\{[-+]?)(.*?)([-+]?\}\})`)

// topLevelWords finds the positions of the keywords "if" and "else" outside strings and
// brackets in expr.
func topLevelWords(expr string) []int {
	var found []int
	scan(expr, func(i, depth int) {
		if depth != 0 {
			return
		}
		for _, kw := range []string{"if", "else"} {
			if strings.HasPrefix(expr[i:], kw) && isBoundary(expr, i-1) && isBoundary(expr, i+len(kw)) {
				found = append(found, i)
			}
		}
	})
	return found
}

// forEachGroup calls fn with the positions of the opening and closing parenthesis of each
// grouping (not call) parenthesis pair of expr, inner pairs first.
func forEachGroup(expr string, fn func(start, end int)) {
	var open []int // positions of the unclosed parentheses, -1 for a call's
	scan(expr, func(i, _ int) {
		switch expr[i] {
		case '(':
			if isCall(expr, i) {
				open = append(open, -1)
			} else {
				open = append(open, i)
			}
		case ')':
			if len(open) == 0 {
				return // unbalanced: gonja reports it
			}
			start := open[len(open)-1]
			open = open[:len(open)-1]
			if start >= 0 {
				fn(start, i)
			}
		}
	})
}

// scan calls fn for every byte of expr outside string literals, with the bracket depth
// before that byte (closing brackets count at their own depth's level inside).
func scan(expr string, fn func(i, depth int)) {
	depth := 0
	var quote byte
	for i := 0; i < len(expr); i++ {
		ch := expr[i]
		if quote != 0 {
			if ch == '\\' {
				i++
			} else if ch == quote {
				quote = 0
			}
			continue
		}
		switch ch {
		case '"', '\'':
			quote = ch
			continue
		case ')', ']', '}':
			fn(i, depth)
			depth--
			continue
		}
		fn(i, depth)
		if ch == '(' || ch == '[' || ch == '{' {
			depth++
		}
	}
}

// isCall reports whether the parenthesis at i opens a call's arguments: it follows a name,
// a closing bracket or a string.
func isCall(expr string, i int) bool {
	j := i - 1
	for j >= 0 && expr[j] == ' ' {
		j--
	}
	if j < 0 {
		return false
	}
	ch := expr[j]
	if ch == ')' || ch == ']' || ch == '"' || ch == '\'' {
		return true
	}
	if !isNameByte(ch) {
		return false
	}
	k := j
	for k >= 0 && isNameByte(expr[k]) {
		k--
	}
	switch expr[k+1 : j+1] { // keywords before a group are not calls
	case "if", "else", "and", "or", "not", "in", "is":
		return false
	}
	return true
}

func isBoundary(s string, i int) bool { return i < 0 || i >= len(s) || !isNameByte(s[i]) }

func isNameByte(ch byte) bool {
	return ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
}
