#include "compiler/config/MaxTextCompatibilityKeys.h"

namespace precast {
namespace {

using T = KeyType;

constexpr KeySpec with_status(KeySpec spec, KeyStatus status) {
  spec.status = status;
  return spec;
}
constexpr KeySpec no_effect_run(std::string_view name, KeyType type, std::string_view def,
                                std::string_view doc) {
  return with_status(KeySpec{name, type, KeyPhase::kRunTime, def, doc}, KeyStatus::kNoEffect);
}
constexpr KeySpec no_effect_compile(std::string_view name, KeyType type, std::string_view def,
                                    std::string_view doc) {
  return with_status(KeySpec{name, type, KeyPhase::kCompileTime, def, doc}, KeyStatus::kNoEffect);
}
constexpr KeySpec unsupported_run(std::string_view name, KeyType type, std::string_view def,
                                  std::string_view doc) {
  return with_status(KeySpec{name, type, KeyPhase::kRunTime, def, doc}, KeyStatus::kNotSupported);
}
constexpr KeySpec unsupported_compile(std::string_view name, KeyType type, std::string_view def,
                                      std::string_view doc) {
  return with_status(KeySpec{name, type, KeyPhase::kCompileTime, def, doc},
                     KeyStatus::kNotSupported);
}
constexpr KeySpec implemented_compile(std::string_view name, KeyType type, std::string_view def,
                                      std::string_view doc) {
  return KeySpec{name, type, KeyPhase::kCompileTime, def, doc};
}
constexpr KeySpec implemented_run(std::string_view name, KeyType type, std::string_view def,
                                  std::string_view doc) {
  return KeySpec{name, type, KeyPhase::kRunTime, def, doc};
}
constexpr KeySpec nullable(KeySpec spec) {
  spec.nullable = true;
  return spec;
}

// One doc per group of keys: why the key changes nothing, or what Precast lacks. A "no effect"
// key changes nothing Precast computes or reports (the same IR, plan, numbers and run); keys of
// features Precast refuses are "not supported yet" and accepted only at their default.
constexpr std::string_view kCheckpointFeature =
    "Checkpoint feature Precast lacks: it saves its own safetensors checkpoints and resumes its own "
    "run (enable_checkpointing), nothing more yet.";
constexpr std::string_view kCheckpointSetting =
    "Orbax checkpoint tuning; Precast's checkpoints (safetensors, enable_checkpointing) do not "
    "read "
    "it, so it changes nothing.";
constexpr std::string_view kMonitorFeature =
    "Monitoring, upload, profiling or debug output Precast does not produce (it writes "
    "metrics_file JSON lines; `precast dump` prints the IR).";
constexpr std::string_view kMonitorSetting =
    "Setting of a monitoring, profiling or dump output Precast does not produce; changes nothing.";
constexpr std::string_view kQuantizationFeature =
    "Quantization or sparsity: Precast trains in float32, bfloat16 or float16 only.";
constexpr std::string_view kQuantizationSetting =
    "Quantization tuning: read only when quantization is set, which Precast refuses.";
constexpr std::string_view kInference =
    "Inference and serving (decode, prefill, KV cache, vLLM): a training step does not read it.";
constexpr std::string_view kPlatform =
    "JAX/XLA/TPU runtime plumbing (compilation cache, XLA flags, Linen or NNX, mesh device "
    "order, network shaping, sanity checks): Precast's plan and run do not depend on it.";
constexpr std::string_view kPlatformFeature =
    "Pathways, colocated Python or elastic training: not supported yet.";
constexpr std::string_view kElasticSetting =
    "Elastic training setting: read only with elastic_enabled=true, which Precast refuses.";
constexpr std::string_view kModelFeature =
    "Model feature Precast does not lower yet (`precast models` lists the families it does).";
constexpr std::string_view kMoeModel =
    "Mixture-of-experts setting Precast does not lower yet (it routes top-k with MaxText's "
    "routing variants, groups, load-balancing loss and capacity factor, and computes experts "
    "as grouped matmuls or densely).";
constexpr std::string_view kMoeKernel =
    "Mixture-of-experts kernel or dispatch choice (TPU/GPU): Precast computes the experts as "
    "grouped matmuls (sparse_matmul=true) or densely (false), dropless; the routing, the loss and "
    "the model FLOPs are the same whichever kernel is chosen, so it changes nothing.";
constexpr std::string_view kTrainingFeature = "Training feature Precast does not implement yet.";
constexpr std::string_view kMtpSetting =
    "Multi-token prediction setting: read only with mtp_num_layers > 0, which Precast refuses.";
constexpr std::string_view kPipeline =
    "Pipeline parallelism is not supported yet: Precast plans every layer on every device.";
constexpr std::string_view kOtherRemat =
    "custom remat placement of a layer the supported families do not have (MoE, MLA, indexer, "
    "Engram); changes nothing.";
constexpr std::string_view kBlockDiffusionSetting =
    "Block diffusion setting: read only with training_objective=block_diffusion, which Precast "
    "refuses.";
constexpr std::string_view kQkClipSetting =
    "QK-clip threshold: read only with use_qk_clip=true, which Precast refuses.";
constexpr std::string_view kDataSetting =
    "Input pipeline or evaluation setting Precast does not read: it trains and evaluates on "
    "synthetic data or its own token and text files (dataset_type=tokens|text; eval on "
    "eval_dataset_path or the held-out documents), so it changes nothing.";
constexpr std::string_view kVocabTilingSetting =
    "With num_vocab_tiling > 1, gather the output head's weight once for every tile; Precast "
    "gathers it in each tile, so only false is supported yet.";
constexpr std::string_view kRampupSetting =
    "Batch-size ramp-up setting: read only with enable_rampup_batch_size=true, which Precast "
    "refuses.";
constexpr std::string_view kDilocoSetting =
    "DiLoCo setting: read only with enable_diloco=true, which Precast refuses.";
constexpr std::string_view kSpikeSetting =
    "Loss-spike skipping setting: read only with skip_step_on_spikes=true, which Precast refuses.";
constexpr std::string_view kMuonSetting =
    "Muon optimizer setting: read only with opt_type=muon, which Precast refuses.";
constexpr std::string_view kDistillationSetting =
    "Distillation setting: read only by MaxText's distillation trainer, not by a training step.";
constexpr std::string_view kYarnMscaleSetting =
    "YaRN mscale of MLA attention (deepseek): when max_position_embeddings > "
    "original_max_position_embeddings the queries are scaled by qk_head_dim^-0.5 times "
    "(0.1 mscale ln(rope_factor) + 1)^2; the YaRN rotary embedding itself does not read it.";
constexpr std::string_view kAttentionKernel =
    "Attention kernel choice or tuning (TPU splash/flash block sizes and layouts, cost "
    "estimates, context-parallel load balancing): Precast plans attention as one op with the same "
    "values whichever kernel runs it.";
constexpr std::string_view kMultimodalFeature =
    "Multimodal input (images, audio, multimodal RoPE): not supported yet.";
constexpr std::string_view kMultimodalSetting =
    "Vision or audio encoder setting: read only with use_multimodal or use_audio=true, which "
    "Precast refuses.";

// In the order of MaxText's base.yml within each group.
const KeySpec kCompatibilityKeys[] = {
    // Checkpoint features (Precast writes no checkpoints yet).
    unsupported_run("lora_input_adapters_path", T::kString, "''", kCheckpointFeature),
    unsupported_run("hf_lora_adapter_path", T::kString, "''", kCheckpointFeature),
    unsupported_run("enable_continuous_checkpointing", T::kBool, "false", kCheckpointFeature),
    unsupported_run("enable_autocheckpoint", T::kBool, "false", kCheckpointFeature),
    unsupported_run("checkpoint_is_quantized", T::kBool, "false", kCheckpointFeature),
    unsupported_run("save_quantized_params_path", T::kString, "''", kCheckpointFeature),
    unsupported_run("enable_multi_tier_checkpointing", T::kBool, "false", kCheckpointFeature),
    unsupported_run("enable_emergency_checkpoint", T::kBool, "false", kCheckpointFeature),
    // Checkpoint tuning.
    no_effect_run("save_checkpoint_on_start", T::kBool, "true", kCheckpointSetting),
    no_effect_run("enable_single_replica_ckpt_restoring", T::kBool, "false", kCheckpointSetting),
    nullable(no_effect_run("checkpoint_todelete_subdir", T::kString, "None", kCheckpointSetting)),
    nullable(
        no_effect_run("checkpoint_todelete_full_path", T::kString, "None", kCheckpointSetting)),
    no_effect_run("force_unroll", T::kBool, "false", kCheckpointSetting),
    no_effect_run("checkpoint_storage_target_data_file_size_bytes", T::kInt, "2147483648",
                  kCheckpointSetting),
    no_effect_run("checkpoint_storage_use_ocdbt", T::kBool, "true", kCheckpointSetting),
    no_effect_run("checkpoint_storage_use_zarr3", T::kBool, "true", kCheckpointSetting),
    no_effect_run("checkpoint_storage_concurrent_gb", T::kInt, "96", kCheckpointSetting),
    no_effect_run("enable_orbax_v1", T::kBool, "false", kCheckpointSetting),
    nullable(no_effect_run("checkpoint_conversion_fn", T::kString, "'none'", kCheckpointSetting)),
    no_effect_run("source_checkpoint_layout", T::kString, "orbax", kCheckpointSetting),
    no_effect_run("colocated_python_checkpointing", T::kBool, "false", kCheckpointSetting),
    nullable(no_effect_run("multi_tier_checkpointing_backup_interval_minutes", T::kInt, "None",
                           kCheckpointSetting)),
    nullable(no_effect_run("multi_tier_checkpointing_backup_interval_steps", T::kInt, "None",
                           kCheckpointSetting)),
    no_effect_run("mtc_data_parallelism", T::kInt, "0", kCheckpointSetting),
    no_effect_run("local_checkpoint_directory", T::kString, "''", kCheckpointSetting),
    no_effect_run("local_checkpoint_period", T::kInt, "0", kCheckpointSetting),
    no_effect_run("enable_checkpoint_cloud_logger", T::kBool, "false", kCheckpointSetting),
    // Monitoring, upload and debug outputs Precast does not produce.
    unsupported_run("gcs_metrics", T::kBool, "false", kMonitorFeature),
    unsupported_run("enable_wandb", T::kBool, "false", kMonitorFeature),
    unsupported_run("record_internal_nn_metrics", T::kInt, "0", kMonitorFeature),
    unsupported_run("upload_all_profiler_results", T::kBool, "false", kMonitorFeature),
    unsupported_run("enable_tpu_profiling_options", T::kBool, "false", kMonitorFeature),
    unsupported_run("managed_mldiagnostics", T::kBool, "false", kMonitorFeature),
    unsupported_run("dump_hlo", T::kBool, "false", kMonitorFeature),
    unsupported_run("dump_jaxpr", T::kBool, "false", kMonitorFeature),
    unsupported_run("write_estimator_result", T::kBool, "false", kMonitorFeature),
    unsupported_run("enable_goodput_recording", T::kBool, "false", kMonitorFeature),
    unsupported_run("monitor_goodput", T::kBool, "false", kMonitorFeature),
    unsupported_run("enable_pathways_goodput", T::kBool, "false", kMonitorFeature),
    unsupported_run("report_heartbeat_metric_for_gcp_monitoring", T::kBool, "false",
                    kMonitorFeature),
    unsupported_run("report_performance_metric_for_gcp_monitoring", T::kBool, "false",
                    kMonitorFeature),
    unsupported_run("use_vertex_tensorboard", T::kBool, "false", kMonitorFeature),
    unsupported_run("max_checkify", T::kBool, "false", kMonitorFeature),
    unsupported_run("enable_jax_profiler", T::kBool, "false", kMonitorFeature),
    unsupported_run("xprof_e2e_enable_fw_throttle_event", T::kBool, "false", kMonitorFeature),
    unsupported_run("xprof_e2e_enable_fw_power_level_event", T::kBool, "false", kMonitorFeature),
    unsupported_run("xprof_e2e_enable_fw_thermal_event", T::kBool, "false", kMonitorFeature),
    unsupported_run("profile_power_events", T::kBool, "false", kMonitorFeature),
    unsupported_run("debug_sharding", T::kBool, "false", kMonitorFeature),
    // Settings of those outputs.
    no_effect_run("wandb_project_name", T::kString, "maxtext", kMonitorSetting),
    no_effect_run("wandb_run_name", T::kString, "''", kMonitorSetting),
    no_effect_run("jax_debug_log_modules", T::kString, "''", kMonitorSetting),
    no_effect_run("hide_profiler_step_metric", T::kBool, "false", kMonitorSetting),
    no_effect_run("profile_cleanly", T::kBool, "true", kMonitorSetting),
    no_effect_run("profile_periodically_period", T::kInt, "-1", kMonitorSetting),
    no_effect_run("tpu_num_chips_to_profile_per_task", T::kInt, "1", kMonitorSetting),
    no_effect_run("tpu_num_sparse_core_tiles_to_trace", T::kInt, "1", kMonitorSetting),
    no_effect_run("tpu_num_sparse_cores_to_trace", T::kInt, "2", kMonitorSetting),
    no_effect_run("managed_mldiagnostics_on_demand_profiling", T::kBool, "true", kMonitorSetting),
    no_effect_run("managed_mldiagnostics_run_group", T::kString, "''", kMonitorSetting),
    no_effect_run("managed_mldiagnostics_region", T::kString, "''", kMonitorSetting),
    no_effect_run("managed_mldiagnostics_storage_path", T::kString, "''", kMonitorSetting),
    no_effect_run("dump_step", T::kInt, "-1", kMonitorSetting),
    no_effect_run("dump_hlo_local_dir", T::kString, "'/tmp/xla_dump/'", kMonitorSetting),
    no_effect_run("dump_hlo_delete_local_after", T::kBool, "true", kMonitorSetting),
    no_effect_run("dump_hlo_gcs_dir", T::kString, "''", kMonitorSetting),
    no_effect_run("dump_hlo_local_module_name", T::kString, "jit_train_step", kMonitorSetting),
    no_effect_run("dump_hlo_module_name", T::kString, "jit_train_step", kMonitorSetting),
    no_effect_run("dump_hlo_xla_flags", T::kString, "''", kMonitorSetting),
    no_effect_run("dump_hlo_upload_all", T::kBool, "false", kMonitorSetting),
    no_effect_run("dump_jaxpr_local_dir", T::kString, "'/tmp/jaxpr_dump/'", kMonitorSetting),
    no_effect_run("dump_jaxpr_delete_local_after", T::kBool, "true", kMonitorSetting),
    no_effect_run("dump_jaxpr_gcs_dir", T::kString, "''", kMonitorSetting),
    no_effect_run("goodput_upload_interval_seconds", T::kInt, "30", kMonitorSetting),
    no_effect_run("monitor_step_time_deviation", T::kBool, "true", kMonitorSetting),
    no_effect_run("step_deviation_interval_seconds", T::kInt, "30", kMonitorSetting),
    no_effect_run("enable_gcp_goodput_metrics", T::kBool, "true", kMonitorSetting),
    no_effect_run("enable_gcp_step_deviation_metrics", T::kBool, "true", kMonitorSetting),
    no_effect_run("heartbeat_reporting_interval_in_seconds", T::kInt, "5", kMonitorSetting),
    no_effect_run("vertex_tensorboard_project", T::kString, "''", kMonitorSetting),
    no_effect_run("vertex_tensorboard_region", T::kString, "''", kMonitorSetting),
    no_effect_run("prometheus_port", T::kInt, "0", kMonitorSetting),
    no_effect_run("jax_profiler_port", T::kInt, "9999", kMonitorSetting),
    no_effect_run("xprof_tpu_power_trace_level", T::kInt, "0", kMonitorSetting),
    // Quantization tuning.
    no_effect_run("constant_bound_config", T::kAny, "''", kQuantizationSetting),
    no_effect_run("replicate_quant_scale", T::kBool, "false", kQuantizationSetting),
    no_effect_run("quant_cfg_path", T::kString, "''", kQuantizationSetting),
    no_effect_run("weight_quantization_calibration_method", T::kString, "absmax",
                  kQuantizationSetting),
    no_effect_run("act_quantization_calibration_method", T::kString, "absmax",
                  kQuantizationSetting),
    no_effect_run("bwd_quantization_calibration_method", T::kString, "absmax",
                  kQuantizationSetting),
    no_effect_run("quantization_local_shard_count", T::kInt, "-1", kQuantizationSetting),
    no_effect_run("weight_sparsity_update_step", T::kInt, "10", kQuantizationSetting),
    no_effect_run("weight_sparsity_start_step", T::kInt, "50", kQuantizationSetting),
    // Inference and serving.
    no_effect_run("quantize_kvcache", T::kBool, "false", kInference),
    no_effect_run("kv_quant_axis", T::kString, "heads_and_dkv", kInference),
    no_effect_run("kv_quant_dtype", T::kString, "int8", kInference),
    no_effect_run("model_call_mode", T::kString, "''", kInference),
    no_effect_run("mla_naive_kvcache", T::kBool, "true", kInference),
    no_effect_run("max_prefill_predict_length", T::kInt, "64", kInference),
    no_effect_run("prompt", T::kString, "'I love to'", kInference),
    no_effect_run("load_from_prefill_dir", T::kBool, "false", kInference),
    no_effect_run("prefill_cache_dir", T::kString, "''", kInference),
    no_effect_run("autoregressive_decode_assert", T::kString, "''", kInference),
    // precast-run's sample after training (sample_tokens) reads them (runtime/eval/Decoding.h).
    implemented_run("decode_sampling_strategy", T::kString, "greedy",
                    "How the sample after training (sample_tokens) picks each token: greedy "
                    "(argmax), weighted, topk, nucleus or composite (draws from Precast's own "
                    "generator, seed 1234; not JAX's draws)."),
    implemented_run("decode_sampling_nucleus_p", T::kFloat, "-1.0",
                    "nucleus and composite sampling: the probability mass of the largest logits "
                    "drawn from, in (0, 1]."),
    implemented_run("decode_sampling_top_k", T::kInt, "0",
                    "topk and composite sampling: how many of the largest logits are drawn from."),
    implemented_run("decode_sampling_temperature", T::kFloat, "1.0",
                    "Sampling other than greedy draws from softmax(logits / temperature); > 0."),
    no_effect_run("inference_microbenchmark_prefill_lengths", T::kString, "'64,128,256,512,1024'",
                  kInference),
    no_effect_run("inference_microbenchmark_stages", T::kString, "'prefill,generate'", kInference),
    no_effect_run("inference_microbenchmark_loop_iters", T::kInt, "10", kInference),
    no_effect_run("inference_microbenchmark_log_file_path", T::kString, "''", kInference),
    no_effect_run("inference_microbenchmark_num_samples", T::kIntList, "[1, 2, 3, 4, 5]",
                  kInference),
    no_effect_run("inference_metadata_file", T::kString, "''", kInference),
    no_effect_run("inference_server", T::kString, "MaxtextInterleavedServer", kInference),
    no_effect_run("prefill_slice", T::kString, "v5e-16", kInference),
    no_effect_run("generate_slice", T::kString, "v5e-16", kInference),
    no_effect_run("inference_benchmark_test", T::kBool, "false", kInference),
    no_effect_run("enable_model_warmup", T::kBool, "false", kInference),
    no_effect_run("enable_llm_inference_pool", T::kBool, "false", kInference),
    no_effect_run("multi_sampling", T::kBool, "false", kInference),
    no_effect_run("return_log_prob", T::kBool, "false", kInference),
    no_effect_run("stack_prefill_result_cache", T::kBool, "false", kInference),
    no_effect_run("prefill_cache_axis_order", T::kString, "'1,2,0,3'", kInference),
    no_effect_run("ar_cache_axis_order", T::kString, "'1,2,0,3'", kInference),
    no_effect_run("compute_axis_order", T::kString, "'0,1,2,3'", kInference),
    no_effect_run("reshape_q", T::kBool, "false", kInference),
    no_effect_run("use_ragged_attention", T::kBool, "false", kInference),
    no_effect_run("ragged_block_size", T::kInt, "256", kInference),
    no_effect_run("prefill_chunk_size", T::kInt, "256", kInference),
    no_effect_run("use_chunked_prefill", T::kBool, "false", kInference),
    no_effect_run("enable_prefix_caching", T::kBool, "false", kInference),
    no_effect_run("prefix_caching_hbm_byte", T::kInt, "10000000000", kInference),
    no_effect_run("prefix_caching_dram_byte", T::kInt, "100000000000", kInference),
    no_effect_run("vllm_hf_config_path", T::kString, "''", kInference),
    no_effect_run("vllm_hf_overrides", T::kAny, "{}", kInference),
    no_effect_run("vllm_additional_config", T::kAny, "{}", kInference),
    // Quantization and sparsity.
    unsupported_compile("use_qwix_quantization", T::kBool, "false", kQuantizationFeature),
    unsupported_compile("use_manual_quantization", T::kBool, "false", kQuantizationFeature),
    nullable(unsupported_compile("weight_sparsity_n", T::kInt, "None", kQuantizationFeature)),
    nullable(unsupported_compile("weight_sparsity_m", T::kInt, "None", kQuantizationFeature)),
    nullable(unsupported_compile("experimental_sa_quant_q_fp8", T::kBool, "false",
                                 kQuantizationFeature)),
    nullable(unsupported_compile("experimental_sa_quant_k_fp8", T::kBool, "false",
                                 kQuantizationFeature)),
    // JAX, XLA and TPU runtime plumbing.
    no_effect_run("te_comm_gemm_overlap", T::kString, "disabled", kPlatform),
    nullable(no_effect_run("jax_cache_dir", T::kString, "'~/jax_cache'", kPlatform)),
    no_effect_run("internal_compile", T::kBool, "false", kPlatform),
    no_effect_run("internal_compile_num_devices", T::kInt, "-1", kPlatform),
    no_effect_run("compile_xla_flags", T::kString, "''", kPlatform),
    no_effect_run("sharding_tolerance", T::kFloat, "0.02", kPlatform),
    no_effect_run("check_vma", T::kBool, "false", kPlatform),
    no_effect_run("max_inflight_computations", T::kInt, "2", kPlatform),
    no_effect_run("jax_distributed_initialization_timeout", T::kInt, "300", kPlatform),
    no_effect_run("skip_jax_distributed_system", T::kBool, "false", kPlatform),
    no_effect_run("dcn_bandwidth_limit", T::kString, "''", kPlatform),
    no_effect_run("dcn_bandwidth_burst", T::kString, "'10mb'", kPlatform),
    no_effect_run("dcn_bandwidth_latency", T::kString, "'50ms'", kPlatform),
    no_effect_run("dcn_bandwidth_interface", T::kString, "eth0", kPlatform),
    no_effect_run("optimize_mesh_for_tpu_v6e", T::kBool, "false", kPlatform),
    no_effect_run("shardy", T::kBool, "true", kPlatform),
    no_effect_run("remove_size_one_mesh_axis_from_type", T::kBool, "true", kPlatform),
    no_effect_run("enable_padding_causal_mask", T::kBool, "true", kPlatform),
    no_effect_run("enable_nnx", T::kBool, "true", kPlatform),
    no_effect_run("pure_nnx_decoder", T::kBool, "true", kPlatform),
    no_effect_run("pure_nnx", T::kBool, "true", kPlatform),
    // Model features of other families (MLA, indexer, Gated DeltaNet, mHC, Engram, ...) and options
    // of the supported ones that Precast does not lower.
    unsupported_compile("dense_init_scale", T::kFloat, "1.0", kModelFeature),
    unsupported_compile("attention_output_dim", T::kInt, "-1", kModelFeature),
    unsupported_compile("global_head_dim", T::kInt, "0", kModelFeature),
    unsupported_compile("global_num_kv_heads", T::kInt, "0", kModelFeature),
    implemented_compile("mlp_activations_limit", T::kFloat, "-1.0",
                        "gpt_oss: expert inputs clamped to this limit (> 0) before the gated "
                        "activation; -1 disables."),
    unsupported_compile("mla_qk_head_chunk_size", T::kInt, "0", kModelFeature),
    implemented_compile("attention_sink", T::kBool, "false",
                        "gpt_oss: a learned logit per query head joins the softmax's "
                        "denominator."),
    implemented_compile("chunk_attn_window_size", T::kInt, "0",
                        "llama4: its RoPE layers attend causally within chunks of this many "
                        "tokens (positions t and s see each other when t // size == s // size)."),
    unsupported_compile("v_norm_with_scale", T::kBool, "true", kModelFeature),
    unsupported_compile("qk_norm_with_scale", T::kBool, "true", kModelFeature),
    unsupported_compile("hidden_size_per_layer_input", T::kInt, "0", kModelFeature),
    unsupported_compile("vocab_size_per_layer_input", T::kInt, "0", kModelFeature),
    unsupported_compile("num_kv_shared_layers", T::kInt, "0", kModelFeature),
    unsupported_compile("use_double_wide_mlp", T::kBool, "false", kModelFeature),
    unsupported_compile("moba", T::kBool, "false", kModelFeature),
    unsupported_compile("moba_chunk_size", T::kInt, "1024", kModelFeature),
    unsupported_compile("moba_topk", T::kInt, "8", kModelFeature),
    unsupported_compile("use_indexer", T::kBool, "false", kModelFeature),
    unsupported_compile("indexer_head_dim", T::kInt, "128", kModelFeature),
    unsupported_compile("indexer_n_heads", T::kInt, "64", kModelFeature),
    unsupported_compile("indexer_topk", T::kInt, "2048", kModelFeature),
    unsupported_compile("indexer_use_approx_top_k", T::kBool, "false", kModelFeature),
    unsupported_compile("indexer_approx_top_k_recall", T::kFloat, "0.95", kModelFeature),
    unsupported_compile("indexer_mask_exact_topk", T::kBool, "true", kModelFeature),
    unsupported_compile("indexer_sparse_training", T::kBool, "false", kModelFeature),
    unsupported_compile("indexer_loss_scaling_factor", T::kFloat, "0.0", kModelFeature),
    implemented_compile("q_lora_rank", T::kInt, "0",
                        "MLA (attention_type=mla): rank of the query's low-rank projection (wq_a, q_norm, wq_b); 0: one query kernel."),
    implemented_compile("kv_lora_rank", T::kInt, "512",
                        "MLA: rank of the shared key/value latent (wkv_a, kv_norm, wkv_b)."),
    implemented_compile("qk_nope_head_dim", T::kInt, "128",
                        "MLA: per-head query/key width without RoPE."),
    implemented_compile("qk_rope_head_dim", T::kInt, "64",
                        "MLA: per-head query/key width with RoPE (the key's is shared by all heads)."),
    implemented_compile("v_head_dim", T::kInt, "128",
                        "MLA: per-head value width."),
    unsupported_compile("use_sliced_mla_proj", T::kBool, "false", kModelFeature),
    unsupported_compile("o_lora_rank", T::kInt, "0", kModelFeature),
    unsupported_compile("o_groups", T::kInt, "0", kModelFeature),
    unsupported_compile("compress_ratios", T::kIntList, "[]", kModelFeature),
    unsupported_compile("compressed_rope_max_timescale", T::kInt, "160000", kModelFeature),
    unsupported_compile("dense_fsdp_use_two_stage_all_gather", T::kBool, "false", kModelFeature),
    unsupported_compile("global_rope_max_timescale", T::kInt, "-1", kModelFeature),
    unsupported_compile("global_rope_proportion", T::kFloat, "0.25", kModelFeature),
    unsupported_compile("local_rope_proportion", T::kFloat, "1.0", kModelFeature),
    unsupported_compile("rope_pairwise", T::kBool, "false", kModelFeature),
    implemented_compile("nope_layer_interval", T::kInt, "-1",
                        "llama4: every n-th layer (i + 1 divisible by n) has no RoPE and attends "
                        "globally."),
    implemented_compile("temperature_tuning", T::kBool, "false",
                        "llama4: the no-RoPE layers scale the queries by "
                        "0.1 log(floor((position + 1) / 8192) + 1) + 1."),
    unsupported_compile("gdn_conv_kernel_dim", T::kInt, "4", kModelFeature),
    unsupported_compile("gdn_key_head_dim", T::kInt, "128", kModelFeature),
    unsupported_compile("gdn_value_head_dim", T::kInt, "128", kModelFeature),
    unsupported_compile("gdn_num_key_heads", T::kInt, "16", kModelFeature),
    unsupported_compile("gdn_num_value_heads", T::kInt, "32", kModelFeature),
    unsupported_compile("gdn_chunk_size", T::kInt, "64", kModelFeature),
    unsupported_compile("use_qk_norm_in_gdn", T::kBool, "true", kModelFeature),
    unsupported_compile("partial_rotary_factor", T::kFloat, "1.0", kModelFeature),
    unsupported_compile("mhc_expansion_rate", T::kInt, "1", kModelFeature),
    unsupported_compile("sinkhorn_iterations", T::kInt, "20", kModelFeature),
    unsupported_compile("enable_mhc_lite", T::kBool, "false", kModelFeature),
    unsupported_compile("use_mhc_pallas_kernel", T::kBool, "false", kModelFeature),
    unsupported_compile("mhc_pallas_kernel_fwd_block_size", T::kInt, "256", kModelFeature),
    unsupported_compile("mhc_pallas_kernel_bwd_block_size", T::kInt, "128", kModelFeature),
    unsupported_compile("engram_layers", T::kIntList, "[]", kModelFeature),
    unsupported_compile("engram_max_ngram_size", T::kInt, "3", kModelFeature),
    unsupported_compile("engram_num_heads", T::kInt, "8", kModelFeature),
    unsupported_compile("engram_head_dim", T::kInt, "1280", kModelFeature),
    unsupported_compile("engram_vocab_bases", T::kIntList, "[]", kModelFeature),
    unsupported_compile("engram_kernel_size", T::kInt, "4", kModelFeature),
    unsupported_compile("engram_seed", T::kInt, "0", kModelFeature),
    // Mixture-of-experts model settings.
    unsupported_compile("float32_weight_sum", T::kBool, "true", kMoeModel),
    unsupported_compile("float32_gate_logits", T::kBool, "false", kMoeModel),
    implemented_compile("capacity_factor", T::kFloat, "-1.0",
                        "MoE token dropping with sparse_matmul=false (<= 0: dropless; MaxText's sparse_matmul=true path ignores it): each expert takes at most int(max(ceil(max_target_length * num_experts_per_tok / num_experts) * capacity_factor, capacity_factor)) tokens of a sequence, in sequence order; the routing weights of the tokens past that are zero (MaxText's dense_matmul masks)."),
    unsupported_compile("moe_expert_input_dim", T::kInt, "-1", kMoeModel),
    implemented_compile("load_balance_loss_weight", T::kFloat, "0.0",
                        "MoE: weight of MaxText's load-balancing loss (per sequence: the fraction of tokens routed to each expert times its mean softmax router probability, averaged, times num_experts^2), averaged over the MoE layers and added to the loss; reported as moe_lb_loss."),
    unsupported_compile("use_random_routing", T::kBool, "false", kMoeModel),
    implemented_compile("norm_topk_prob", T::kBool, "false",
                        "MoE routing: divide the selected experts' weights by their sum (qwen3_moe, mixtral)."),
    implemented_compile("first_num_dense_layers", T::kInt, "0",
                        "deepseek: the first layers have a dense MLP of width mlp_dim instead of experts."),
    implemented_compile("shared_experts", T::kInt, "0",
                        "deepseek, llama4: experts every token passes through (one MLP of width shared_experts * moe_mlp_dim)."),
    implemented_compile("routed_scaling_factor", T::kFloat, "1.0",
                        "deepseek: the routing weights are multiplied by it."),
    implemented_compile("routed_score_func", T::kString, "''",
                        "Router scores: '' (logits; the weights are a softmax over the selected ones), softmax or sigmoid (deepseek: sigmoid weights are normalised)."),
    implemented_compile("routed_bias", T::kBool, "false",
                        "A learned bias (gate.bias [num_experts], init 0) added to the router scores, which choose the experts."),
    implemented_compile("routed_bias_update_rate", T::kFloat, "0.0",
                        "deepseek's auxiliary-loss-free balancing (needs routed_bias=true): after each train step's optimizer update, every MoE layer's gate.bias moves by rate * sign(mean load - expert load), the loads counted over the step's (token, choice) pairs (summed over gradient-accumulation micro-batches); 0: off."),
    implemented_compile("n_routing_groups", T::kInt, "-1",
                        "deepseek3 routing: the experts split into this many groups, each scored by the sum of its two best router scores (-1: no groups)."),
    unsupported_compile("first_num_hash_layers", T::kInt, "0", kMoeModel),
    // Not in MaxText's base.yml (a types.py field); deepseek4's model files set it.
    unsupported_run("log_moe_bias_norms", T::kBool, "false", kMonitorFeature),
    implemented_compile("topk_routing_group", T::kInt, "-1",
                        "deepseek3 routing: experts are chosen only from this many best groups (-1: no groups)."),
    implemented_compile("interleave_moe_layer_step", T::kInt, "1",
                        "llama4: layer i is a mixture of experts when i + 1 is divisible by it, "
                        "else a dense MLP of width mlp_dim."),
    // Training features.
    unsupported_compile("mtp_num_layers", T::kInt, "0", kTrainingFeature),
    unsupported_compile("use_qk_clip", T::kBool, "false", kTrainingFeature),
    unsupported_compile("custom_mesh_and_rule", T::kString, "''", kTrainingFeature),
    unsupported_compile("context_sharding", T::kString, "context", kTrainingFeature),
    unsupported_compile("ulysses_context_sharding", T::kString, "context_usp_ulysses",
                        kTrainingFeature),
    unsupported_compile("enable_rampup_batch_size", T::kBool, "false", kTrainingFeature),
    unsupported_compile("use_dpo", T::kBool, "false", kTrainingFeature),
    unsupported_compile("use_sft", T::kBool, "false", kTrainingFeature),
    unsupported_compile("sft_train_on_completion_only", T::kBool, "false", kTrainingFeature),
    unsupported_compile("training_objective", T::kString, "causal_lm", kTrainingFeature),
    unsupported_compile("enable_diloco", T::kBool, "false", kTrainingFeature),
    unsupported_compile("enable_streaming_diloco", T::kBool, "false", kTrainingFeature),
    unsupported_compile("use_sequential_layers", T::kBool, "false", kTrainingFeature),
    unsupported_compile("skip_step_on_spikes", T::kBool, "false", kTrainingFeature),
    unsupported_compile("trainable_parameters_mask", T::kStringList, "[]", kTrainingFeature),
    // Multi-token prediction settings.
    no_effect_run("mtp_loss_scaling_factor", T::kFloat, "0.1", kMtpSetting),
    no_effect_run("mtp_eval_target_module", T::kInt, "0", kMtpSetting),
    // Mixture-of-experts kernels and dispatch.
    no_effect_run("megablox", T::kBool, "true", kMoeKernel),
    implemented_compile("sparse_matmul", T::kBool, "true",
                        "MoE experts as grouped matmuls over each token's chosen experts "
                        "(activations [B, S*num_experts_per_tok, moe_mlp_dim], MaxText's "
                        "default); false: every expert on every token, masked ([B, S, "
                        "num_experts, moe_mlp_dim]). Same loss and gradients when dropless; "
                        "capacity_factor drops tokens only with false, as in MaxText, whose "
                        "sparse path is dropless."),
    no_effect_run("num_moe_token_chunks", T::kInt, "1", kMoeKernel),
    no_effect_run("moe_chunk_barrier", T::kBool, "false", kMoeKernel),
    unsupported_compile("ragged_buffer_factor", T::kFloat, "-1.0",
                        "Size of the sparse MoE path's expert-parallel ragged all-to-all buffers. "
                        "Precast plans MaxText's worst-case buffer (the default, -1: every row a "
                        "sender may place at one device); a factor that shrinks it is not "
                        "supported yet."),
    no_effect_run("use_custom_sort_vjp", T::kBool, "true", kMoeKernel),
    no_effect_run("use_ring_of_experts", T::kBool, "false", kMoeKernel),
    no_effect_run("num_moe_emb_chunks", T::kInt, "0", kMoeKernel),
    implemented_compile("moe_dispatch_no_expert_sharding", T::kBool, "false",
                        "With sparse_matmul=false and capacity_factor > 0: the dispatched "
                        "[experts, batch, capacity, ...] tokens and the expert MLP split over "
                        "the experts on the `expert` mesh axis (the batch keeps its other axes), "
                        "so dispatch and combine are all-to-alls over `expert`; false: the batch "
                        "takes `expert` and every device runs every expert on its rows."),
    no_effect_run("use_ragged_sort", T::kBool, "false", kMoeKernel),
    no_effect_run("use_gather_mosaic_kernel", T::kBool, "false", kMoeKernel),
    no_effect_run("ragged_gather_fallback", T::kBool, "false", kMoeKernel),
    no_effect_run("ragged_gather_reduce_fallback", T::kBool, "false", kMoeKernel),
    no_effect_run("ragged_gather_cost_estimate_flops", T::kInt, "-1", kMoeKernel),
    no_effect_run("ragged_gather_reduce_cost_estimate_flops", T::kInt, "-1", kMoeKernel),
    no_effect_run("ragged_gather_cost_estimate_bytes_accessed", T::kInt, "-1", kMoeKernel),
    no_effect_run("ragged_gather_reduce_cost_estimate_bytes_accessed", T::kInt, "-1", kMoeKernel),
    no_effect_run("wi_tile_fwd_batch_seq", T::kInt, "512", kMoeKernel),
    no_effect_run("wi_tile_fwd_embed_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wi_tile_fwd_mlp_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wi_tile_dlhs_batch_seq", T::kInt, "512", kMoeKernel),
    no_effect_run("wi_tile_dlhs_embed_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wi_tile_dlhs_mlp_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wi_tile_drhs_batch_seq", T::kInt, "512", kMoeKernel),
    no_effect_run("wi_tile_drhs_embed_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wi_tile_drhs_mlp_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wo_tile_fwd_batch_seq", T::kInt, "512", kMoeKernel),
    no_effect_run("wo_tile_fwd_embed_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wo_tile_fwd_mlp_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wo_tile_dlhs_batch_seq", T::kInt, "512", kMoeKernel),
    no_effect_run("wo_tile_dlhs_embed_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wo_tile_dlhs_mlp_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wo_tile_drhs_batch_seq", T::kInt, "512", kMoeKernel),
    no_effect_run("wo_tile_drhs_embed_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("wo_tile_drhs_mlp_dim", T::kInt, "1024", kMoeKernel),
    no_effect_run("merge_gating_gmm", T::kBool, "false", kMoeKernel),
    no_effect_run("use_tokamax_gmm", T::kBool, "false", kMoeKernel),
    no_effect_run("use_gmm_v2", T::kBool, "false", kMoeKernel),
    no_effect_run("moe_fsdp_use_two_stage_all_gather", T::kBool, "false", kMoeKernel),
    no_effect_run("shard_exp_on_fsdp", T::kBool, "false", kMoeKernel),
    no_effect_run("use_2d_fsdp_sharding", T::kBool, "false", kMoeKernel),
    no_effect_run("use_batch_split_schedule", T::kBool, "false", kMoeKernel),
    no_effect_run("batch_split_factor", T::kInt, "1", kMoeKernel),
    no_effect_run("moe_mlpwi_0", T::kString, "remat", kMoeKernel),
    no_effect_run("moe_mlpwi_1", T::kString, "remat", kMoeKernel),
    no_effect_run("moe_mlpwo", T::kString, "remat", kMoeKernel),
    // Pipeline parallelism.
    unsupported_compile("num_layers_per_pipeline_stage", T::kInt, "1", kPipeline),
    unsupported_compile("num_pipeline_repeats", T::kInt, "-1", kPipeline),
    unsupported_compile("pipeline_parallel_layers", T::kInt, "-1", kPipeline),
    unsupported_compile("num_pipeline_microbatches", T::kInt, "-1", kPipeline),
    unsupported_compile("pipeline_delay_activation_forwarding", T::kBool, "false", kPipeline),
    unsupported_compile("pipeline_fsdp_ag_once", T::kBool, "false", kPipeline),
    unsupported_compile("pipeline_fsdp_ag_per_repeat", T::kBool, "false", kPipeline),
    unsupported_compile("scan_pipeline_iterations", T::kBool, "true", kPipeline),
    unsupported_compile("scan_pipeline_repeats", T::kBool, "false", kPipeline),
    unsupported_compile("scan_layers_per_stage", T::kBool, "false", kPipeline),
    unsupported_compile("set_remat_policy_on_pipeline_iterations", T::kBool, "true", kPipeline),
    unsupported_compile("set_remat_policy_on_layers_per_stage", T::kBool, "false", kPipeline),
    // custom remat placements of layers the supported families lack.
    no_effect_run("indexer_cutoff_threshold", T::kString, "remat", kOtherRemat),
    no_effect_run("query_wa_proj", T::kString, "remat", kOtherRemat),
    no_effect_run("kv_wa_proj", T::kString, "remat", kOtherRemat),
    no_effect_run("mla_q", T::kString, "remat", kOtherRemat),
    no_effect_run("mla_kv", T::kString, "remat", kOtherRemat),
    no_effect_run("engram", T::kString, "remat", kOtherRemat),
    // Block diffusion settings.
    no_effect_run("causal_block_size", T::kInt, "32", kBlockDiffusionSetting),
    no_effect_run("block_diffusion_mask_id", T::kInt, "-1", kBlockDiffusionSetting),
    no_effect_run("block_diffusion_min_noise", T::kFloat, "0.001", kBlockDiffusionSetting),
    no_effect_run("block_diffusion_logit_alignment", T::kString, "same_position",
                  kBlockDiffusionSetting),
    no_effect_run("block_diffusion_canvas_policy", T::kString, "all_masked",
                  kBlockDiffusionSetting),
    // QK-clip settings.
    no_effect_run("qk_clip_threshold", T::kFloat, "100.0", kQkClipSetting),
    // Input pipeline and evaluation settings.
    no_effect_run("custom_mesh_and_rule_for_eval", T::kString, "''", kDataSetting),
    no_effect_run("logical_axis_rules_for_eval", T::kAny, "[]", kDataSetting),
    no_effect_run("use_chat_template", T::kBool, "false", kDataSetting),
    no_effect_run("chat_template_path", T::kString, "''", kDataSetting),
    no_effect_run("chat_template", T::kString, "''", kDataSetting),
    no_effect_run("tokenize_train_data", T::kBool, "true", kDataSetting),
    no_effect_run("tokenize_eval_data", T::kBool, "true", kDataSetting),
    KeySpec{"add_bos", T::kBool, KeyPhase::kRunTime, "true",
            "dataset_type=text: begin each document with BOS (256). Token files hold their "
            "tokens as written (precast tokenize adds BOS and EOS)."},
    KeySpec{"add_eos", T::kBool, KeyPhase::kRunTime, "true",
            "dataset_type=text: end each document with EOS (257). Token files hold their tokens "
            "as written (precast tokenize adds BOS and EOS)."},
    no_effect_run("use_truncation", T::kBool, "true", kDataSetting),
    no_effect_run("max_corpus_chars", T::kInt, "10000000", kDataSetting),
    no_effect_run("train_data_columns", T::kStringList, "[text]", kDataSetting),
    no_effect_run("train_image_column", T::kAny, "image", kDataSetting),
    no_effect_run("eval_data_columns", T::kStringList, "[text]", kDataSetting),
    no_effect_run("eval_image_column", T::kAny, "image", kDataSetting),
    no_effect_run("default_prompt", T::kString, "''", kDataSetting),
    KeySpec{"num_epoch", T::kInt, KeyPhase::kRunTime, "1",
            "Passes over the token or text dataset; the run ends when they are done."},
    no_effect_run("generate_padding_batch_train", T::kBool, "false", kDataSetting),
    no_effect_run("generate_padding_batch_eval", T::kBool, "false", kDataSetting),
    no_effect_run("max_segments_per_seq", T::kInt, "-1", kDataSetting),
    no_effect_run("hf_path", T::kString, "''", kDataSetting),
    nullable(no_effect_run("hf_name", T::kString, "''", kDataSetting)),
    nullable(no_effect_run("hf_data_dir", T::kString, "''", kDataSetting)),
    nullable(no_effect_run("hf_train_files", T::kString, "''", kDataSetting)),
    nullable(no_effect_run("hf_eval_split", T::kString, "''", kDataSetting)),
    nullable(no_effect_run("hf_eval_files", T::kString, "''", kDataSetting)),
    nullable(no_effect_run("hf_access_token", T::kString, "''", kDataSetting)),
    no_effect_run("grain_train_files", T::kString, "''", kDataSetting),
    no_effect_run("grain_eval_files", T::kString, "''", kDataSetting),
    no_effect_run("grain_train_mixture_config_path", T::kString, "''", kDataSetting),
    no_effect_run("grain_file_type", T::kString, "arrayrecord", kDataSetting),
    no_effect_run("grain_packing_type", T::kString, "first_fit", kDataSetting),
    no_effect_run("grain_worker_count", T::kInt, "1", kDataSetting),
    no_effect_run("grain_per_worker_buffer_size", T::kInt, "1", kDataSetting),
    no_effect_run("grain_num_threads", T::kInt, "16", kDataSetting),
    no_effect_run("grain_prefetch_buffer_size", T::kInt, "500", kDataSetting),
    no_effect_run("grain_worker_count_eval", T::kInt, "1", kDataSetting),
    no_effect_run("grain_per_worker_buffer_size_eval", T::kInt, "1", kDataSetting),
    no_effect_run("grain_ram_budget_mb", T::kInt, "1024", kDataSetting),
    no_effect_run("grain_num_threads_eval", T::kInt, "16", kDataSetting),
    no_effect_run("grain_prefetch_buffer_size_eval", T::kInt, "500", kDataSetting),
    no_effect_run("grain_data_source_max_workers", T::kInt, "16", kDataSetting),
    nullable(no_effect_run("grain_index_storage_option", T::kString, "None", kDataSetting)),
    no_effect_run("grain_shuffle_buffer_size", T::kInt, "100", kDataSetting),
    no_effect_run("grain_use_elastic_iterator", T::kBool, "false", kDataSetting),
    no_effect_run("olmo_index_path", T::kString, "''", kDataSetting),
    no_effect_run("olmo_path_remap_from", T::kString, "''", kDataSetting),
    no_effect_run("olmo_path_remap_to", T::kString, "''", kDataSetting),
    no_effect_run("olmo_apply_ngram_filter", T::kBool, "true", kDataSetting),
    KeySpec{"eval_start_step", T::kInt, KeyPhase::kRunTime, "0",
            "The first train step after which evaluation runs (then every eval_interval steps)."},
    // Memory features the plan does not model yet.
    KeySpec{"shard_optimizer_over_data", T::kBool, KeyPhase::kCompileTime, "false",
            "ZeRO-1: the optimizer state (Adam's mu and nu) also split over the data axis; the "
            "update runs on each device's shard and the new weights are all-gathered over data "
            "(adamw and adam_pax only)."},
    KeySpec{"custom_mesh", T::kString, KeyPhase::kCompileTime, "''",
            "A named custom device order: hybrid_ring_64x4 or hybrid_ring_32x8 (rings of 4 or 8 "
            "devices cut from a 16x16 slice; ICI values {1, 4, 64} or {1, 8, 32}), read across "
            "slices or with allow_split_physical_axes. It reorders devices only: per-device "
            "memory is that of the ici_* mesh."},
    KeySpec{"allow_split_physical_axes", T::kBool, KeyPhase::kCompileTime, "false",
            "Let one mesh axis span parts of several physical axes (and use custom_mesh on one "
            "slice). It changes the device order only, not the per-device memory."},
    // Vocabulary tiling settings.
    unsupported_compile("vocab_tiling_ag_once", T::kBool, "false", kVocabTilingSetting),
    // Batch-size ramp-up settings.
    no_effect_run("per_device_batch_size_start", T::kFloat, "4.0", kRampupSetting),
    no_effect_run("per_device_batch_size_increment", T::kFloat, "2.0", kRampupSetting),
    no_effect_run("global_rampup_samples", T::kInt, "500", kRampupSetting),
    // Pathways, colocated Python and elastic training.
    unsupported_run("colocated_python_data_input", T::kBool, "false", kPlatformFeature),
    unsupported_run("enable_single_controller", T::kBool, "false", kPlatformFeature),
    unsupported_run("subslice_shape", T::kString, "''", kPlatformFeature),
    unsupported_run("elastic_enabled", T::kBool, "false", kPlatformFeature),
    // DiLoCo settings.
    no_effect_run("diloco_sync_period", T::kInt, "36", kDilocoSetting),
    no_effect_run("diloco_outer_lr", T::kFloat, "0.3", kDilocoSetting),
    no_effect_run("diloco_outer_momentum", T::kFloat, "0.9", kDilocoSetting),
    nullable(no_effect_run("num_diloco_fragments", T::kInt, "None", kDilocoSetting)),
    no_effect_run("num_communication_overlapping_steps", T::kInt, "0", kDilocoSetting),
    no_effect_run("communication_overlapping_alpha", T::kFloat, "0.0", kDilocoSetting),
    // Loss-spike skipping settings.
    no_effect_run("skip_step_interval", T::kInt, "128", kSpikeSetting),
    no_effect_run("skip_step_scaling_factor", T::kFloat, "6.0", kSpikeSetting),
    // Muon optimizer settings.
    no_effect_run("muon_beta", T::kFloat, "0.95", kMuonSetting),
    no_effect_run("muon_weight_decay", T::kFloat, "0.0", kMuonSetting),
    nullable(no_effect_run("muon_consistent_rms", T::kFloat, "None", kMuonSetting)),
    // YaRN's softmax scale of MLA attention (the YaRN rotary embedding does not read it).
    implemented_compile("mscale", T::kFloat, "1.0", kYarnMscaleSetting),
    // Attention kernels (TPU splash/flash, GPU) and their tuning.
    no_effect_run("sa_block_q", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_kv", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_kv_compute", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_q_dkv", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_kv_dkv", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_kv_dkv_compute", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_q_dq", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_block_kv_dq", T::kInt, "512", kAttentionKernel),
    no_effect_run("sa_use_fused_bwd_kernel", T::kBool, "false", kAttentionKernel),
    no_effect_run("sa_bwd_dkv_megacore", T::kBool, "false", kAttentionKernel),
    no_effect_run("sa_q_layout", T::kString, "HEAD_DIM_MINOR", kAttentionKernel),
    no_effect_run("sa_k_layout", T::kString, "HEAD_DIM_MINOR", kAttentionKernel),
    no_effect_run("sa_v_layout", T::kString, "HEAD_DIM_MINOR", kAttentionKernel),
    no_effect_run("use_splash_scheduler", T::kBool, "false", kAttentionKernel),
    no_effect_run("ring_scan_unroll", T::kInt, "1", kAttentionKernel),
    no_effect_run("sa_fuse_reciprocal", T::kBool, "true", kAttentionKernel),
    no_effect_run("sa_use_base2_exp", T::kBool, "true", kAttentionKernel),
    nullable(no_effect_run("local_sa_block_q", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_kv", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_kv_compute", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_q_dkv", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_kv_dkv", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_kv_dkv_compute", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_q_dq", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_block_kv_dq", T::kInt, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_use_fused_bwd_kernel", T::kBool, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_q_layout", T::kString, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_k_layout", T::kString, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_v_layout", T::kString, "None", kAttentionKernel)),
    nullable(no_effect_run("local_use_splash_scheduler", T::kBool, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_fuse_reciprocal", T::kBool, "None", kAttentionKernel)),
    nullable(no_effect_run("local_sa_use_base2_exp", T::kBool, "None", kAttentionKernel)),
    no_effect_run("use_max_logit_estimate", T::kInt, "-1", kAttentionKernel),
    no_effect_run("cost_estimate_flops_fwd", T::kInt, "-1", kAttentionKernel),
    no_effect_run("cost_estimate_flops_bwd", T::kInt, "-1", kAttentionKernel),
    no_effect_run("dq_reduction_steps", T::kInt, "0", kAttentionKernel),
    no_effect_run("context_parallel_load_balance", T::kBool, "true", kAttentionKernel),
    no_effect_run("context_parallel_reorder_strategy", T::kString, "auto", kAttentionKernel),
    no_effect_run("use_tokamax_splash", T::kBool, "false", kAttentionKernel),
    no_effect_run("use_jax_splash", T::kBool, "false", kAttentionKernel),
    no_effect_run("force_q_layout", T::kBool, "false", kAttentionKernel),
    // Multimodal input.
    unsupported_compile("use_multimodal", T::kBool, "false", kMultimodalFeature),
    unsupported_compile("use_audio", T::kBool, "false", kMultimodalFeature),
    unsupported_compile("use_mrope", T::kBool, "false", kMultimodalFeature),
    // Vision and audio encoder settings.
    no_effect_run("freeze_vision_encoder_params", T::kBool, "true", kMultimodalSetting),
    no_effect_run("freeze_audio_encoder_params", T::kBool, "true", kMultimodalSetting),
    no_effect_run("dtype_mm", T::kString, "float32", kMultimodalSetting),
    // Not in MaxText's base.yml (a types.py field, default VisionEncoderBlockType.NONE); its
    // multimodal model files (gemma3, llama4, qwen3-vl/omni) set it.
    no_effect_run("vision_encoder_block", T::kString, "none", kMultimodalSetting),
    nullable(no_effect_run("remat_policy_for_vit", T::kString, "minimal", kMultimodalSetting)),
    nullable(no_effect_run("image_size_for_vit", T::kAny, "896", kMultimodalSetting)),
    no_effect_run("image_path", T::kString, "''", kMultimodalSetting),
    no_effect_run("video_path", T::kString, "''", kMultimodalSetting),
    no_effect_run("audio_path", T::kString, "''", kMultimodalSetting),
    no_effect_run("image_placeholder", T::kString, "'<|image|>'", kMultimodalSetting),
    no_effect_run("video_placeholder", T::kString, "'<|video|>'", kMultimodalSetting),
    no_effect_run("audio_placeholder", T::kString, "'<|audio|>'", kMultimodalSetting),
    no_effect_run("use_audio_in_video", T::kBool, "false", kMultimodalSetting),
    nullable(no_effect_run("video_max_grid_t", T::kInt, "None", kMultimodalSetting)),
    nullable(no_effect_run("video_max_grid_h", T::kInt, "None", kMultimodalSetting)),
    nullable(no_effect_run("video_max_grid_w", T::kInt, "None", kMultimodalSetting)),
    no_effect_run("posemb_type_for_vit", T::kString, "learn", kMultimodalSetting),
    no_effect_run("max_num_images_per_example", T::kInt, "-1", kMultimodalSetting),
    no_effect_run("vision_output_length", T::kInt, "-1", kMultimodalSetting),
    no_effect_run("hidden_size_for_vit", T::kInt, "1408", kMultimodalSetting),
    no_effect_run("intermediate_size_for_vit", T::kInt, "5632", kMultimodalSetting),
    no_effect_run("num_attention_heads_for_vit", T::kInt, "16", kMultimodalSetting),
    no_effect_run("num_channels_for_vit", T::kInt, "3", kMultimodalSetting),
    no_effect_run("tile_size_for_vit", T::kInt, "336", kMultimodalSetting),
    no_effect_run("patch_size_for_vit", T::kInt, "14", kMultimodalSetting),
    no_effect_run("conv_stride_for_vit", T::kInt, "14", kMultimodalSetting),
    no_effect_run("num_hidden_layers_for_vit", T::kInt, "34", kMultimodalSetting),
    no_effect_run("projector_input_dim_for_vit", T::kInt, "4096", kMultimodalSetting),
    no_effect_run("projector_output_dim_for_vit", T::kInt, "4096", kMultimodalSetting),
    no_effect_run("rope_theta_for_vit", T::kInt, "10000", kMultimodalSetting),
    no_effect_run("vision_output_dim_for_vit", T::kInt, "4096", kMultimodalSetting),
    no_effect_run("pixel_shuffle_ratio_for_vit", T::kFloat, "0.5", kMultimodalSetting),
    no_effect_run("projector_dropout_for_vit", T::kFloat, "0.0", kMultimodalSetting),
    no_effect_run("spatial_merge_size_for_vit", T::kInt, "2", kMultimodalSetting),
    no_effect_run("out_hidden_size_for_vit", T::kInt, "512", kMultimodalSetting),
    no_effect_run("temporal_patch_size_for_vit", T::kInt, "2", kMultimodalSetting),
    no_effect_run("num_position_embeddings_for_vit", T::kInt, "1024", kMultimodalSetting),
    no_effect_run("deepstack_visual_indexes_for_vit", T::kIntList, "[]", kMultimodalSetting),
    no_effect_run("d_model_for_audio", T::kInt, "256", kMultimodalSetting),
    no_effect_run("encoder_attention_heads_for_audio", T::kInt, "4", kMultimodalSetting),
    no_effect_run("encoder_ffn_dim_for_audio", T::kInt, "512", kMultimodalSetting),
    no_effect_run("encoder_layers_for_audio", T::kInt, "2", kMultimodalSetting),
    no_effect_run("attention_dropout_for_audio", T::kFloat, "0.0", kMultimodalSetting),
    no_effect_run("activation_dropout_for_audio", T::kFloat, "0.0", kMultimodalSetting),
    no_effect_run("activation_function_for_audio", T::kString, "gelu", kMultimodalSetting),
    no_effect_run("num_mel_bins_for_audio", T::kInt, "128", kMultimodalSetting),
    no_effect_run("max_source_positions_for_audio", T::kInt, "1500", kMultimodalSetting),
    no_effect_run("scale_embedding_for_audio", T::kBool, "true", kMultimodalSetting),
    no_effect_run("n_window_for_audio", T::kInt, "50", kMultimodalSetting),
    no_effect_run("n_window_infer_for_audio", T::kInt, "800", kMultimodalSetting),
    no_effect_run("conv_chunksize_for_audio", T::kInt, "500", kMultimodalSetting),
    no_effect_run("downsample_hidden_size_for_audio", T::kInt, "256", kMultimodalSetting),
    no_effect_run("output_dim_for_audio", T::kInt, "512", kMultimodalSetting),
    no_effect_run("num_conv_layers_for_audio", T::kInt, "3", kMultimodalSetting),
    no_effect_run("max_timescale_for_audio", T::kFloat, "10000.0", kMultimodalSetting),
    no_effect_run("max_sample_len_for_audio", T::kInt, "10000", kMultimodalSetting),
    no_effect_run("mrope_section", T::kIntList, "[24, 20, 20]", kMultimodalSetting),
    no_effect_run("position_id_per_seconds", T::kInt, "25", kMultimodalSetting),
    // Distillation settings.
    no_effect_run("distill_alpha", T::kFloat, "0.5", kDistillationSetting),
    no_effect_run("distill_temperature", T::kFloat, "1.0", kDistillationSetting),
    no_effect_run("distill_beta", T::kFloat, "0.0", kDistillationSetting),
    no_effect_run("distill_feature_loss_type", T::kString, "cosine", kDistillationSetting),
    nullable(no_effect_run("distill_layer_indices", T::kAny, "None", kDistillationSetting)),
    nullable(no_effect_run("distill_alpha_end", T::kFloat, "None", kDistillationSetting)),
    no_effect_run("distill_alpha_schedule", T::kString, "constant", kDistillationSetting),
    nullable(no_effect_run("distill_temperature_end", T::kFloat, "None", kDistillationSetting)),
    no_effect_run("distill_temperature_schedule", T::kString, "constant", kDistillationSetting),
    nullable(no_effect_run("distill_beta_end", T::kFloat, "None", kDistillationSetting)),
    no_effect_run("distill_beta_schedule", T::kString, "constant", kDistillationSetting),
    // Elastic training settings.
    no_effect_run("elastic_backup_kind", T::kString, "snapshot", kElasticSetting),
    no_effect_run("elastic_timeout_seconds", T::kInt, "300", kElasticSetting),
    no_effect_run("elastic_max_retries", T::kInt, "10", kElasticSetting),
    no_effect_run("elastic_min_slice_count", T::kInt, "-1", kElasticSetting),
};

}  // namespace

std::span<const KeySpec> maxtext_compatibility_keys() {
  return kCompatibilityKeys;
}

}  // namespace precast
