package main

import (
	"path/filepath"
	"reflect"
	"strings"
)

// llama.cpp's command-line flags. Users paste llama-server command lines, with llama.cpp's
// multi-letter single-dash flags (-ngl 99, -ot, -ncmoe), long aliases (--gpu-layers) and
// underscore spellings (--n_gpu_layers); kong knows only one-rune short flags. So before
// kong parses, rewriteLlamaArgs turns every such spelling into the option's canonical long
// name — the last "--" spelling llama.cpp lists, e.g. --n-gpu-layers — joined with its
// value (--n-gpu-layers=99), which also lets values start with '-' (-ngl -1) as llama.cpp
// allows. Commands that accept a whole llama-server command line (place) get the options
// they do not use packed into --llama-ignored, so they can report them.

// llamaOption is one option of llama-server (common/arg.cpp at 3f545bec): its spellings, the
// spellings that negate a boolean, how many values follow it, and its environment variable.
type llamaOption struct {
	names  []string
	negs   []string
	values int
	env    string
}

// canonical is the spelling kong knows: the last long one.
func canonical(spellings []string) string {
	for i := len(spellings) - 1; i >= 0; i-- {
		if strings.HasPrefix(spellings[i], "--") {
			return spellings[i]
		}
	}
	return spellings[0]
}

// key names the option in tables: its canonical positive spelling without dashes.
func (o *llamaOption) key() string { return strings.TrimPrefix(canonical(o.names), "--") }

// llamaServerOptions is every option llama-server accepts, in llama.cpp's definition order
// (which is also the order it reads LLAMA_ARG_* environment variables in), without -h and
// --version, which kong handles; then ik_llama.cpp options that users paste, and llama-cli's
// prompt and conversation options, which guides write beside the placement flags.
var llamaServerOptions = []llamaOption{
	{[]string{"-cl", "--cache-list"}, nil, 0, ""},
	{[]string{"--completion-bash"}, nil, 0, ""},
	{[]string{"-t", "--threads"}, nil, 1, "LLAMA_ARG_THREADS"},
	{[]string{"-tb", "--threads-batch"}, nil, 1, ""},
	{[]string{"-C", "--cpu-mask"}, nil, 1, ""},
	{[]string{"-Cr", "--cpu-range"}, nil, 1, ""},
	{[]string{"--cpu-strict"}, nil, 1, ""},
	{[]string{"--prio"}, nil, 1, ""},
	{[]string{"--poll"}, nil, 1, ""},
	{[]string{"-Cb", "--cpu-mask-batch"}, nil, 1, ""},
	{[]string{"-Crb", "--cpu-range-batch"}, nil, 1, ""},
	{[]string{"--cpu-strict-batch"}, nil, 1, ""},
	{[]string{"--prio-batch"}, nil, 1, ""},
	{[]string{"--poll-batch"}, nil, 1, ""},
	{[]string{"-lcs", "--lookup-cache-static"}, nil, 1, ""},
	{[]string{"-lcd", "--lookup-cache-dynamic"}, nil, 1, ""},
	{[]string{"-c", "--ctx-size"}, nil, 1, "LLAMA_ARG_CTX_SIZE"},
	{[]string{"-n", "--predict", "--n-predict"}, nil, 1, "LLAMA_ARG_N_PREDICT"},
	{[]string{"-b", "--batch-size"}, nil, 1, "LLAMA_ARG_BATCH"},
	{[]string{"-ub", "--ubatch-size"}, nil, 1, "LLAMA_ARG_UBATCH"},
	{[]string{"--keep"}, nil, 1, ""},
	{[]string{"--swa-full"}, nil, 0, "LLAMA_ARG_SWA_FULL"},
	{[]string{"-ctxcp", "--swa-checkpoints", "--ctx-checkpoints"}, nil, 1, "LLAMA_ARG_CTX_CHECKPOINTS"}, // llama.cpp lists --ctx-checkpoints first; the last long spelling names the option
	{[]string{"-cms", "--checkpoint-min-step"}, nil, 1, "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT"},
	{[]string{"-cram", "--cache-ram"}, nil, 1, "LLAMA_ARG_CACHE_RAM"},
	{[]string{"-kvu", "--kv-unified"}, []string{"-no-kvu", "--no-kv-unified"}, 0, "LLAMA_ARG_KV_UNIFIED"},
	{[]string{"--cache-idle-slots"}, []string{"--no-cache-idle-slots"}, 0, "LLAMA_ARG_CACHE_IDLE_SLOTS"},
	{[]string{"--context-shift"}, []string{"--no-context-shift"}, 0, "LLAMA_ARG_CONTEXT_SHIFT"},
	{[]string{"-fa", "--flash-attn"}, nil, 1, "LLAMA_ARG_FLASH_ATTN"},
	{[]string{"--perf"}, []string{"--no-perf"}, 0, "LLAMA_ARG_PERF"},
	{[]string{"-e", "--escape"}, []string{"--no-escape"}, 0, ""},
	{[]string{"-r", "--reverse-prompt"}, nil, 1, ""},
	{[]string{"-sp", "--special"}, nil, 0, ""},
	{[]string{"--warmup"}, []string{"--no-warmup"}, 0, ""},
	{[]string{"--spm-infill"}, nil, 0, ""},
	{[]string{"--samplers"}, nil, 1, ""},
	{[]string{"-s", "--seed"}, nil, 1, ""},
	{[]string{"--sampler-seq", "--sampling-seq"}, nil, 1, ""},
	{[]string{"--ignore-eos"}, nil, 0, ""},
	{[]string{"--temp", "--temperature"}, nil, 1, ""},
	{[]string{"--top-k"}, nil, 1, "LLAMA_ARG_TOP_K"},
	{[]string{"--top-p"}, nil, 1, ""},
	{[]string{"--min-p"}, nil, 1, ""},
	{[]string{"--top-nsigma", "--top-n-sigma"}, nil, 1, ""},
	{[]string{"--xtc-probability"}, nil, 1, ""},
	{[]string{"--xtc-threshold"}, nil, 1, ""},
	{[]string{"--typical", "--typical-p"}, nil, 1, ""},
	{[]string{"--repeat-last-n"}, nil, 1, ""},
	{[]string{"--repeat-penalty"}, nil, 1, ""},
	{[]string{"--presence-penalty"}, nil, 1, ""},
	{[]string{"--frequency-penalty"}, nil, 1, ""},
	{[]string{"--dry-multiplier"}, nil, 1, ""},
	{[]string{"--dry-base"}, nil, 1, ""},
	{[]string{"--dry-allowed-length"}, nil, 1, ""},
	{[]string{"--dry-penalty-last-n"}, nil, 1, ""},
	{[]string{"--dry-sequence-breaker"}, nil, 1, ""},
	{[]string{"--adaptive-target"}, nil, 1, ""},
	{[]string{"--adaptive-decay"}, nil, 1, ""},
	{[]string{"--dynatemp-range"}, nil, 1, ""},
	{[]string{"--dynatemp-exp"}, nil, 1, ""},
	{[]string{"--mirostat"}, nil, 1, ""},
	{[]string{"--mirostat-lr"}, nil, 1, ""},
	{[]string{"--mirostat-ent"}, nil, 1, ""},
	{[]string{"-l", "--logit-bias"}, nil, 1, ""},
	{[]string{"--grammar"}, nil, 1, ""},
	{[]string{"--grammar-file"}, nil, 1, ""},
	{[]string{"-j", "--json-schema"}, nil, 1, ""},
	{[]string{"-jf", "--json-schema-file"}, nil, 1, ""},
	{[]string{"-bs", "--backend-sampling"}, nil, 0, "LLAMA_ARG_BACKEND_SAMPLING"},
	{[]string{"--pooling"}, nil, 1, "LLAMA_ARG_POOLING"},
	{[]string{"--rope-scaling"}, nil, 1, "LLAMA_ARG_ROPE_SCALING_TYPE"},
	{[]string{"--rope-scale"}, nil, 1, "LLAMA_ARG_ROPE_SCALE"},
	{[]string{"--rope-freq-base"}, nil, 1, "LLAMA_ARG_ROPE_FREQ_BASE"},
	{[]string{"--rope-freq-scale"}, nil, 1, "LLAMA_ARG_ROPE_FREQ_SCALE"},
	{[]string{"--yarn-orig-ctx"}, nil, 1, "LLAMA_ARG_YARN_ORIG_CTX"},
	{[]string{"--yarn-ext-factor"}, nil, 1, "LLAMA_ARG_YARN_EXT_FACTOR"},
	{[]string{"--yarn-attn-factor"}, nil, 1, "LLAMA_ARG_YARN_ATTN_FACTOR"},
	{[]string{"--yarn-beta-slow"}, nil, 1, "LLAMA_ARG_YARN_BETA_SLOW"},
	{[]string{"--yarn-beta-fast"}, nil, 1, "LLAMA_ARG_YARN_BETA_FAST"},
	{[]string{"-kvo", "--kv-offload"}, []string{"-nkvo", "--no-kv-offload"}, 0, "LLAMA_ARG_KV_OFFLOAD"},
	{[]string{"--repack"}, []string{"-nr", "--no-repack"}, 0, "LLAMA_ARG_REPACK"},
	{[]string{"--no-host"}, nil, 0, "LLAMA_ARG_NO_HOST"},
	{[]string{"-ctk", "--cache-type-k"}, nil, 1, "LLAMA_ARG_CACHE_TYPE_K"},
	{[]string{"-ctv", "--cache-type-v"}, nil, 1, "LLAMA_ARG_CACHE_TYPE_V"},
	{[]string{"-dt", "--defrag-thold"}, nil, 1, "LLAMA_ARG_DEFRAG_THOLD"},
	{[]string{"-np", "--parallel"}, nil, 1, "LLAMA_ARG_N_PARALLEL"},
	{[]string{"-cb", "--cont-batching"}, []string{"-nocb", "--no-cont-batching"}, 0, "LLAMA_ARG_CONT_BATCHING"},
	{[]string{"-mm", "--mmproj"}, nil, 1, "LLAMA_ARG_MMPROJ"},
	{[]string{"-mmu", "--mmproj-url"}, nil, 1, "LLAMA_ARG_MMPROJ_URL"},
	{[]string{"--mmproj-auto"}, []string{"--no-mmproj", "--no-mmproj-auto"}, 0, "LLAMA_ARG_MMPROJ_AUTO"},
	{[]string{"--mmproj-offload"}, []string{"--no-mmproj-offload"}, 0, "LLAMA_ARG_MMPROJ_OFFLOAD"},
	{[]string{"-mmdev", "--mmproj-device"}, nil, 1, "MTMD_BACKEND_DEVICE"},
	{[]string{"--image-min-tokens"}, nil, 1, "LLAMA_ARG_IMAGE_MIN_TOKENS"},
	{[]string{"--image-max-tokens"}, nil, 1, "LLAMA_ARG_IMAGE_MAX_TOKENS"},
	{[]string{"--mtmd-batch-max-tokens"}, nil, 1, "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS"},
	{[]string{"--rpc"}, nil, 1, "LLAMA_ARG_RPC"},
	{[]string{"--mlock"}, nil, 0, "LLAMA_ARG_MLOCK"},
	{[]string{"--mmap"}, []string{"--no-mmap"}, 0, "LLAMA_ARG_MMAP"},
	{[]string{"-dio", "--direct-io"}, []string{"-ndio", "--no-direct-io"}, 0, "LLAMA_ARG_DIO"},
	{[]string{"-lm", "--load-mode"}, nil, 1, "LLAMA_ARG_LOAD_MODE"},
	{[]string{"--numa"}, nil, 1, "LLAMA_ARG_NUMA"},
	{[]string{"-dev", "--device"}, nil, 1, "LLAMA_ARG_DEVICE"},
	{[]string{"--list-devices"}, nil, 0, ""},
	{[]string{"-ot", "--override-tensor"}, nil, 1, "LLAMA_ARG_OVERRIDE_TENSOR"},
	{[]string{"-cmoe", "--cpu-moe"}, nil, 0, "LLAMA_ARG_CPU_MOE"},
	{[]string{"-ncmoe", "--n-cpu-moe"}, nil, 1, "LLAMA_ARG_N_CPU_MOE"},
	{[]string{"-ngl", "--gpu-layers", "--n-gpu-layers"}, nil, 1, "LLAMA_ARG_N_GPU_LAYERS"},
	{[]string{"-sm", "--split-mode"}, nil, 1, "LLAMA_ARG_SPLIT_MODE"},
	{[]string{"-ts", "--tensor-split"}, nil, 1, "LLAMA_ARG_TENSOR_SPLIT"},
	{[]string{"-mg", "--main-gpu"}, nil, 1, "LLAMA_ARG_MAIN_GPU"},
	{[]string{"-fit", "--fit"}, nil, 1, "LLAMA_ARG_FIT"},
	{[]string{"-fitt", "--fit-target"}, nil, 1, "LLAMA_ARG_FIT_TARGET"},
	{[]string{"-fitc", "--fit-ctx"}, nil, 1, "LLAMA_ARG_FIT_CTX"},
	{[]string{"--check-tensors"}, nil, 0, ""},
	{[]string{"--override-kv"}, nil, 1, ""},
	{[]string{"--op-offload"}, []string{"--no-op-offload"}, 0, ""},
	{[]string{"--lora"}, nil, 1, ""},
	{[]string{"--lora-scaled"}, nil, 1, ""},
	{[]string{"--control-vector"}, nil, 1, ""},
	{[]string{"--control-vector-scaled"}, nil, 1, ""},
	{[]string{"--control-vector-layer-range"}, nil, 2, ""},
	{[]string{"-a", "--alias"}, nil, 1, "LLAMA_ARG_ALIAS"},
	{[]string{"--tags"}, nil, 1, "LLAMA_ARG_TAGS"},
	{[]string{"-m", "--model"}, nil, 1, "LLAMA_ARG_MODEL"},
	{[]string{"-mu", "--model-url"}, nil, 1, "LLAMA_ARG_MODEL_URL"},
	{[]string{"-dr", "--docker-repo"}, nil, 1, "LLAMA_ARG_DOCKER_REPO"},
	{[]string{"-hf", "-hfr", "--hf-repo"}, nil, 1, "LLAMA_ARG_HF_REPO"},
	{[]string{"-hff", "--hf-file"}, nil, 1, "LLAMA_ARG_HF_FILE"},
	{[]string{"-hft", "--hf-token"}, nil, 1, "HF_TOKEN"},
	{[]string{"--embd-normalize"}, nil, 1, ""},
	{[]string{"--host"}, nil, 1, "LLAMA_ARG_HOST"},
	{[]string{"--port"}, nil, 1, "LLAMA_ARG_PORT"},
	{[]string{"--reuse-port"}, nil, 0, "LLAMA_ARG_REUSE_PORT"},
	{[]string{"--path"}, nil, 1, "LLAMA_ARG_STATIC_PATH"},
	{[]string{"--cors-origins"}, nil, 1, "LLAMA_ARG_CORS_ORIGINS"},
	{[]string{"--cors-methods"}, nil, 1, "LLAMA_ARG_CORS_METHODS"},
	{[]string{"--cors-headers"}, nil, 1, "LLAMA_ARG_CORS_HEADERS"},
	{[]string{"--cors-credentials"}, []string{"--no-cors-credentials"}, 0, "LLAMA_ARG_CORS_CREDENTIALS"},
	{[]string{"--api-prefix"}, nil, 1, "LLAMA_ARG_API_PREFIX"},
	{[]string{"--ui-config", "--webui-config"}, nil, 1, "LLAMA_ARG_UI_CONFIG"},
	{[]string{"--ui-config-file", "--webui-config-file"}, nil, 1, "LLAMA_ARG_UI_CONFIG_FILE"},
	{[]string{"--ui-mcp-proxy", "--webui-mcp-proxy"}, []string{"--no-ui-mcp-proxy", "--no-webui-mcp-proxy"}, 0, "LLAMA_ARG_UI_MCP_PROXY"},
	{[]string{"--tools"}, nil, 1, "LLAMA_ARG_TOOLS"},
	{[]string{"--tools-runtime"}, nil, 1, "LLAMA_ARG_TOOLS_RUNTIME"},
	{[]string{"--mcp-servers-config"}, nil, 1, "LLAMA_ARG_MCP_SERVERS_CONFIG"},
	{[]string{"--mcp-servers-json"}, nil, 1, "LLAMA_ARG_MCP_SERVERS_JSON"},
	{[]string{"-ag", "--agent"}, []string{"-no-ag", "--no-agent"}, 0, "LLAMA_ARG_AGENT"},
	{[]string{"--ui", "--webui"}, []string{"--no-ui", "--no-webui"}, 0, "LLAMA_ARG_UI"},
	{[]string{"--embedding", "--embeddings"}, nil, 0, "LLAMA_ARG_EMBEDDINGS"},
	{[]string{"--rerank", "--reranking"}, nil, 0, "LLAMA_ARG_RERANKING"},
	{[]string{"--api-key"}, nil, 1, "LLAMA_API_KEY"},
	{[]string{"--api-key-file"}, nil, 1, "LLAMA_ARG_API_KEY_FILE"},
	{[]string{"--ssl-key-file"}, nil, 1, "LLAMA_ARG_SSL_KEY_FILE"},
	{[]string{"--ssl-cert-file"}, nil, 1, "LLAMA_ARG_SSL_CERT_FILE"},
	{[]string{"--chat-template-kwargs"}, nil, 1, "LLAMA_ARG_CHAT_TEMPLATE_KWARGS"},
	{[]string{"-to", "--timeout"}, nil, 1, "LLAMA_ARG_TIMEOUT"},
	{[]string{"--sse-ping-interval"}, nil, 1, "LLAMA_ARG_SSE_PING_INTERVAL"},
	{[]string{"--threads-http"}, nil, 1, "LLAMA_ARG_THREADS_HTTP"},
	{[]string{"--cache-prompt"}, []string{"--no-cache-prompt"}, 0, "LLAMA_ARG_CACHE_PROMPT"},
	{[]string{"--cache-reuse"}, nil, 1, "LLAMA_ARG_CACHE_REUSE"},
	{[]string{"--metrics"}, nil, 0, "LLAMA_ARG_ENDPOINT_METRICS"},
	{[]string{"--props"}, nil, 0, "LLAMA_ARG_ENDPOINT_PROPS"},
	{[]string{"--slots"}, []string{"--no-slots"}, 0, "LLAMA_ARG_ENDPOINT_SLOTS"},
	{[]string{"--slot-save-path"}, nil, 1, ""},
	{[]string{"--media-path"}, nil, 1, ""},
	{[]string{"--models-dir"}, nil, 1, "LLAMA_ARG_MODELS_DIR"},
	{[]string{"--models-preset"}, nil, 1, "LLAMA_ARG_MODELS_PRESET"},
	{[]string{"--models-max"}, nil, 1, "LLAMA_ARG_MODELS_MAX"},
	{[]string{"--models-autoload"}, []string{"--no-models-autoload"}, 0, "LLAMA_ARG_MODELS_AUTOLOAD"},
	{[]string{"--jinja"}, []string{"--no-jinja"}, 0, "LLAMA_ARG_JINJA"},
	{[]string{"--reasoning-format"}, nil, 1, "LLAMA_ARG_THINK"},
	{[]string{"-rea", "--reasoning"}, nil, 1, "LLAMA_ARG_REASONING"},
	{[]string{"--reasoning-effort"}, nil, 1, "LLAMA_ARG_REASONING_EFFORT"},
	{[]string{"--reasoning-budget"}, nil, 1, "LLAMA_ARG_THINK_BUDGET"},
	{[]string{"--reasoning-budget-message"}, nil, 1, "LLAMA_ARG_THINK_BUDGET_MESSAGE"},
	{[]string{"--reasoning-preserve"}, []string{"--no-reasoning-preserve"}, 0, "LLAMA_ARG_REASONING_PRESERVE"},
	{[]string{"--chat-template"}, nil, 1, "LLAMA_ARG_CHAT_TEMPLATE"},
	{[]string{"--chat-template-file"}, nil, 1, "LLAMA_ARG_CHAT_TEMPLATE_FILE"},
	{[]string{"--skip-chat-parsing"}, []string{"--no-skip-chat-parsing"}, 0, "LLAMA_ARG_SKIP_CHAT_PARSING"},
	{[]string{"--prefill-assistant"}, []string{"--no-prefill-assistant"}, 0, "LLAMA_ARG_PREFILL_ASSISTANT"},
	{[]string{"-sps", "--slot-prompt-similarity"}, nil, 1, ""},
	{[]string{"--lora-init-without-apply"}, nil, 0, ""},
	{[]string{"--sleep-idle-seconds"}, nil, 1, ""},
	{[]string{"--log-disable"}, nil, 0, ""},
	{[]string{"--log-file"}, nil, 1, "LLAMA_ARG_LOG_FILE"},
	{[]string{"--log-prompts-dir"}, nil, 1, ""},
	{[]string{"--log-colors"}, nil, 1, "LLAMA_ARG_LOG_COLORS"},
	{[]string{"-v", "--verbose", "--log-verbose"}, nil, 0, ""},
	{[]string{"--offline"}, nil, 0, "LLAMA_ARG_OFFLINE"},
	{[]string{"-lv", "--verbosity", "--log-verbosity"}, nil, 1, "LLAMA_ARG_LOG_VERBOSITY"},
	{[]string{"--log-prefix"}, []string{"--no-log-prefix"}, 0, "LLAMA_ARG_LOG_PREFIX"},
	{[]string{"--log-timestamps"}, []string{"--no-log-timestamps"}, 0, "LLAMA_ARG_LOG_TIMESTAMPS"},
	{[]string{"--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_HF_REPO"},
	{[]string{"--spec-draft-threads", "-td", "--threads-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-cpu-strict", "--cpu-strict-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-prio", "--prio-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-poll", "--poll-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-prio-batch", "--prio-batch-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-poll-batch", "--poll-batch-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K"},
	{[]string{"--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V"},
	{[]string{"--spec-draft-override-tensor", "-otd", "--override-tensor-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"}, nil, 0, "LLAMA_ARG_SPEC_DRAFT_CPU_MOE"},
	{[]string{"--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE"},
	{[]string{"--spec-draft-n-max"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_N_MAX"},
	{[]string{"--spec-draft-n-min"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_N_MIN"},
	{[]string{"--spec-draft-p-split", "--draft-p-split"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_P_SPLIT"},
	{[]string{"--spec-draft-p-min", "--draft-p-min"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_P_MIN"},
	{[]string{"--spec-draft-backend-sampling"}, []string{"--no-spec-draft-backend-sampling"}, 0, "LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING"},
	{[]string{"--spec-draft-device", "-devd", "--device-draft"}, nil, 1, ""},
	{[]string{"--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"}, nil, 1, "LLAMA_ARG_N_GPU_LAYERS_DRAFT"},
	{[]string{"--spec-draft-model", "-md", "--model-draft"}, nil, 1, "LLAMA_ARG_SPEC_DRAFT_MODEL"},
	{[]string{"--spec-type"}, nil, 1, "LLAMA_ARG_SPEC_TYPE"},
	{[]string{"--spec-ngram-mod-n-min"}, nil, 1, ""},
	{[]string{"--spec-ngram-mod-n-max"}, nil, 1, ""},
	{[]string{"--spec-ngram-mod-n-match"}, nil, 1, ""},
	{[]string{"--spec-ngram-simple-size-n"}, nil, 1, ""},
	{[]string{"--spec-ngram-simple-size-m"}, nil, 1, ""},
	{[]string{"--spec-ngram-simple-min-hits"}, nil, 1, ""},
	{[]string{"--spec-ngram-map-k-size-n"}, nil, 1, ""},
	{[]string{"--spec-ngram-map-k-size-m"}, nil, 1, ""},
	{[]string{"--spec-ngram-map-k-min-hits"}, nil, 1, ""},
	{[]string{"--spec-ngram-map-k4v-size-n"}, nil, 1, ""},
	{[]string{"--spec-ngram-map-k4v-size-m"}, nil, 1, ""},
	{[]string{"--spec-ngram-map-k4v-min-hits"}, nil, 1, ""},
	{[]string{"--draft", "--draft-n", "--draft-max"}, nil, 1, "LLAMA_ARG_DRAFT_MAX"},
	{[]string{"--draft-min", "--draft-n-min"}, nil, 1, "LLAMA_ARG_DRAFT_MIN"},
	{[]string{"--spec-ngram-size-n"}, nil, 1, ""},
	{[]string{"--spec-ngram-size-m"}, nil, 1, ""},
	{[]string{"--spec-ngram-min-hits"}, nil, 1, ""},
	{[]string{"--embd-gemma-default"}, nil, 0, ""},
	{[]string{"--fim-qwen-1.5b-default"}, nil, 0, ""},
	{[]string{"--fim-qwen-3b-default"}, nil, 0, ""},
	{[]string{"--fim-qwen-7b-default"}, nil, 0, ""},
	{[]string{"--fim-qwen-7b-spec"}, nil, 0, ""},
	{[]string{"--fim-qwen-14b-spec"}, nil, 0, ""},
	{[]string{"--fim-qwen-30b-default"}, nil, 0, ""},
	{[]string{"--gpt-oss-20b-default"}, nil, 0, ""},
	{[]string{"--gpt-oss-120b-default"}, nil, 0, ""},
	{[]string{"--vision-gemma-4b-default"}, nil, 0, ""},
	{[]string{"--vision-gemma-12b-default"}, nil, 0, ""},
	{[]string{"--spec-default"}, nil, 0, ""},
	// ik_llama.cpp
	{[]string{"-mla", "--mla-use"}, nil, 1, ""},
	{[]string{"-amb", "--attention-max-batch"}, nil, 1, ""},
	{[]string{"-fmoe", "--fused-moe"}, []string{"-no-fmoe", "--no-fused-moe"}, 0, ""},
	{[]string{"-rtr", "--run-time-repack"}, nil, 0, ""},
	{[]string{"-ser", "--smart-expert-reduction"}, nil, 1, ""},
	{[]string{"-op", "--offload-policy"}, nil, 1, ""},
	{[]string{"-ooae", "--offload-only-active-experts"}, []string{"-no-ooae", "--no-offload-only-active-experts"}, 0, ""},
	// llama-cli's own, which guides paste with the placement flags
	{[]string{"-p", "--prompt"}, nil, 1, ""},
	{[]string{"-f", "--file"}, nil, 1, ""},
	{[]string{"--prompt-cache"}, nil, 1, ""},
	{[]string{"-sys", "--system-prompt"}, nil, 1, ""},
	{[]string{"-cnv", "--conversation"}, []string{"-no-cnv", "--no-conversation"}, 0, ""},
	{[]string{"-st", "--single-turn"}, nil, 0, ""},
	{[]string{"-i", "--interactive"}, nil, 0, ""},
}

// llamaSpelling finds an option by any of its spellings; negated reports a negating one.
type llamaSpelling struct {
	opt     *llamaOption
	negated bool
}

var llamaSpellings = func() map[string]llamaSpelling {
	m := map[string]llamaSpelling{}
	for i := range llamaServerOptions {
		o := &llamaServerOptions[i]
		for _, n := range o.names {
			m[n] = llamaSpelling{opt: o}
		}
		for _, n := range o.negs {
			m[n] = llamaSpelling{opt: o, negated: true}
		}
	}
	return m
}()

// lookupLlamaFlag finds the option a token spells, applying llama.cpp's rule that "--"
// options may use '_' for '-'.
func lookupLlamaFlag(name string) (llamaSpelling, bool) {
	if strings.HasPrefix(name, "--") {
		name = strings.ReplaceAll(name, "_", "-")
	}
	s, ok := llamaSpellings[name]
	return s, ok
}

// llamaBenchLists are llama-bench's options that take a list of 0/1 where llama-server's
// namesakes are switches, and bench's flags for them.
var llamaBenchLists = map[string]string{
	"-nkvo": "--nkvo", "--no-kv-offload": "--nkvo",
	"-mmp": "--mmp", "--mmap": "--mmp",
	"-nopo": "--nopo", "--no-op-offload": "--nopo",
}

// llamaPassthrough lists the commands that take a whole llama-server command line and the
// llama.cpp options each of them uses (by key); every other llama.cpp option given to them
// is packed into --llama-ignored=… for a note.
var llamaPassthrough = map[string]map[string]bool{
	"place": placeLlamaOptions,
	"fit":   placeLlamaOptions,
	"run":   declaredOptions(runCmd{}),
}

// ignoredFlag is the hidden flag the packed options travel in.
const ignoredFlag = "--llama-ignored="

// rewriteLlamaArgs rewrites llama.cpp spellings into kong's (see the top of this file). It
// stops at "--". One-rune short flags are left to kong, except for passthrough commands,
// which get every llama.cpp option in long form.
func rewriteLlamaArgs(args []string) []string {
	out := make([]string, 0, len(args))
	var uses map[string]bool
	command := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			switch {
			case command == "":
				command, uses = a, llamaPassthrough[a]
				out = append(out, a)
			case uses != nil && i > 0 && args[i-1] == command && isLlamaProgram(a):
				out = append(out, ignoredFlag+a) // a pasted program name, right after the command
			default:
				out = append(out, a)
			}
			continue
		}
		name, value, joined := strings.Cut(a, "=")
		if moerunSwitch(command, args, i) { // hardware.go: moerun's own --predict
			out = append(out, a)
			continue
		}
		if long, ok := llamaBenchLists[name]; ok && command == "bench" {
			// llama-bench's 0/1 lists, where llama-server has switches of the same names.
			switch {
			case joined:
				out = append(out, long+"="+value)
			case i+1 < len(args):
				out = append(out, long+"="+args[i+1])
				i++
			default:
				out = append(out, long)
			}
			continue
		}
		sp, ok := lookupLlamaFlag(name)
		if !ok || command == "" || uses == nil && !strings.HasPrefix(name, "--") && len(name) == 2 {
			out = append(out, a) // not llama.cpp's, before the command, or a short flag kong handles
			continue
		}
		n := sp.opt.values
		if joined {
			n--
		}
		end := min(i+1+max(n, 0), len(args))
		if uses != nil && !uses[sp.opt.key()] {
			out = append(out, ignoredFlag+strings.Join(args[i:end], " "))
			i = end - 1
			continue
		}
		long := canonical(sp.opt.names)
		if sp.negated {
			long = canonical(sp.opt.negs)
		}
		switch {
		case joined:
			out = append(out, long+"="+value)
		case long == "--flash-attn" && (i+1 == len(args) || strings.HasPrefix(args[i+1], "-") && args[i+1] != "-1"):
			// A bare -fa, as older guides write it: its missing value gets the hint.
			out = append(out, long+"=")
		case sp.opt.values == 1 && i+1 < len(args):
			out = append(out, long+"="+args[i+1])
			i++
		default:
			out = append(out, long)
		}
	}
	return out
}

// isLlamaProgram recognises a pasted program name: llama-server, ./build/bin/llama-cli,
// ik_llama's binaries — but not a model file such as llama-3-8b.gguf.
func isLlamaProgram(s string) bool {
	base := filepath.Base(s)
	return (strings.HasPrefix(base, "llama-") || strings.HasPrefix(base, "ik_llama")) && !strings.HasSuffix(base, ".gguf")
}

// declaredOptions is the set of llama.cpp options (by key) that cmd, a kong command
// struct, declares as flags of its own: a pasted command line's options that the command
// reads rather than reports as ignored. Deriving it from the struct keeps a flag added to
// a command from being ignored in pasted lines because a hand-kept list missed it.
func declaredOptions(cmd any) map[string]bool {
	names := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if _, embedded := f.Tag.Lookup("embed"); f.Type.Kind() == reflect.Struct && (f.Anonymous || embedded) {
				walk(f.Type)
				continue
			}
			if name := f.Tag.Get("name"); name != "" {
				names[name] = true
			}
		}
	}
	walk(reflect.TypeOf(cmd))
	uses := map[string]bool{}
	for i := range llamaServerOptions {
		if key := llamaServerOptions[i].key(); names[key] {
			uses[key] = true
		}
	}
	return uses
}
