package jinja

// The syntax tree. Expressions evaluate to values (value.go); statements write output.

type expr interface {
	eval(r *renderer) (any, error)
}

type stmt interface {
	exec(r *renderer, out *output) error
}

type (
	constExpr struct{ v any }
	nameExpr  struct{ name string }
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, values []expr }
	attrExpr  struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct {
		obj               expr
		start, stop, step expr // nil when left out
	}
	callExpr struct {
		fn   expr
		args callArgs
	}
	filterExpr struct {
		arg  expr // nil in a filter block's chain: the block's output
		name string
		args callArgs
	}
	testExpr struct {
		arg  expr
		name string
		args callArgs
	}
	notExpr struct{ x expr }
	negExpr struct {
		x      expr
		negate bool // false: unary plus
	}
	binaryExpr struct {
		op   string // + - * / // % ** ~
		l, r expr
	}
	andExpr     struct{ l, r expr }
	orExpr      struct{ l, r expr }
	compareExpr struct {
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	condExpr struct{ cond, yes, no expr } // no is nil without else
)

// callArgs are a call's arguments as written.
type callArgs struct {
	pos   []expr
	kw    []string
	kwv   []expr
	star  expr // *args
	dstar expr // **kwargs
}

type (
	textStmt  struct{ text string }
	printStmt struct {
		x    expr
		line int
	}
	ifStmt struct {
		conds  []expr
		bodies [][]stmt
		els    []stmt
		line   int
	}
	forStmt struct {
		targets   []string // one name, or several to unpack
		iter      expr
		filter    expr // the loop's if clause, or nil
		body, els []stmt
		recursive bool
		line      int
	}
	setStmt struct {
		targets []string
		attr    string // set ns.attr = …: targets holds ns
		value   expr
		line    int
	}
	setBlockStmt struct {
		target  string
		filters []*filterExpr
		body    []stmt
		line    int
	}
	macroStmt struct {
		m    *macroDef
		line int
	}
	callBlockStmt struct {
		call   *callExpr
		caller *macroDef
		line   int
	}
	filterBlockStmt struct {
		filters []*filterExpr
		body    []stmt
		line    int
	}
	withStmt struct {
		targets []string
		values  []expr
		body    []stmt
		line    int
	}
	// blockStmt renders its body in place: {% generation %} and {% block %}.
	blockStmt    struct{ body []stmt }
	breakStmt    struct{ line int }
	continueStmt struct{ line int }
)

// macroDef is a macro's definition, or a call block's body as the caller macro.
type macroDef struct {
	name     string
	params   []string
	defaults []expr // aligned with the last parameters
	body     []stmt
	// What the body reads: Jinja gives a macro varargs, kwargs and caller only when its
	// body names them, and refuses extra arguments otherwise.
	usesVarargs, usesKwargs, usesCaller bool
}
