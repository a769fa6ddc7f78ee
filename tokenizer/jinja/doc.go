// Package jinja is a Jinja2 interpreter for chat templates, written for moerun: templates
// come from untrusted model files, so every render runs under budgets (Limits) that a
// template cannot escape, enforced inside the evaluator, where a third-party engine
// offered no hooks.
//
// It renders as Python's Jinja2 3.1 does in Hugging Face's apply_chat_template: an
// immutable sandbox with trim_blocks, lstrip_blocks and the loopcontrols extension,
// {% generation %} rendering its body, tojson as json.dumps(ensure_ascii=False), default
// (not strict) undefined values. The tests compare byte for byte with Python's renders of
// llama.cpp's chat templates, of language cases and of random templates
// (testdata/gen.py).
//
// Not supported, as chat templates do not use them: loading other templates (include,
// import, extends, which the sandbox refuses anyway), integers beyond 64 bits, \N{name}
// escapes, tuples as dict keys, Markup's own string methods, and the globals cycler,
// joiner and lipsum. None|items gives no pairs where Python raises, as llama.cpp does.
package jinja
