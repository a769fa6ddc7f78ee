package server

import (
	"net/http"
	"sync"
)

// liveCompletions are the chat completions being generated, by id, for
// POST /v1/chat/completions/control to act on.
type liveCompletions struct {
	mu   sync.Mutex
	byID map[string]liveCompletion
}

// liveCompletion is what a control request may do to a running completion: control says
// the request armed it (reasoning_control), budget ends its reasoning (nil when the model
// writes none).
type liveCompletion struct {
	control bool
	budget  *reasoningBudget
}

// add records a running completion and returns the function that forgets it.
func (l *liveCompletions) add(id string, c liveCompletion) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID == nil {
		l.byID = map[string]liveCompletion{}
	}
	l.byID[id] = c
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.byID, id)
	}
}

func (l *liveCompletions) find(id string) (liveCompletion, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.byID[id]
	return c, ok
}

// controlResult is the control route's answer, llama-server's shape: whether the action
// was taken, and why not when it was not.
type controlResult struct {
	Success bool   `json:"success"`
	Message string `json:"message,omitempty"`
}

// control is llama-server's POST /v1/chat/completions/control: {"id": a running chat
// completion's id (the one its response or stream carries), "action": "reasoning_end"}
// ends that completion's reasoning at its next token (the budget message and the closing
// tag are forced, as when a reasoning budget runs out) if the completion was sent with
// "reasoning_control": true. It is answered at once, beside the running generations: a
// missing id or another action is a 400, a completion that is not running or not armed
// an answer with success false and the reason. "model" (llama-server's router mode) is
// accepted and ignored.
func (s *Server) control(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	var req struct {
		ID     string `json:"id"`
		Action string `json:"action"`
		Model  string `json:"model"`
	}
	if err := decodeBody(r.Body, &req); err != nil {
		return err
	}
	if req.ID == "" {
		return badRequest("id", `"id" (the id of a running chat completion) is required`)
	}
	if req.Action != "reasoning_end" {
		return badRequest("action", `"action" %q is not one this server takes: the one action is "reasoning_end"`, req.Action)
	}
	res := controlResult{Success: true}
	switch c, ok := s.live.find(req.ID); {
	case !ok:
		res = controlResult{Message: "no active completion for this id"}
	case !c.control:
		res = controlResult{Message: "reasoning control not enabled for this completion (send it with \"reasoning_control\": true)"}
	case c.budget == nil:
		res = controlResult{Message: "the model's chat format writes no reasoning block to end"}
	default:
		c.budget.requestEnd()
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
