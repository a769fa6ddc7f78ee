package server

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// apiError is an error answered in OpenAI's error JSON, with llama-server's type names so
// that clients written for either recognise it.
type apiError struct {
	Status  int
	Type    string
	Message string
	Param   string // the request field at fault, when there is one
}

func (e *apiError) Error() string { return e.Message }

// Error types, as llama-server names them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeContextSize    = "exceed_context_size_error"
	typeAuthentication = "authentication_error"
	typeNotFound       = "not_found_error"
	typeUnavailable    = "unavailable_error"
	typeServer         = "server_error"
	typeNotSupported   = "not_supported_error"
)

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func internalError(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: err.Error()}
}

// errorBody is {"error": {...}}: message, type and param as OpenAI writes them, code as the
// HTTP status, as llama-server writes it.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.Message, Type: e.Type, Code: e.Status}
	if e.Param != "" {
		d.Param = &e.Param
	}
	return errorBody{d}
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="moerun"`)
	}
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own response types are written: a failure is a bug
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":500}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
