#include "compiler/config/KeyRegistry.h"

#include "compiler/config/MaxTextCompatibilityKeys.h"
#include "compiler/config/RematPolicies.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

namespace precast {
namespace {

using T = KeyType;

constexpr KeySpec compile_key(std::string_view name, KeyType type, std::string_view def,
                              std::string_view doc) {
  return KeySpec{name, type, KeyPhase::kCompileTime, def, doc};
}
constexpr KeySpec run_key(std::string_view name, KeyType type, std::string_view def,
                          std::string_view doc) {
  return KeySpec{name, type, KeyPhase::kRunTime, def, doc};
}
constexpr KeySpec nullable(KeySpec spec) {
  spec.nullable = true;
  return spec;
}
constexpr KeySpec derived(KeySpec spec) {
  spec.derived = true;
  return spec;
}
// Accepted for MaxText compatibility; the doc says why it changes nothing.
constexpr KeySpec no_effect(KeySpec spec) {
  spec.status = KeyStatus::kNoEffect;
  return spec;
}
// Refused unless left at its default; the doc says what Precast lacks.
constexpr KeySpec not_supported(KeySpec spec) {
  spec.status = KeyStatus::kNotSupported;
  return spec;
}
// Precast's default differs from MaxText's (given as YAML text) on purpose; the doc says why.
constexpr KeySpec implemented_for(KeySpec spec, std::string_view values) {
  spec.implemented_values = values;
  return spec;
}
constexpr KeySpec maxtext_default(KeySpec spec, std::string_view maxtext_yaml) {
  spec.maxtext_default_yaml = maxtext_yaml;
  return spec;
}

// The mesh axes that have ici_/dcn_ parallelism keys ("pipeline" is the `stage` axis).
constexpr std::string_view kParallelismAxes[] = {"diloco",
                                                 "data",
                                                 "pipeline",
                                                 "fsdp",
                                                 "fsdp_transpose",
                                                 "sequence",
                                                 "context",
                                                 "context_usp_ulysses",
                                                 "context_autoregressive",
                                                 "tensor",
                                                 "tensor_sequence",
                                                 "expert",
                                                 "autoregressive"};

const KeySpec kKeys[] = {
    // Run identity, outputs and logging.
    run_key("run_name", T::kString, "''",
            "Name of the run; default $JOBSET_NAME, else {model_name}_{YYYY-MM-DD-HH-MM}."),
    compile_key("model_name", T::kString, "default",
                "Model config layered from configs/models/<model_name>.yml; 'default' uses none."),
    run_key("override_model_config", T::kBool, "false",
            "Let the command line override keys that the model config sets."),
    compile_key("override_logical_axis_rules", T::kBool, "false",
                "Replace logical_axis_rules wholesale instead of merging per logical name."),
    run_key("base_output_directory", T::kString, "''",
            "Root for run outputs (checkpoints, metrics); empty means ./maxtext_output."),
    run_key("metrics_file", T::kString, "''",
            "Local file that receives one JSON line of scalar metrics per step; empty = "
            "{metrics_dir}/metrics.jsonl."),
    run_key("enable_tensorboard", T::kBool, "true",
            "Write every step's scalars (those of the metrics file) as TensorBoard events in "
            "{tensorboard_dir} (rank 0)."),
    run_key("save_config_to_gcs", T::kBool, "false",
            "Write the resolved config to {base_output_directory}/{run_name}/config.yml (Precast "
            "writes it locally)."),
    run_key("log_config", T::kBool, "true",
            "Print every resolved key at start as `Config param <key>: <value>` (precast-run)."),
    no_effect(
        run_key("log_period", T::kInt, "100",
                "MaxText's TensorBoard/GCS flush period; Precast writes metrics_file every step.")),
    run_key("compiled_trainstep_file", T::kString, "''",
            "Artifact (.pcx) that `precast compile` writes and `precast-run` loads."),
    compile_key("compile_topology", T::kString, "''",
                "Target topology, e.g. v5p-128, v6e-32, h100-8, cpu-4; empty = this host (cpu-1)."),
    compile_key("compile_topology_num_slices", T::kInt, "-1",
                "Slices (TPU) or hosts (GPU) of compile_topology; -1 means 1."),
    compile_key("hbm_limit_bytes", T::kInt, "0",
                "Device memory the step must fit in, bytes; 0 = the topology's per-device memory."),
    compile_key("target_triple", T::kString, "''",
                "CPU code generation: LLVM target triple of the artifact, e.g. "
                "aarch64-linux-gnu; empty = this host."),
    compile_key("target_cpu", T::kString, "''",
                "CPU code generation: LLVM CPU name, e.g. znver4, neoverse-v2; empty = this host's "
                "(or generic for another triple)."),
    no_effect(compile_key(
        "hardware", T::kString, "tpu",
        "tpu, gpu, gpu_multiprocess or cpu; Precast takes the platform from compile_topology.")),

    // Checkpointing.
    maxtext_default(
        run_key("enable_checkpointing", T::kBool, "false",
                "Save checkpoints every checkpoint_period steps into checkpoint_dir and resume "
                "from the latest committed one at start-up. Precast's default is false, where "
                "MaxText's is true, so that a run writes no training state unless asked."),
        "true"),
    run_key("async_checkpointing", T::kBool, "true",
            "Write checkpoints off the training thread: the state is copied after the step, then "
            "written in the background while training goes on; at most one save in flight."),
    run_key("checkpoint_period", T::kInt, "10000",
            "Save a checkpoint after every step s with s % checkpoint_period == 0."),
    nullable(run_key("max_num_checkpoints_to_keep", T::kInt, "None",
                     "Committed checkpoints to keep; older ones are deleted after a newer one is "
                     "committed. None keeps all.")),
    run_key("save_checkpoint_on_completion", T::kBool, "true",
            "Also save a checkpoint after the last step."),
    run_key("load_parameters_path", T::kString, "''",
            "When the run has no checkpoint of its own: load the parameters (by MaxText-style "
            "name) from a checkpoint step directory, a checkpoint_dir (its latest step) or a "
            "safetensors file; the optimizer state starts afresh at step 0."),
    run_key("load_full_state_path", T::kString, "''",
            "When the run has no checkpoint of its own: load parameters and optimizer state from "
            "a checkpoint step directory (or a checkpoint_dir's latest) and go on after its step."),

    // Numerics.
    compile_key("dtype", T::kString, "bfloat16", "Activation dtype."),
    compile_key("weight_dtype", T::kString, "float32", "Master parameter dtype."),
    compile_key("grad_dtype", T::kString, "float32", "Gradient dtype."),
    compile_key("mu_dtype", T::kString, "''",
                "AdamW first-moment dtype; empty inherits weight_dtype."),
    no_effect(compile_key("matmul_precision", T::kString, "default",
                          "TPU matmul precision (default, high, highest); Precast's contractions "
                          "accumulate in float32 whatever it says.")),
    not_supported(
        compile_key("activations_in_float32", T::kBool, "false",
                    "Cast activations to float32 before nonlinearities; not lowered yet.")),
    not_supported(
        compile_key("cast_logits_to_fp32", T::kBool, "true",
                    "Cast logits to float32 (Precast always does; false is not lowered yet).")),
    not_supported(compile_key("float32_qk_product", T::kBool, "false",
                              "Compute the attention q.k product in float32; not lowered yet.")),
    not_supported(compile_key("float32_logits", T::kBool, "false",
                              "Attention softmax inputs in float32; not lowered yet.")),
    not_supported(compile_key("logits_dot_in_fp32", T::kBool, "false",
                              "Compute the logits matmul in float32; not lowered yet.")),
    not_supported(compile_key("quantization", T::kString, "''",
                              "Quantization mode (int8, fp8, ...); not supported yet (only '').")),

    // Model shape.
    compile_key("decoder_block", T::kString, "llama2",
                "Decoder family: llama2, mistral, gemma, gemma2 or gpt3."),
    compile_key("global_parameter_scale", T::kInt, "1",
                "Power-of-two model scale: heads and mlp, then emb, then layers double."),
    compile_key("base_emb_dim", T::kInt, "2048", "Embedding width before scaling."),
    compile_key("base_num_query_heads", T::kInt, "16", "Query heads before scaling."),
    compile_key("base_num_kv_heads", T::kInt, "16", "Key/value heads before scaling."),
    compile_key("base_mlp_dim", T::kInt, "7168", "MLP hidden width before scaling."),
    compile_key("base_num_decoder_layers", T::kInt, "16",
                "Decoder layers before scaling (gemma2: local/global pairs)."),
    compile_key("base_moe_mlp_dim", T::kInt, "-1", "MoE expert width before scaling (-1: none)."),
    compile_key("head_dim", T::kInt, "128", "Width of one attention head (not derived)."),
    compile_key("mlp_activations", T::kStringList, "['silu', 'linear']",
                "One input kernel per activation; products gate the MLP."),
    compile_key("vocab_size", T::kInt, "32000", "Vocabulary size."),
    compile_key("num_experts", T::kInt, "1",
                "Experts per MoE layer (1: dense layers; > 1 for deepseek, mixtral, qwen3_moe)."),
    compile_key("num_experts_per_tok", T::kInt, "1",
                "Experts each token is routed to (top-k of the router scores, dropless)."),
    compile_key("mla_legacy_param_count", T::kBool, "false",
                "Precast's own: count the unused key/value (and, with q_lora_rank > 0, query) "
                "kernels MaxText's MLA allocated before September 2025, reproducing older logs "
                "(deepseek2-16b: 15.933 billion instead of 15.706). Changes only the printed "
                "parameter count."),
    not_supported(compile_key("dropout_rate", T::kFloat, "0.0",
                              "Dropout probability; Precast lowers no dropout yet.")),
    no_effect(
        compile_key("enable_dropout", T::kBool, "true",
                    "Apply dropout_rate; dropout_rate must be 0 (dropout is not supported yet), so "
                    "it changes nothing.")),
    compile_key("logits_via_embedding", T::kBool, "false",
                "Tie the output projection to the token embedding."),
    compile_key("normalize_embedding_logits", T::kBool, "true",
                "Scale tied logits by 1/sqrt(emb_dim)."),
    compile_key("normalization_layer_epsilon", T::kFloat, "1.0e-05",
                "Epsilon of RMSNorm/LayerNorm."),
    compile_key("fused_qkv", T::kBool, "false", "One fused q/k/v projection kernel."),
    compile_key("fused_mlp", T::kBool, "false", "One fused kernel for all MLP input projections."),
    no_effect(
        compile_key("use_iota_embed", T::kBool, "false",
                    "Embedding lookup as a one-hot matmul on TPU: the same values; Precast plans a "
                    "gather either way (the one-hot operand XLA builds is not modelled).")),
    not_supported(compile_key("use_untrainable_positional_embedding", T::kBool, "false",
                              "Add fixed sinusoidal position embeddings; not lowered yet.")),
    compile_key("trainable_position_size", T::kInt, "-1",
                "Learned position embedding table size (gpt3); -1 disables."),
    compile_key("attention", T::kString, "autoselected",
                "Attention kernel: autoselected, dot_product or flash."),
    compile_key("attention_type", T::kString, "global",
                "global, local_sliding, or mla (deepseek's multi-head latent attention)."),
    compile_key("sliding_window_size", T::kInt, "0", "Window of local_sliding attention."),
    compile_key("context_parallel_strategy", T::kString, "all_gather",
                "Attention over a context-sharded sequence: all_gather (gather the whole "
                "sequence) or ring (pass kv chunks around the context devices)."),
    nullable(compile_key("attn_logits_soft_cap", T::kFloat, "0.0",
                         "tanh soft cap of attention logits; 0 disables.")),
    nullable(compile_key("final_logits_soft_cap", T::kFloat, "0.0",
                         "tanh soft cap of output logits; 0 disables.")),
    compile_key("use_post_attn_norm", T::kBool, "false", "Norm after attention (gemma2)."),
    compile_key("use_post_ffw_norm", T::kBool, "false", "Norm after the MLP (gemma2)."),
    compile_key("attention_bias", T::kBool, "false", "Bias on q/k/v projections."),
    compile_key("use_qk_norm", T::kBool, "false",
                "RMSNorm over head_dim of queries and keys before RoPE (qwen3); llama4: a "
                "scale-free L2 norm after RoPE on its RoPE layers."),
    compile_key("mlp_bias", T::kBool, "false", "Bias on MLP projections."),
    not_supported(compile_key("share_kv_projections", T::kBool, "false",
                              "Keys and values share one kernel; not lowered yet.")),
    compile_key("z_loss_multiplier", T::kFloat, "0.0", "Weight of the z-loss (log-partition)."),
    compile_key("rope_type", T::kString, "default", "RoPE variant: default, llama3.1 or yarn."),
    compile_key("rope_factor", T::kInt, "40",
                "YaRN: the long-context frequencies are the base ones divided by this."),
    compile_key("original_max_position_embeddings", T::kInt, "4096",
                "YaRN: the context the base frequencies were trained for."),
    compile_key("max_position_embeddings", T::kInt, "163840",
                "YaRN: rows of the rotation table; max_target_length must not exceed it."),
    compile_key("beta_fast", T::kInt, "32",
                "YaRN: dimensions rotating more than this often in the original context keep "
                "their frequency."),
    compile_key("beta_slow", T::kInt, "1",
                "YaRN: dimensions rotating less than this often are divided by rope_factor."),
    compile_key("rope_interleave", T::kBool, "true",
                "YaRN: rotate pairs (x[2i], x[2i+1]) instead of halves; the output is halves."),
    compile_key("rope_truncate", T::kBool, "true",
                "YaRN: round the correction range outwards to whole dimensions."),
    compile_key("rope_attention_scaling", T::kBool, "false",
                "YaRN: scale rotated q and k by 0.1 ln(rope_factor) + 1."),
    compile_key("rope_use_scale", T::kBool, "true", "Apply llama3.1 RoPE frequency scaling."),
    compile_key("rope_linear_scaling_factor", T::kFloat, "1.0",
                "Linear position scaling of default RoPE."),
    compile_key("rope_min_timescale", T::kInt, "1", "Smallest RoPE timescale."),
    compile_key("rope_max_timescale", T::kInt, "10000", "Largest RoPE timescale (theta)."),
    compile_key("local_rope_max_timescale", T::kInt, "-1",
                "RoPE theta of local attention layers; -1 uses rope_max_timescale."),

    // Layers, remat and offload.
    compile_key("inhomogeneous_layer_cycle_interval", T::kInt, "1",
                "Layers in one scanned block: 4 for olmo3 (3 sliding-window layers, then a "
                "global one); 1 for the other families."),
    compile_key("scan_layers", T::kBool, "true",
                "Stack identical layers (params gain a `layers` axis at param_scan_axis)."),
    compile_key("param_scan_axis", T::kInt, "1",
                "Position (0 or 1) of the stacked `layers` axis of scanned parameters. Precast "
                "keeps weights and checkpoint tensors per layer; the TPU plan's stacked arrays "
                "take the same bytes at either position (XLA tiles the two dimensions that pad "
                "least), so 0 and 1 plan alike."),
    compile_key("remat_policy", T::kString, "full",
                "What the backward pass keeps vs recomputes (compiler/config/RematPolicies.cpp): "
                "full, minimal, save_*, *_offloaded, custom, ..."),
    compile_key("decoder_layer_input", T::kString, "device",
                "custom remat: where layer inputs live (device or offload)."),
    compile_key("optimizer_memory_host_offload", T::kBool, "false",
                "Keep the optimizer state in host memory (pinned_host): on TPU/GPU targets the "
                "report counts it as host argument/output bytes, not HBM, plus the update's "
                "streaming buffers; no change on a CPU target, whose host is its device."),
    not_supported(
        compile_key("parameter_memory_host_offload", T::kBool, "false",
                    "Keep parameters in host memory; not supported yet (the plan does not "
                    "model the weights' copies to the device at each use and before the "
                    "update).")),

    // Batch and sequence.
    compile_key("max_target_length", T::kInt, "2048", "Sequence length of a training row."),
    compile_key("per_device_batch_size", T::kFloat, "12.0",
                "Rows per device per micro-batch; may be fractional."),
    compile_key("eval_per_device_batch_size", T::kFloat, "0.0",
                "Eval rows per device; 0 uses per_device_batch_size."),
    compile_key("gradient_accumulation_steps", T::kInt, "1",
                "Micro-batches summed per optimizer step."),
    compile_key("expansion_factor_real_data", T::kFloat, "-1.0",
                "Load this many times more rows than devices train on; -1 disables."),
    compile_key("num_vocab_tiling", T::kInt, "1",
                "The output head and cross entropy in this many tiles of the tokens (slices of "
                "the sequence), each recomputed in its backward: one tile's logits live at a "
                "time. per_device_batch_size x max_target_length and max_target_length must be "
                "divisible by it; not with context parallelism yet."),

    // Mesh and sharding.
    compile_key("mesh_axes", T::kStringList,
                "['diloco', 'data', 'stage', 'fsdp', 'fsdp_transpose', 'context', "
                "'context_usp_ulysses', 'context_autoregressive', 'tensor', 'tensor_sequence', "
                "'expert', 'autoregressive']",
                "Mesh axis names in order."),
    compile_key("logical_axis_rules", T::kAxisRules, "DEFAULT_RULES",
                "Logical axis -> mesh axes rules; first applicable rule wins."),
    not_supported(compile_key(
        "data_sharding", T::kStringLists,
        "[['data', 'stage', 'fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', "
        "'context_autoregressive', 'tensor', 'tensor_sequence', 'expert', "
        "'autoregressive']]",
        "Mesh axes the batch is split over; Precast shards the batch by its default only.")),
    not_supported(compile_key("input_data_sharding_logical_axes", T::kStringList,
                              "['activation_embed_and_logits_batch', 'activation_norm_length']",
                              "Logical axes of the input batch; only the default is supported.")),
    implemented_for(compile_key("shard_mode", T::kString, "auto",
                                "JAX sharding mode: auto or explicit (MaxText's decoders simple, "
                                "simple_mlp, llama2 and deepseek only). Precast places every value "
                                "by the logical axis rules either way, so the plan is the same."),
                    "auto explicit"),
    compile_key("num_slices", T::kInt, "-1",
                "Slices; -1 takes compile_topology_num_slices, else 1."),

    // Optimizer (type is compiled in; scalars are run-time inputs).
    compile_key("opt_type", T::kString, "adamw", "Optimizer: adamw, adam_pax or sgd."),
    compile_key("adamw_mask", T::kStringList, "[]",
                "Regexes over '/'-joined parameter paths excluded from weight decay."),
    run_key("adam_b1", T::kFloat, "0.9", "First-moment decay."),
    run_key("adam_b2", T::kFloat, "0.95", "Second-moment decay."),
    run_key("adam_eps", T::kFloat, "1.0e-08", "Epsilon outside the square root."),
    run_key("adam_eps_root", T::kFloat, "0.0", "Epsilon inside the square root."),
    run_key("adam_weight_decay", T::kFloat, "0.1", "Decoupled weight decay."),
    run_key("gradient_clipping_threshold", T::kFloat, "1.0",
            "Clip gradients to this global norm; 0 disables."),

    // Learning-rate schedule (run time: changing it never needs a recompile).
    run_key("learning_rate", T::kFloat, "3.0e-05", "Peak learning rate."),
    run_key("lr_schedule_type", T::kString, "cosine", "cosine or wsd."),
    run_key("learning_rate_final_fraction", T::kFloat, "0.1",
            "Final learning rate as a fraction of the peak."),
    run_key("warmup_steps_fraction", T::kFloat, "0.1",
            "Fraction of learning_rate_schedule_steps spent warming up."),
    run_key("wsd_decay_steps_fraction", T::kFloat, "0.1",
            "Fraction of the schedule spent decaying (wsd)."),
    run_key("wsd_decay_style", T::kString, "linear", "Decay of wsd: linear or cosine."),
    run_key("learning_rate_schedule_steps", T::kInt, "-1", "Schedule length; -1 uses steps."),
    run_key("steps", T::kInt, "150001", "Training steps; -1 uses learning_rate_schedule_steps."),

    // Data.
    maxtext_default(
        run_key("dataset_type", T::kString, "synthetic",
                "synthetic (MaxText's synthetic batch), tokens (Precast token files made by "
                "`precast tokenize`) or text (files read as bytes: byte-level tokens, "
                "vocab_size >= 259); MaxText's tfds, hf and grain readers are not supported yet "
                "(runtime/data/README.md)."),
        "tfds"),
    run_key("dataset_path", T::kString, "''",
            "The data of dataset_type=tokens|text: files, directories or globs, separated by "
            "commas."),
    no_effect(run_key("dataset_name", T::kString, "c4/en:3.1.0",
                      "Training dataset name; synthetic data only, so unused.")),
    no_effect(run_key("eval_dataset_name", T::kString, "c4/en:3.1.0",
                      "Evaluation dataset name (tfds); Precast evaluates on eval_dataset_path or the held-out "
                      "documents, so unused.")),
    no_effect(run_key("train_split", T::kString, "train",
                      "Training split; synthetic data only, so unused.")),
    no_effect(run_key("eval_split", T::kString, "validation",
                      "Evaluation split (tfds); Precast evaluates on eval_dataset_path or the held-out "
                      "documents, so unused.")),
    no_effect(run_key("tokenizer_path", T::kString, "''",
                      "Tokenizer model file; synthetic token ids need none, so unused.")),
    no_effect(run_key("tokenizer_type", T::kString, "sentencepiece",
                      "sentencepiece, tiktoken or huggingface; synthetic data only, so unused.")),
    run_key("packing", T::kBool, "true",
            "Pack several documents into one row (segment ids and positions per document); "
            "false: one document per row, truncated. Token and text data."),
    run_key("enable_data_shuffling", T::kBool, "true",
            "Shuffle the documents each epoch (from data_shuffle_seed); false: file order."),
    run_key("data_shuffle_seed", T::kInt, "0",
            "Seed of the document order (and of the synthetic batch)."),
    run_key("init_weights_seed", T::kInt, "0", "Seed of parameter initialization."),
    no_effect(
        run_key("reuse_example_batch", T::kInt, "0",
                "Reuse the first batch for every step; synthetic data is one batch every step "
                "already, so it changes nothing.")),

    // Evaluation and stopping.
    run_key("eval_interval", T::kInt, "-1",
            "Evaluate after every eval_interval-th train step (from eval_start_step; -1: never). "
            "Compiling with eval_interval > 0 adds the eval_step entry point to the artifact "
            "(runtime/eval/README.md)."),
    run_key("eval_steps", T::kInt, "-1",
            "Batches per evaluation; -1: the whole eval set once (synthetic data: one batch)."),
    run_key("eval_dataset_path", T::kString, "''",
            "Evaluation data of dataset_type=tokens|text, every document used (files, "
            "directories or globs, comma-separated); empty: the documents dataset_path holds out "
            "(every 20th)."),
    run_key("target_eval_loss", T::kFloat, "0.0",
            "Stop training once an evaluation's loss is at or below this (0: never)."),
    run_key("sample_tokens", T::kInt, "0",
            "After training, greedily generate up to this many tokens after sample_prompt (stops "
            "at EOS); compiling with sample_tokens > 0 adds the sample_step entry point (any "
            "mesh; under mpirun every rank takes part, rank 0 prints). 0: no sample."),
    run_key("sample_prompt", T::kString, "''",
            "The prompt of the greedy sample (byte-level tokens after BOS, as dataset_type=text)."),
    run_key("abort_on_nan_loss", T::kBool, "true", "Stop training on a NaN loss."),
    run_key("abort_on_inf_loss", T::kBool, "true", "Stop training on an infinite loss."),

    // Profiling and threads.
    implemented_for(
        run_key("profiler", T::kString, "''",
                "Profiler: '' = none, 'trace' = a Chrome trace JSON per rank, one event per "
                "kernel, GEMM, attention kernel, collective and step, in "
                "{base_output_directory}/{run_name}/profile/trace-rank<r>.json (`precast profile "
                "summary`); xplane and nsys are not supported yet."),
        "trace"),
    run_key("profiler_steps", T::kInt, "5", "Steps the profiler traces."),
    run_key("skip_first_n_steps_for_profiler", T::kInt, "1",
            "Steps of the run before the profiler's first."),
    // MaxText's hang diagnostics (train.py's cloud-tpu-diagnostics StackTraceConfig); keys of
    // MaxText's base.yml before e591f30.
    run_key("collect_stack_trace", T::kBool, "false",
            "Write every thread's stack to the log (rank r > 0: its logs/rank-<r>.log) when no "
            "step completes within stack_trace_interval_seconds, and on a fatal signal."),
    run_key("stack_trace_interval_seconds", T::kInt, "600",
            "Seconds without a completed step before collect_stack_trace writes the stacks."),
    not_supported(run_key("stack_trace_to_cloud", T::kBool, "false",
                          "Upload the stack traces to Cloud Logging; Precast writes them to the "
                          "log only.")),
    run_key("num_threads", T::kInt, "0", "Worker threads of the CPU runtime; 0 = all cores."),
    run_key("collective_timeout_seconds", T::kFloat, "600",
            "Seconds a collective may wait for the other MPI ranks before the job is aborted "
            "(exit 1) naming the rank, step and op; > 0."),
    run_key("cpu_peak_tflops", T::kFloat, "0.0",
            "Peak TFLOP/s of one CPU device, perf/mfu's denominator; 0 = measured at start-up "
            "by a short FMA probe on the run's threads."),

    // Derived keys: computed by Precast, printed with the config, never set by the user.
    derived(compile_key("emb_dim", T::kInt, "0", "base_emb_dim scaled.")),
    derived(compile_key("num_query_heads", T::kInt, "0", "base_num_query_heads scaled.")),
    derived(compile_key("num_kv_heads", T::kInt, "0", "base_num_kv_heads scaled.")),
    derived(compile_key("mlp_dim", T::kInt, "0", "base_mlp_dim scaled.")),
    derived(compile_key("moe_mlp_dim", T::kInt, "0", "base_moe_mlp_dim scaled.")),
    derived(compile_key("num_decoder_layers", T::kInt, "0", "base_num_decoder_layers scaled.")),
    derived(compile_key("num_target_devices", T::kInt, "0", "Devices of the target topology.")),
    derived(compile_key("micro_batch_size_to_train_on", T::kInt, "0",
                        "Rows per micro-batch, all devices.")),
    derived(compile_key("global_batch_size_to_train_on", T::kInt, "0",
                        "Rows per optimizer step, all devices.")),
    derived(compile_key("global_batch_size_to_load", T::kInt, "0",
                        "Rows the loader produces per step.")),
    derived(compile_key("micro_batch_size_to_eval_on", T::kInt, "0", "Eval rows per batch.")),
    derived(compile_key("global_batch_size_to_eval_on", T::kInt, "0", "Eval rows per batch.")),
    derived(compile_key("global_batch_size_to_load_eval", T::kInt, "0",
                        "Eval rows the loader produces.")),
    derived(compile_key("ici_parallelism", T::kIntList, "[]", "ICI parallelism per mesh axis.")),
    derived(compile_key("dcn_parallelism", T::kIntList, "[]", "DCN parallelism per mesh axis.")),
    derived(run_key("checkpoint_dir", T::kString, "''",
                    "{base_output_directory}/{run_name}/checkpoints/")),
    derived(
        run_key("metrics_dir", T::kString, "''", "{base_output_directory}/{run_name}/metrics/")),
    derived(run_key("tensorboard_dir", T::kString, "''",
                    "{base_output_directory}/{run_name}/tensorboard/")),
};

// MaxText's default logical_axis_rules (base.yml at e591f30, 2026-08-22), kept as YAML so the table
// above stays readable. Names Precast's families never use (MoE, MLA, KV cache, ...) resolve
// nothing; for every name Precast uses, the rules are the same as before in the same order.
constexpr std::string_view kDefaultRules = R"([
  ['circular_repeats', []],
  ['activation_embed_and_logits_batch', ['data', 'stage', 'fsdp', 'fsdp_transpose', 'expert']],
  ['activation_embed_and_logits_batch_sequence', ['data', 'stage', 'fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
  ['activation_vocab', ['tensor', 'tensor_sequence']],
  ['activation_vocab', ['tensor']],
  ['activation_vocab', 'tensor_sequence'],
  ['vocab', ['tensor', 'tensor_sequence', 'autoregressive']],
  ['embed_vocab', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
  ['activation_batch_attn', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
  ['activation_input_length_attn', ['tensor_sequence', 'context']],
  ['activation_heads', ['tensor', 'tensor_sequence', 'autoregressive']],
  ['activation_kv_heads', ['tensor', 'tensor_sequence']],
  ['activation_length_attn', ['context', 'context_usp_ulysses']],
  ['activation_q_length', ['context', 'context_usp_ulysses']],
  ['activation_kv_length', []],
  ['activation_embed_attn', ['tensor']],
  ['activation_kv', ['tensor', 'tensor_sequence']],
  ['activation_kv_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
  ['activation_kv_head_dim', ['tensor', 'tensor_sequence']],
  ['heads', ['tensor', 'tensor_sequence', 'autoregressive']],
  ['q_heads', ['tensor', 'tensor_sequence', 'autoregressive']],
  ['kv_heads', ['tensor', 'tensor_sequence', 'autoregressive']],
  ['qkv', []],
  ['kv', []],
  ['kv_head_dim', []],
  ['q_lora', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
  ['q_lora', ['fsdp', 'context', 'context_usp_ulysses', 'expert']],
  ['q_lora_up_proj', []],
  ['kv_lora', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
  ['kv_lora', ['fsdp', 'context', 'context_usp_ulysses', 'expert']],
  ['kv_lora_up_proj', []],
  ['activation_batch_moe', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
  ['activation_length_moe', ['context', 'context_usp_ulysses']],
  ['activation_norm_length_moe', ['tensor_sequence', 'context', 'context_usp_ulysses']],
  ['activation_embed_moe', ['tensor']],
  ['activation_mlp_moe', ['tensor', 'tensor_sequence']],
  ['activation_exp', ['expert']],
  ['exp', 'expert'],
  ['mlp_moe', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']],
  ['embed_moe', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses']],
  ['embed_moe', ['fsdp', 'context', 'context_usp_ulysses']],
  ['activation_mlp', ['tensor', 'tensor_sequence']],
  ['activation_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
  ['activation_length', ['context', 'context_usp_ulysses']],
  ['activation_norm_length', ['tensor_sequence', 'context', 'context_usp_ulysses']],
  ['activation_embed', ['tensor']],
  ['activation_stage', 'stage'],
  ['mlp', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']],
  ['gdn_head', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']],
  ['embed', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
  ['embed', ['fsdp', 'context', 'context_usp_ulysses', 'expert']],
  ['norm', ['tensor']],
  ['layers', 'stage'],
  ['diloco', 'diloco'],
  ['engram_dim', ['tensor']],
  ['dense_layers', []],
  ['moe_layers', []],
  ['local_layers', []],
  ['mhc', []],
  ['prefill_activation_length', ['context', 'context_usp_ulysses']],
  ['prefill_activation_norm_length', ['tensor_sequence', 'context', 'context_usp_ulysses']],
  ['activation_prefill_kv_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
  ['decode_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
  ['decode_length', []],
  ['cache_heads', ['autoregressive', 'tensor', 'tensor_sequence']],
  ['paged_kv_heads', ['tensor']],
  ['cache_batch_prefill', []],
  ['cache_batch', []],
  ['cache_heads_none', []],
  ['cache_kv', []],
  ['cache_sequence', []],
  ['num_pages', []],
  ['tokens_per_page', []],
  ['paged_kv_head_dim_size', []],
  ['mlp_no_fsdp', ['tensor', 'tensor_sequence', 'autoregressive']],
  ['exp_with_fsdp', 'fsdp'],
])";

std::vector<KeySpec> build_registry() {
  std::vector<KeySpec> keys(std::begin(kKeys), std::end(kKeys));
  for (const KeySpec& spec : maxtext_compatibility_keys()) keys.push_back(spec);
  // ici_*/dcn_* keys: all 1 except the two MaxText auto-fills.
  static std::vector<std::string> names;  // owns the generated names for string_view
  names.reserve(64);
  for (std::string_view axis : kParallelismAxes) {
    for (std::string_view prefix : {"ici", "dcn"}) {
      names.push_back(std::string(prefix) + "_" + std::string(axis) + "_parallelism");
    }
  }
  size_t n = 0;
  for (std::string_view axis : kParallelismAxes) {
    for (std::string_view prefix : {"ici", "dcn"}) {
      bool auto_fill = (prefix == "ici" && axis == "fsdp") || (prefix == "dcn" && axis == "data");
      std::string_view doc = prefix == "ici" ? "Parallelism of this mesh axis within a slice "
                                               "(ICI); -1 fills the remainder."
                                             : "Parallelism of this mesh axis across slices "
                                               "(DCN); -1 fills the remainder.";
      if (axis == "pipeline") {
        doc =
            "Pipeline parallelism is not supported yet: Precast plans every layer on every "
            "device.";
      } else if (axis == "diloco") {
        doc = "DiLoCo replicas are not supported yet (enable_diloco is refused).";
      }
      KeySpec spec = compile_key(names[n++], T::kInt, auto_fill ? "-1" : "1", doc);
      if (axis == "pipeline" || axis == "diloco") spec = not_supported(spec);
      keys.push_back(spec);
    }
  }
  for (std::string_view name : kCustomRematNames) {
    keys.push_back(compile_key(name, T::kString, "remat",
                               "custom remat: remat, device or offload for this checkpoint name."));
  }
  std::sort(keys.begin(), keys.end(),
            [](const KeySpec& a, const KeySpec& b) { return a.name < b.name; });
  return keys;
}

bool is_string_list(const ConfigValue& v) {
  if (!v.is_list()) return false;
  return std::all_of(v.as_list().begin(), v.as_list().end(),
                     [](const ConfigValue& item) { return item.is_string(); });
}

// A rule is [name, axis] or [name, [axes...]].
bool is_axis_rule(const ConfigValue& v) {
  if (!v.is_list() || v.as_list().size() != 2) return false;
  const ConfigValue& axes = v.as_list()[1];
  return v.as_list()[0].is_string() && (axes.is_string() || is_string_list(axes));
}

}  // namespace

const std::vector<KeySpec>& key_registry() {
  static const std::vector<KeySpec> registry = build_registry();
  return registry;
}

const KeySpec* find_key(std::string_view name) {
  const std::vector<KeySpec>& keys = key_registry();
  auto it = std::lower_bound(keys.begin(), keys.end(), name,
                             [](const KeySpec& k, std::string_view n) { return k.name < n; });
  return (it != keys.end() && it->name == name) ? &*it : nullptr;
}

namespace {

ConfigValue value_from_default_text(const KeySpec& spec, std::string_view text) {
  if (text == "DEFAULT_RULES") text = kDefaultRules;
  ConfigValue value = config_value_from_key_yaml(spec, YAML::Load(std::string(text)));
  coerce_to_key_type(spec, value);
  return value;
}

// The registry's defaults, parsed once: loading a config starts from all of them.
const std::vector<ConfigValue>& registry_defaults() {
  static const std::vector<ConfigValue> defaults = [] {
    std::vector<ConfigValue> out;
    for (const KeySpec& spec : key_registry()) {
      out.push_back(value_from_default_text(spec, spec.default_yaml));
    }
    return out;
  }();
  return defaults;
}

}  // namespace

ConfigValue KeySpec::default_value() const {
  const std::vector<KeySpec>& keys = key_registry();
  std::less<const KeySpec*> before;  // a total order even for a KeySpec outside the registry
  if (!before(this, keys.data()) && before(this, keys.data() + keys.size())) {
    return registry_defaults()[static_cast<size_t>(this - keys.data())];
  }
  return value_from_default_text(*this, default_yaml);
}

ConfigValue KeySpec::maxtext_default_value() const {
  return value_from_default_text(
      *this, maxtext_default_yaml.empty() ? default_yaml : maxtext_default_yaml);
}

ConfigValue config_value_from_key_yaml(const KeySpec& spec, const YAML::Node& node) {
  if (spec.type == KeyType::kAny && node.IsMap()) {
    YAML::Emitter flow;
    flow << YAML::Flow << node;
    return ConfigValue::string(flow.c_str());
  }
  return config_value_from_yaml(node);
}

const std::vector<std::string_view>& parallelism_key_axes() {
  static const std::vector<std::string_view> axes(std::begin(kParallelismAxes),
                                                  std::end(kParallelismAxes));
  return axes;
}

std::string_view mesh_axis_of(std::string_view key_axis) {
  return key_axis == "pipeline" ? "stage" : key_axis;
}

std::string_view key_type_name(KeyType type) {
  switch (type) {
    case KeyType::kBool:
      return "bool";
    case KeyType::kInt:
      return "integer";
    case KeyType::kFloat:
      return "float";
    case KeyType::kString:
      return "string";
    case KeyType::kStringList:
      return "list of strings";
    case KeyType::kIntList:
      return "list of integers";
    case KeyType::kAxisRules:
      return "list of [logical_name, mesh_axes] rules";
    case KeyType::kStringLists:
      return "list of lists of strings";
    case KeyType::kAny:
      return "any";
  }
  return "?";
}

std::string_view key_phase_name(KeyPhase phase) {
  return phase == KeyPhase::kCompileTime ? "compile" : "run";
}

std::string_view key_status_name(KeyStatus status) {
  switch (status) {
    case KeyStatus::kImplemented:
      return "implemented";
    case KeyStatus::kNoEffect:
      return "accepted; no effect on the plan";
    case KeyStatus::kNotSupported:
      return "not supported yet";
  }
  return "?";
}

std::string_view key_status_short_name(KeyStatus status) {
  switch (status) {
    case KeyStatus::kImplemented:
      return "yes";
    case KeyStatus::kNoEffect:
      return "no effect";
    case KeyStatus::kNotSupported:
      return "not yet";
  }
  return "?";
}

Status check_key_supported(const KeySpec& spec, const ConfigValue& value,
                           const std::string& origin) {
  ConfigValue default_value = spec.default_value();
  if (!spec.implemented_values.empty() && value != default_value) {
    std::string_view text = value.is_string() ? std::string_view(value.as_string()) : "";
    std::string_view values = spec.implemented_values;
    for (size_t begin = 0; begin <= values.size();) {
      size_t end = std::min(values.find(' ', begin), values.size());
      if (!text.empty() && values.substr(begin, end - begin) == text) return Status::success();
      begin = end + 1;
    }
    return usage_error(origin + ": " + std::string(spec.name) + " is not supported yet (" +
                       std::string(spec.name) + "=" + value.to_yaml() + "). " +
                       std::string(spec.doc) + " Set " + std::string(spec.name) + " to one of: " +
                       std::string(values) + ", or " + default_value.to_yaml() +
                       " (the default).");
  }
  if (spec.status != KeyStatus::kNotSupported) return Status::success();
  if (value == default_value) return Status::success();
  return usage_error(origin + ": " + std::string(spec.name) + " is not supported yet (" +
                     std::string(spec.name) + "=" + value.to_yaml() + "). " +
                     std::string(spec.doc) + " Remove it or set " + std::string(spec.name) + "=" +
                     default_value.to_yaml() + " (the default).");
}

bool coerce_to_key_type(const KeySpec& spec, ConfigValue& value) {
  if (spec.nullable && (value.is_none() || (value.is_string() && (value.as_string() == "None" ||
                                                                  value.as_string() == "none")))) {
    value = ConfigValue::none();
    return true;
  }
  switch (spec.type) {
    case KeyType::kBool:
      return value.is_bool();
    case KeyType::kInt:
      if (value.is_float() && std::floor(value.as_float()) == value.as_float() &&
          std::isfinite(value.as_float())) {
        value = ConfigValue::integer(static_cast<int64_t>(value.as_float()));
      }
      return value.is_int();
    case KeyType::kFloat:
      if (value.is_int()) value = ConfigValue::floating(static_cast<double>(value.as_int()));
      return value.is_float();
    case KeyType::kString:
      // A YAML scalar typed as a number or bool is still a valid string value ("run_name=7").
      if (value.is_int() || value.is_float() || value.is_bool()) {
        std::string text = value.is_int()     ? std::to_string(value.as_int())
                           : value.is_float() ? python_float_repr(value.as_float())
                                              : (value.as_bool() ? "true" : "false");
        value = ConfigValue::string(text);
      }
      if (value.is_none()) value = ConfigValue::string("");
      return value.is_string();
    case KeyType::kStringList:
      return is_string_list(value);
    case KeyType::kIntList:
      return value.is_list() && std::all_of(value.as_list().begin(), value.as_list().end(),
                                            [](const ConfigValue& v) { return v.is_int(); });
    case KeyType::kAxisRules:
      return value.is_list() &&
             std::all_of(value.as_list().begin(), value.as_list().end(), is_axis_rule);
    case KeyType::kStringLists:
      return value.is_list() &&
             std::all_of(value.as_list().begin(), value.as_list().end(), is_string_list);
    case KeyType::kAny:
      return true;
  }
  return false;
}

std::string registry_as_yaml() {
  std::string out =
      "# Precast's base config: every key of MaxText's base.yml and Precast's own few, with "
      "MaxText's key\n"
      "# names and defaults. Layering as in MaxText: this file (and its base_config chain) -> "
      "configs/models/<model_name>.yml\n"
      "# -> key=value arguments -> M_<KEY> environment variables.\n"
      "# Each key's comment gives its phase and status. [compile] keys are baked into an "
      "artifact, [run]\n"
      "# keys are run-time inputs that never need a recompile. 'no effect' keys are accepted for "
      "MaxText\n"
      "# compatibility and change nothing Precast computes; 'not supported yet' keys are refused "
      "unless\n"
      "# left at the value below. Regenerate with `precast keys --format=yaml > configs/base.yml`; "
      "a test\n"
      "# keeps the two equal.\n\n";
  for (const KeySpec& spec : key_registry()) {
    if (spec.derived) continue;
    std::string value;
    if (spec.type == KeyType::kAxisRules) {
      value = "[\n";
      ConfigValue rules = spec.default_value();  // kept alive for the loop below
      for (const ConfigValue& rule : rules.as_list()) {
        value += "    " + rule.to_yaml() + ",\n";
      }
      value += "  ]";
    } else if (spec.type == KeyType::kAny && spec.default_yaml.starts_with("{")) {
      value = std::string(spec.default_yaml);  // a mapping, as MaxText writes it
    } else {
      value = spec.default_value().to_yaml();
    }
    out += "# [" + std::string(key_phase_name(spec.phase)) + "]";
    if (spec.status != KeyStatus::kImplemented) {
      out += " [" + std::string(key_status_short_name(spec.status)) + "]";
    }
    out += " " + std::string(spec.doc) + "\n";
    out += std::string(spec.name) + ": " + value + "\n";
  }
  return out;
}

std::string registry_as_table() {
  size_t width = 0;
  for (const KeySpec& spec : key_registry()) width = std::max(width, spec.name.size());
  std::string out;
  auto pad = [](std::string s, size_t n) {
    return s.size() < n ? s + std::string(n - s.size(), ' ') : s;
  };
  out += pad("key", width) + "  phase    status     type     default              doc\n";
  for (const KeySpec& spec : key_registry()) {
    std::string def = spec.derived ? "(derived)" : spec.default_value().to_yaml();
    if (def.size() > 20) def = def.substr(0, 17) + "...";
    std::string type(key_type_name(spec.type));
    if (type.size() > 8) type = type.substr(0, 4) == "list" ? "list" : type.substr(0, 8);
    out += pad(std::string(spec.name), width) + "  " +
           pad(std::string(key_phase_name(spec.phase)), 7) + "  " +
           pad(std::string(key_status_short_name(spec.status)), 9) + "  " + pad(type, 7) + "  " +
           pad(def, 20) + " " + std::string(spec.doc) + "\n";
  }
  out +=
      "\nstatus: yes = implemented; no effect = accepted, changes nothing Precast computes or "
      "reports;\nnot yet = not supported yet, refused unless left at its default.\n";
  return out;
}

}  // namespace precast
