package moe

import "github.com/moerun/moerun/tensor"

// The router's arithmetic is a kernel that every device runs (backend.Ops.Route), so it
// lives in tensor; these names keep moe's API, where a model's router is configured.
type (
	Gating       = tensor.Gating
	SER          = tensor.SER
	RouterConfig = tensor.RouterConfig
)

// The gating functions, as GGUF's {arch}.expert_gating_func stores them.
const (
	GatingSoftmax       = tensor.GatingSoftmax
	GatingSigmoid       = tensor.GatingSigmoid
	GatingSoftmaxWeight = tensor.GatingSoftmaxWeight
	GatingSqrtSoftplus  = tensor.GatingSqrtSoftplus
)
