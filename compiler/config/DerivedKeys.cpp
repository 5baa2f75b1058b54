#include "compiler/config/DerivedKeys.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "compiler/config/MemoryKeyChecks.h"

namespace precast {
namespace {

ConfigValue int_value(int64_t v) {
  return ConfigValue::integer(v);
}

std::string describe(const Config& config, std::string_view key) {
  const ConfigEntry& entry = config.entry(key);
  std::string out = std::string(key) + "=" + entry.value.to_yaml();
  if (entry.source != ValueSource::kDefault) out += " (" + entry.origin + ")";
  return out;
}

Status require_positive(const Config& config, std::string_view key) {
  const ConfigValue& v = config.get(key);
  if (v.as_float() > 0) return Status::success();
  return usage_error(describe(config, key) + ": must be greater than zero.");
}

Status derive_model_dims(Config& config) {
  PRECAST_ASSIGN_OR_RETURN(ParameterScale scale,
                           individual_scales(config.get_int("global_parameter_scale")));
  auto scaled = [&](std::string_view base, int doublings) {
    return config.get_int(base) << doublings;
  };
  config.set_derived("emb_dim", int_value(scaled("base_emb_dim", scale.emb)));
  config.set_derived("num_query_heads",
                     int_value(scaled("base_num_query_heads", scale.heads_and_mlp)));
  config.set_derived("num_kv_heads", int_value(scaled("base_num_kv_heads", scale.heads_and_mlp)));
  config.set_derived("mlp_dim", int_value(scaled("base_mlp_dim", scale.heads_and_mlp)));
  int64_t moe = config.get_int("base_moe_mlp_dim");
  config.set_derived("moe_mlp_dim", int_value(moe < 0 ? moe : moe << scale.heads_and_mlp));
  config.set_derived("num_decoder_layers",
                     int_value(scaled("base_num_decoder_layers", scale.layers)));
  if (config.get_int("num_query_heads") % config.get_int("num_kv_heads") != 0) {
    return usage_error(
        "num_query_heads " + std::to_string(config.get_int("num_query_heads")) +
        " is not a multiple of num_kv_heads " + std::to_string(config.get_int("num_kv_heads")) +
        " (from " + describe(config, "base_num_query_heads") + ", " +
        describe(config, "base_num_kv_heads") + "): grouped-query attention needs whole groups.");
  }
  return Status::success();
}

// maxtext-facts §a, calculate_global_batch_sizes.
Status derive_batch_sizes(Config& config, int64_t devices) {
  double pdbs = config.get_float("per_device_batch_size");
  int64_t accumulation = config.get_int("gradient_accumulation_steps");
  double expansion = config.get_float("expansion_factor_real_data");
  double factor = expansion > 0 ? std::max(expansion, 1.0) : 1.0;
  auto micro = static_cast<int64_t>(static_cast<double>(devices) * pdbs);
  if (micro < 1) {
    return usage_error(describe(config, "per_device_batch_size") + " on " +
                       std::to_string(devices) +
                       " devices trains on fewer than one row; raise it to at least " +
                       std::to_string(1.0 / static_cast<double>(devices)) + ".");
  }
  int64_t load = pdbs < 1 ? static_cast<int64_t>(static_cast<double>(devices) * factor)
                          : static_cast<int64_t>(static_cast<double>(devices) * pdbs * factor);
  config.set_derived("micro_batch_size_to_train_on", int_value(micro));
  config.set_derived("global_batch_size_to_train_on", int_value(micro * accumulation));
  config.set_derived("global_batch_size_to_load", int_value(load * accumulation));

  if (config.get_float("eval_per_device_batch_size") == 0.0) {
    config.set_derived("eval_per_device_batch_size", ConfigValue::floating(pdbs));
  }
  double eval_pdbs = config.get_float("eval_per_device_batch_size");
  auto eval_micro = static_cast<int64_t>(static_cast<double>(devices) * eval_pdbs);
  int64_t eval_load = eval_pdbs < 1
                          ? static_cast<int64_t>(static_cast<double>(devices) * factor)
                          : static_cast<int64_t>(static_cast<double>(devices) * eval_pdbs * factor);
  config.set_derived("micro_batch_size_to_eval_on", int_value(eval_micro));
  config.set_derived("global_batch_size_to_eval_on", int_value(eval_micro));
  config.set_derived("global_batch_size_to_load_eval", int_value(eval_load));
  return Status::success();
}

Status derive_schedule(Config& config) {
  int64_t steps = config.get_int("steps");
  int64_t schedule = config.get_int("learning_rate_schedule_steps");
  if (steps == -1 && schedule == -1) {
    return usage_error(
        "steps=-1 and learning_rate_schedule_steps=-1: each takes the other's "
        "value, so at least one must be set.");
  }
  if (schedule == -1) config.set_derived("learning_rate_schedule_steps", int_value(steps));
  if (steps == -1) config.set_derived("steps", int_value(schedule));
  if (config.get_int("steps") < 0) {
    return usage_error(describe(config, "steps") + ": must be -1 or a step count >= 0.");
  }
  return Status::success();
}

std::string default_run_name(const Config& config) {
  if (const char* jobset = std::getenv("JOBSET_NAME"); jobset != nullptr && *jobset != '\0') {
    return jobset;
  }
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d-%H-%M", &local);
  return config.get_string("model_name") + "_" + stamp;
}

void derive_paths(Config& config) {
  if (config.get_string("run_name").empty()) {
    config.set_derived("run_name", ConfigValue::string(default_run_name(config)));
  }
  if (config.get_string("base_output_directory").empty()) {
    config.set_derived("base_output_directory", ConfigValue::string("./maxtext_output"));
  }
  std::string root =
      config.get_string("base_output_directory") + "/" + config.get_string("run_name") + "/";
  config.set_derived("checkpoint_dir", ConfigValue::string(root + "checkpoints/"));
  config.set_derived("metrics_dir", ConfigValue::string(root + "metrics/"));
  config.set_derived("tensorboard_dir", ConfigValue::string(root + "tensorboard/"));
}

void derive_numerics(Config& config) {
  if (config.get_string("mu_dtype").empty()) {
    config.set_derived("mu_dtype", config.get("weight_dtype"));
  }
  for (std::string_view key : {"attn_logits_soft_cap", "final_logits_soft_cap"}) {
    const ConfigValue& v = config.get(key);
    if (!v.is_none() && v.as_float() == 0.0) config.set_derived(key, ConfigValue::none());
  }
}

// ici_parallelism / dcn_parallelism as MaxText lists them: one value per mesh axis, unfilled.
Status derive_parallelism_lists(Config& config) {
  ConfigValue::List ici, dcn;
  for (const std::string& axis : config.get_string_list("mesh_axes")) {
    std::string key_axis = axis == "stage" ? "pipeline" : axis;  // inverse of mesh_axis_of
    std::string ici_key = "ici_" + key_axis + "_parallelism";
    std::string dcn_key = "dcn_" + key_axis + "_parallelism";
    if (find_key(ici_key) == nullptr) {
      return usage_error(describe(config, "mesh_axes") + ": mesh axis '" + axis + "' has no " +
                         ici_key + " key. Use MaxText's axis names.");
    }
    ici.push_back(config.get(ici_key));
    dcn.push_back(config.get(dcn_key));
  }
  // An axis outside mesh_axes (e.g. the 2025-era `sequence`) must stay at 1; the -1 auto-fill
  // defaults are allowed to stay unused.
  std::vector<std::string> axes = config.get_string_list("mesh_axes");
  for (std::string_view key_axis : parallelism_key_axes()) {
    std::string mesh_axis(mesh_axis_of(key_axis));
    if (std::find(axes.begin(), axes.end(), mesh_axis) != axes.end()) continue;
    for (std::string prefix : {"ici_", "dcn_"}) {
      std::string key = prefix + std::string(key_axis) + "_parallelism";
      int64_t value = config.get_int(key);
      bool untouched = config.entry(key).source == ValueSource::kDefault ||
                       config.entry(key).source == ValueSource::kBase;
      if (value == 1 || (value == -1 && untouched)) continue;
      return usage_error(describe(config, key) + ": mesh_axes has no '" + mesh_axis +
                         "' axis, so this parallelism cannot be applied. Set it to 1 (for "
                         "sequence parallelism use the context axis: " +
                         prefix + "context_parallelism).");
    }
  }
  config.set_derived("ici_parallelism", ConfigValue::list(std::move(ici)));
  config.set_derived("dcn_parallelism", ConfigValue::list(std::move(dcn)));
  return Status::success();
}

Status validate(const Config& config) {
  for (std::string_view key :
       {"base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim",
        "base_num_decoder_layers", "head_dim", "vocab_size", "max_target_length",
        "per_device_batch_size", "gradient_accumulation_steps", "num_vocab_tiling"}) {
    PRECAST_RETURN_IF_ERROR(require_positive(config, key));
  }
  if (config.get_string("attention_type") == "local_sliding" &&
      config.get_int("sliding_window_size") <= 0) {
    return usage_error(describe(config, "sliding_window_size") +
                       ": `sliding_window_size` must be an integer > 0 for 'local_sliding' "
                       "attention.");
  }
  if (!config.get_string("load_parameters_path").empty() &&
      !config.get_string("load_full_state_path").empty()) {
    return usage_error(describe(config, "load_parameters_path") + ", " +
                       describe(config, "load_full_state_path") +
                       ": At most one of load_parameters_path or load_full_state_path should be "
                       "set.");
  }
  PRECAST_RETURN_IF_ERROR(check_memory_keys(config));
  if (config.get_int("compile_topology_num_slices") == 0 ||
      config.get_int("compile_topology_num_slices") < -1) {
    return usage_error(describe(config, "compile_topology_num_slices") +
                       ": You must set compile_topology_num_slices to a positive integer (or -1 "
                       "for one slice).");
  }
  return Status::success();
}

}  // namespace

Expected<ParameterScale> individual_scales(int64_t scale) {
  if (scale == 0) {
    return usage_error("global_parameter_scale=0: Global parameter scale cannot be zero.");
  }
  if (scale < 0 || (scale & (scale - 1)) != 0) {
    return usage_error("global_parameter_scale=" + std::to_string(scale) +
                       ": Global parameter scale should be a power of two. If you'd like finer "
                       "grained control, manually set base_emb_dim, base_num_query_heads, "
                       "base_mlp_dim, base_num_decoder_layers and/or head_dim.");
  }
  int log2 = 0;
  while ((int64_t{1} << (log2 + 1)) <= scale) ++log2;
  int base = log2 / 3, remainder = log2 % 3;
  return ParameterScale{base + (remainder > 0 ? 1 : 0), base + (remainder > 1 ? 1 : 0), base};
}

int64_t resolved_num_slices(const Config& config) {
  int64_t explicit_slices = config.get_int("num_slices");
  if (explicit_slices != -1) return explicit_slices;
  int64_t topology_slices = config.get_int("compile_topology_num_slices");
  return topology_slices > 0 ? topology_slices : 1;
}

std::string resolved_topology_name(const Config& config) {
  const std::string& name = config.get_string("compile_topology");
  return name.empty() ? "cpu-1" : name;
}

Status derive_keys(Config& config, int64_t num_target_devices) {
  PRECAST_RETURN_IF_ERROR(validate(config));
  config.set_derived("num_target_devices", int_value(num_target_devices));
  config.set_derived("num_slices", int_value(resolved_num_slices(config)));
  PRECAST_RETURN_IF_ERROR(derive_model_dims(config));
  PRECAST_RETURN_IF_ERROR(derive_batch_sizes(config, num_target_devices));
  PRECAST_RETURN_IF_ERROR(derive_schedule(config));
  PRECAST_RETURN_IF_ERROR(derive_parallelism_lists(config));
  derive_paths(config);
  derive_numerics(config);
  return Status::success();
}

}  // namespace precast
