#include "compiler/driver/Analyze.h"

#include <fmt/format.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <map>
#include <optional>

#include "compiler/analysis/Bytes.h"
#include "compiler/analysis/XlaTempOverhead.h"
#include "compiler/config/DerivedKeys.h"
#include "compiler/config/RematPolicies.h"
#include "compiler/driver/JsonText.h"
#include "ir/PassManager.h"
#include "ir/passes/IrPasses.h"

namespace precast {
namespace {

// Peak FLOP/s of the device for the config's activation dtype, falling back to bfloat16.
double peak_flops(const Topology& topology, const std::string& dtype) {
  auto it = topology.peak_flops_per_device.find(dtype);
  if (it == topology.peak_flops_per_device.end())
    it = topology.peak_flops_per_device.find("bfloat16");
  if (it == topology.peak_flops_per_device.end())
    it = topology.peak_flops_per_device.find("float32");
  return it == topology.peak_flops_per_device.end() ? 0.0 : it->second;
}

// How many pieces the batch is split into: the mesh axes of the first `activation_batch` rule
// (MaxText's data, fsdp, fsdp_transpose, expert). A global batch that this does not divide is
// not a run MaxText accepts (and the partitioner would keep it whole on every device).
int64_t batch_shards(const AnalysisReport& report) {
  Expected<std::vector<AxisRule>> rules = axis_rules_from_config(report.resolved.config);
  if (!rules.ok()) return 1;
  for (const AxisRule& rule : *rules) {
    if (rule.logical != "activation_batch") continue;
    int64_t shards = 1;
    for (const std::string& axis : rule.mesh_axes) shards *= report.resolved.mesh.axis_size(axis);
    return shards;
  }
  return 1;
}

// per_device_batch_size `pdbs` on `devices` devices gives whole rows that split evenly.
bool splits_evenly(double pdbs, double devices, int64_t shards) {
  double rows = pdbs * devices;
  return rows >= 1.0 && rows == std::floor(rows) &&
         static_cast<int64_t>(rows) % std::max<int64_t>(shards, 1) == 0;
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string json_int_list(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

}  // namespace

void tune_allocator_for_analysis() { mallopt(M_MXFAST, 0); }

Expected<AnalysisReport> analyze(const ConfigRequest& request,
                                 const std::filesystem::path& topologies_file,
                                 const AnalyzeOptions& options) {
  auto start = std::chrono::steady_clock::now();
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve_config(request, topologies_file));
  double resolve_ms = milliseconds_since(start);
  PRECAST_ASSIGN_OR_RETURN(AnalysisReport report, analyze(std::move(resolved), options));
  report.resolve_ms = resolve_ms;
  return report;
}

Expected<AnalysisReport> analyze(ResolvedConfig resolved, const AnalyzeOptions& options) {
  if (!options.stop_after.empty()) {
    return internal_error("analyze runs every stage of the pipeline (stop_after must be empty)");
  }
  PRECAST_ASSIGN_OR_RETURN(ModelSpec model, model_spec_from_config(resolved.config));
  AnalysisReport report;
  report.resolved = std::move(resolved);
  report.model = std::move(model);
  report.batch = batch_spec_from_config(report.resolved.config);
  report.parameters = count_parameters(report.model);
  report.flops = model_flops_per_device(report.model, report.batch);
  PRECAST_ASSIGN_OR_RETURN(TrainProgram program,
                           run_pipeline(report.resolved.config, report.resolved.topology,
                                        report.resolved.mesh, options));
  auto report_start = std::chrono::steady_clock::now();
  if (!program.global_counts || !program.plan || program.layout.function == nullptr) {
    return internal_error("analyze: the pipeline left no counted, planned @train_step");
  }
  // Model FLOPs from the global step's dots and attention (MaxText's conventions).
  report.train_step_ops = program.global_step_ops;
  report.ir_flops = model_flops_of_train_step(*program.global_counts, program.layout.rows_per_step,
                                              report.batch);
  // Memory, collectives and hardware FLOPs from the program one device runs.
  const ir::Function& step = *program.layout.function;
  report.device_step_ops = step.num_ops();
  report.hardware_flops_per_device = count_function(step).hardware_flops;
  report.memory.plan = std::move(*program.plan);
  program.plan.reset();
  if (report.resolved.config.get_bool("optimizer_memory_host_offload") &&
      report.resolved.topology.platform != "cpu") {
    report.memory.host = move_optimizer_state_to_host(step, report.memory.plan);
  }
  report.memory.collectives = count_collectives(step);
  for (const ir::PassTiming& stage : program.stages) {
    if (stage.name == "schedule") report.schedule_changed = stage.changed;
  }
  int64_t limit = report.resolved.config.get_int("hbm_limit_bytes");
  report.memory_limit_bytes = limit > 0 ? limit : report.resolved.topology.memory_bytes_per_device;
  report.program = std::make_shared<TrainProgram>(std::move(program));

  const Topology& t = report.resolved.topology;
  double peak = peak_flops(t, report.model.dtype);
  if (peak > 0) {
    report.compute_seconds = static_cast<double>(report.hardware_flops_per_device) / peak;
  }
  int64_t ici = 0, dcn = 0;
  for (const auto& [kind, totals] : report.memory.collectives) {
    (kind.ends_with("DCN") ? dcn : ici) += totals.wire_bytes;
  }
  if (t.ici_bytes_per_second_per_device > 0) {
    report.ici_seconds = static_cast<double>(ici) / t.ici_bytes_per_second_per_device;
  }
  if (t.dcn_bytes_per_second_per_host > 0 && t.chips_per_host > 0) {
    double per_device = t.dcn_bytes_per_second_per_host /
                        static_cast<double>(t.chips_per_host * t.devices_per_chip);
    report.dcn_seconds = static_cast<double>(dcn) / per_device;
  }
  report.report_ms = milliseconds_since(report_start);
  return report;
}

std::vector<std::pair<std::string, std::vector<std::string>>> candidate_meshes(
    const AnalysisReport& base) {
  const Mesh& mesh = base.resolved.mesh;
  int64_t per_slice = mesh.num_devices / std::max<int64_t>(1, mesh.num_slices);
  // Every other ICI axis is set to 1, so the three named ones hold the slice's devices.
  std::vector<std::string> others;
  for (const char* key :
       {"ici_diloco_parallelism", "ici_pipeline_parallelism", "ici_fsdp_transpose_parallelism",
        "ici_sequence_parallelism", "ici_context_parallelism",
        "ici_context_autoregressive_parallelism", "ici_context_usp_ulysses_parallelism",
        "ici_tensor_sequence_parallelism", "ici_expert_parallelism",
        "ici_autoregressive_parallelism"}) {
    others.push_back(fmt::format("{}=1", key));
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  auto add = [&](int64_t data, int64_t fsdp, int64_t tensor) {
    if (data * fsdp * tensor != per_slice) return;
    std::vector<std::string> label;
    if (data > 1) label.push_back(fmt::format("data {}", data));
    if (fsdp > 1) label.push_back(fmt::format("fsdp {}", fsdp));
    if (tensor > 1) label.push_back(fmt::format("tensor {}", tensor));
    if (label.empty()) label.push_back("1 device");
    std::vector<std::string> overrides = others;
    overrides.push_back(fmt::format("ici_data_parallelism={}", data));
    overrides.push_back(fmt::format("ici_fsdp_parallelism={}", fsdp));
    overrides.push_back(fmt::format("ici_tensor_parallelism={}", tensor));
    out.emplace_back(fmt::format("{}", fmt::join(label, " x ")), std::move(overrides));
  };
  add(1, per_slice, 1);
  for (int64_t tensor : {2, 4, 8}) {
    if (per_slice % tensor == 0 && per_slice > tensor) add(1, per_slice / tensor, tensor);
  }
  if (per_slice % 2 == 0 && per_slice > 2) add(2, per_slice / 2, 1);
  if (per_slice > 1) add(per_slice, 1, 1);
  return out;
}

Expected<std::vector<FitCandidate>> search_fits(const ConfigRequest& request,
                                                const std::filesystem::path& topologies_file,
                                                const AnalysisReport& base, bool search_mesh) {
  double pdbs = base.batch.per_device_batch_size;
  double devices = static_cast<double>(base.resolved.mesh.num_devices);
  std::vector<std::pair<std::string, std::vector<std::string>>> meshes = {{"", {}}};
  if (search_mesh) meshes = candidate_meshes(base);
  std::vector<FitCandidate> fits;
  for (const auto& [mesh_label, mesh_overrides] : meshes) {
    for (std::string_view policy : remat_policy_search_order()) {
      // The batch axes' size of this mesh, known after its first analysis; a batch that does
      // not split over them is not tried.
      int64_t shards = 0;
      auto attempt = [&](double batch) -> std::optional<AnalysisReport> {
        if (shards > 0 && !splits_evenly(batch, devices, shards)) return std::nullopt;
        ConfigRequest candidate = request;
        candidate.overrides.insert(candidate.overrides.end(), mesh_overrides.begin(),
                                   mesh_overrides.end());
        candidate.overrides.push_back(fmt::format("remat_policy={}", policy));
        candidate.overrides.push_back(fmt::format("per_device_batch_size={}", batch));
        Expected<AnalysisReport> r = analyze(candidate, topologies_file);
        if (!r.ok()) return std::nullopt;
        if (shards == 0) shards = batch_shards(*r);
        if (!r->fits() || !splits_evenly(batch, devices, shards)) return std::nullopt;
        return std::move(*r);
      };
      // Memory grows with the batch: double while it fits, else halve until it does (while the
      // batch still splits over the batch axes).
      std::optional<AnalysisReport> best;
      double best_batch = 0;
      if (std::optional<AnalysisReport> r = attempt(pdbs)) {
        best = std::move(r);
        best_batch = pdbs;
        for (double b = pdbs * 2; b <= pdbs * 64; b *= 2) {
          std::optional<AnalysisReport> bigger = attempt(b);
          if (!bigger) break;
          best = std::move(bigger);
          best_batch = b;
        }
      } else {
        for (double b = pdbs / 2; shards > 0 && splits_evenly(b, devices, shards); b /= 2) {
          if (std::optional<AnalysisReport> smaller = attempt(b)) {
            best = std::move(smaller);
            best_batch = b;
            break;
          }
        }
      }
      if (!best) continue;
      FitCandidate c;
      c.mesh = mesh_label;
      c.remat_policy = policy;
      c.per_device_batch_size = best_batch;
      c.memory_gib = to_gib(best->memory.plan.total_bytes());
      c.step_seconds = best->step_seconds();
      c.tokens_per_second =
          c.step_seconds > 0 ? tokens_per_device(best->batch) / c.step_seconds : 0;
      fits.push_back(c);
    }
  }
  std::stable_sort(fits.begin(), fits.end(), [](const FitCandidate& a, const FitCandidate& b) {
    return a.tokens_per_second > b.tokens_per_second;
  });
  return fits;
}

std::string format_fits(const std::vector<FitCandidate>& fits, const AnalysisReport& base) {
  std::string out = fmt::format(
      "{} on {} ({:.2f} GiB per device): the largest per_device_batch_size that fits for each "
      "remat policy, fastest first (roofline estimate)\n",
      base.model.model_name, base.resolved.topology.name, to_gib(base.memory_limit_bytes));
  if (fits.empty()) {
    return out + "  nothing fits: use a larger topology or more fsdp/tensor parallelism\n";
  }
  bool meshes = std::any_of(fits.begin(), fits.end(),
                            [](const FitCandidate& c) { return !c.mesh.empty(); });
  std::string mesh_header = meshes ? fmt::format("{:<26}", "ici mesh") : "";
  out += fmt::format("  {}{:<24}{:>12}{:>14}{:>14}{:>18}\n", mesh_header, "remat_policy",
                     "batch/device", "memory GiB", "step s", "tokens/s/device");
  for (const FitCandidate& c : fits) {
    std::string mesh = meshes ? fmt::format("{:<26}", c.mesh) : "";
    out += fmt::format("  {}{:<24}{:>12g}{:>14.2f}{:>14.3f}{:>18.0f}\n", mesh, c.remat_policy,
                       c.per_device_batch_size, c.memory_gib, c.step_seconds, c.tokens_per_second);
  }
  return out;
}

int smallest_fitting_halving(int low, int high, const std::function<bool(int)>& fits) {
  // Each probe is analysed once, on its own thread; a probe the search turns out not to need is
  // still waited for (the futures' destructors), its answer unused.
  std::map<int, std::shared_future<bool>> probes;
  auto probe = [&](int k) -> std::shared_future<bool> {
    auto it = probes.find(k);
    if (it == probes.end()) {
      it = probes.emplace(k, std::async(std::launch::async, fits, k).share()).first;
    }
    return it->second;
  };
  int found = 0;
  while (low <= high) {
    int k = low + (high - low) / 2;
    // Speculate on the probe the search takes next when k does not fit (the configured batch did
    // not, so the larger batches are the likelier misses), while k is analysed.
    if (k < high) probe(k + 1 + (high - k - 1) / 2);
    if (probe(k).get()) {
      found = k;
      high = k - 1;
    } else {
      low = k + 1;
    }
  }
  return found;
}

std::vector<std::string> suggest_fits(const ConfigRequest& request,
                                      const std::filesystem::path& topologies_file,
                                      const AnalysisReport& report, int* analyses) {
  // Weights and optimizer state do not shrink with the batch or the remat policy: when they
  // alone exceed the device, only more sharding (or more devices) helps.
  bool state_too_big = report.memory.plan.argument_bytes >= report.memory_limit_bytes;
  std::atomic<int> count{0};
  auto try_override = [&request, &topologies_file, &count](const std::vector<std::string>& extra) {
    ++count;
    ConfigRequest candidate = request;
    candidate.overrides.insert(candidate.overrides.end(), extra.begin(), extra.end());
    // Without the schedule: what fits in program order fits scheduled too.
    AnalyzeOptions unscheduled;
    unscheduled.schedule = false;
    Expected<AnalysisReport> r = analyze(candidate, topologies_file, unscheduled);
    return r.ok() && r->fits() &&
           splits_evenly(r->batch.per_device_batch_size,
                         static_cast<double>(r->resolved.mesh.num_devices), batch_shards(*r));
  };
  // Three independent searches, run concurrently (each analysis builds its own module); the
  // suggestions are listed in this order whatever finishes first.
  // 1. The largest per_device_batch_size pdbs / 2^k (k = 1..6) that fits and still splits over
  //    the batch axes: memory grows with the batch, so a binary search over k (two probes at a
  //    time, the same answer as one at a time: smallest_fitting_halving).
  auto smaller_batch = [&]() -> std::string {
    double pdbs = report.batch.per_device_batch_size;
    double devices = static_cast<double>(report.resolved.mesh.num_devices);
    int high = state_too_big ? 0 : 6;
    int64_t shards = batch_shards(report);
    while (high >= 1 && !splits_evenly(pdbs / static_cast<double>(1 << high), devices, shards)) {
      --high;
    }
    int found = smallest_fitting_halving(1, high, [&](int k) {
      return try_override({fmt::format("per_device_batch_size={}", pdbs / (1 << k))});
    });
    return found > 0 ? fmt::format("per_device_batch_size={}", pdbs / (1 << found)) : "";
  };
  // 2. The first remat policy that keeps less than the current one (the list runs from most
  //    kept to least) and fits.
  auto lighter_remat = [&]() -> std::string {
    if (state_too_big) return "";
    const std::string& current = report.resolved.config.get_string("remat_policy");
    bool after_current = false;
    for (std::string_view policy : remat_policy_search_order()) {
      if (!after_current) {
        after_current = current == policy || (current == "none" && policy == "full");
        continue;
      }
      std::string o = fmt::format("remat_policy={}", policy);
      if (try_override({o})) return o;
    }
    return "";
  };
  // 3. A larger ici_fsdp_parallelism: fold another ICI axis (data, tensor, ...) into fsdp, which
  //    shards weights, gradients and optimizer state instead of replicating them.
  auto more_fsdp = [&]() -> std::string {
    const Mesh& mesh = report.resolved.mesh;
    for (size_t i = 0; i < mesh.axes.size() && i < mesh.ici.size(); ++i) {
      const std::string& axis = mesh.axes[i];
      if (axis == "fsdp" || axis == "stage" || axis == "diloco" || mesh.ici[i] <= 1) continue;
      std::vector<std::string> o = {fmt::format("ici_{}_parallelism=1", axis),
                                    "ici_fsdp_parallelism=-1"};
      if (try_override(o)) return fmt::format("{} {}", o[0], o[1]);
    }
    return "";
  };
  std::future<std::string> batch = std::async(std::launch::async, smaller_batch);
  std::future<std::string> remat = std::async(std::launch::async, lighter_remat);
  std::string fsdp = more_fsdp();
  std::vector<std::string> fits;
  for (std::string s : {batch.get(), remat.get(), fsdp}) {
    if (!s.empty()) fits.push_back(std::move(s));
  }
  if (analyses != nullptr) *analyses = count.load();
  return fits;
}

std::string format_outside_pipeline_timing(const AnalysisReport& report, double suggestions_ms,
                                           int suggestion_analyses, double format_ms) {
  std::string out = fmt::format("{:<28}{:>11}  {}\n", "outside the pipeline", "ms", "what");
  out += fmt::format("{:<28}{:>11.3f}  {}\n", "resolve-config", report.resolve_ms,
                     "layering, key checks, topology, mesh");
  out += fmt::format("{:<28}{:>11.3f}  {}\n", "report", report.report_ms,
                     "FLOP and collective counts, XLA temp overheads, host offload");
  out += fmt::format("{:<28}{:>11.3f}  {} re-analyses, concurrent (wall time)\n", "suggestions",
                     suggestions_ms, suggestion_analyses);
  out += fmt::format("{:<28}{:>11.3f}  {}\n", "output", format_ms,
                     "the text or JSON output (and --memory-timeline, --print-config)");
  return out;
}

std::string format_analysis_text(const AnalysisReport& r) {
  const Topology& t = r.resolved.topology;
  const Config& c = r.resolved.config;
  const ModelSpec& m = r.model;
  double peak = peak_flops(t, m.dtype);
  std::string out;
  out += fmt::format("Model: {} (decoder family {}), target {}\n", m.model_name,
                     decoder_family_name(m.family), t.name);
  out += fmt::format(
      "Topology: {}, {} devices in {} slice(s), {} host(s) per slice, {:.1f} GiB per device\n",
      t.platform == t.generation ? t.platform : t.platform + " " + t.generation,
      r.resolved.mesh.num_devices, r.resolved.mesh.num_slices, t.hosts_per_slice,
      to_gib(t.memory_bytes_per_device));
  out += r.resolved.mesh.num_devices_line() + "\n";
  out += fmt::format("Mesh axes: {}\n", fmt::join(r.resolved.mesh.axes, ", "));
  out += format_parameter_line(r.parameters) + "\n";
  out += format_tflops_block(r.flops) + "\n";
  out += fmt::format(
      "Train step IR: {} ops; model TFLOPs from its dots and attention {:.2f} ({})\n",
      r.train_step_ops, r.ir_flops.total_tflops(),
      r.ir_flops.total() == r.flops.total() ? "equal to the formula"
      : m.family == DecoderFamily::kOlmo3 && r.ir_flops.total() < r.flops.total()
          ? "below the formula: MaxText counts olmo3's sliding-window layers as full causal "
            "attention, the step attends only within the window"
      : m.family == DecoderFamily::kLlama4 && m.moe.sparse_matmul &&
              r.ir_flops.total() > r.flops.total()
          ? "above the formula: MaxText counts a chunked layer's (T // C)*C^2 + (T % C)^2 "
            "pairs, the step's attention masks the chunks out of full causal attention"
      : m.moe.enabled() && m.moe.drops_tokens() && r.ir_flops.total() > r.flops.total()
          ? "above the formula: the capacity path's dispatch and combine einsums and unfilled "
            "expert slots, which MaxText's formula leaves out"
      : m.moe.enabled() && r.ir_flops.total() > r.flops.total()
          ? "above the formula: every expert computes every token (dense expert matmuls), "
            "MaxText counts the chosen experts only"
          : "DIFFERS from the formula");
  out += fmt::format(
      "Per-device program: {} ops{}; hardware TFLOPs {:.2f} per device (remat_policy={} "
      "recomputation, every attention pair, elementwise, replicated work)\n",
      r.device_step_ops,
      r.resolved.mesh.num_devices > 1 ? " after SPMD partitioning" : "",
      static_cast<double>(r.hardware_flops_per_device / 1e12L), c.get_string("remat_policy"));
  out += format_memory_line(r.memory.plan) + "\n";
  if (std::string xla = format_xla_temp_line(r.memory.plan); !xla.empty()) out += xla + "\n";
  if (r.memory.host.any()) out += format_host_offload_line(r.memory.host) + "\n";
  out += format_memory_breakdown(*r.program->layout.function, r.memory.plan, 10, true);
  out += format_collectives(r.memory);
  out += fmt::format(
      "Step time estimate: {:.1f} ms (compute {:.1f} ms at peak, ICI {:.1f} ms, DCN {:.1f} ms; "
      "bandwidths from configs/topologies.yml)\n",
      1e3 * r.step_seconds(), 1e3 * r.compute_seconds, 1e3 * r.ici_seconds, 1e3 * r.dcn_seconds);
  double limit = to_gib(r.memory_limit_bytes);
  double need = to_gib(r.memory.plan.total_bytes());
  if (r.fits()) {
    out += fmt::format("Fits: {:.2f} GiB of {:.2f} GiB per device on {}\n", need, limit, t.name);
  } else {
    out += fmt::format("Out of memory: needs {:.2f} GiB of {:.2f} GiB per device on {}\n", need,
                       limit, t.name);
    for (const std::string& s : r.suggestions) {
      out += fmt::format("  fits with {} (verified by re-analysis)\n", s);
    }
    if (r.suggestions.empty() && r.memory.plan.argument_bytes >= r.memory_limit_bytes) {
      out += fmt::format(
          "  the weights and optimizer state alone take {:.2f} GiB per device: shard them over "
          "more devices (a larger topology, or ici_fsdp_parallelism / ici_tensor_parallelism)\n",
          to_gib(r.memory.plan.argument_bytes));
    } else if (r.suggestions.empty()) {
      out += "  no single override found that fits\n";
    }
  }
  out += fmt::format(
      "Model: emb_dim {}, heads {} (kv {}) x head_dim {}, mlp_dim {} ({}), layers {}{}, vocab {}\n",
      m.emb_dim, m.num_query_heads, m.num_kv_heads, m.head_dim, m.mlp_dim,
      fmt::join(m.mlp.activations, "+"), m.num_decoder_layers,
      m.family == DecoderFamily::kGemma2 ? " local/global pairs" : "", m.vocab_size);
  out += fmt::format(
      "Batch: per_device_batch_size {}, max_target_length {}, gradient_accumulation_steps {} -> "
      "{} rows per step ({} per micro-batch, {} loaded)\n",
      c.get("per_device_batch_size").to_python(), r.batch.max_target_length,
      r.batch.gradient_accumulation_steps, r.batch.global_batch_size_to_train_on,
      r.batch.micro_batch_size_to_train_on, r.batch.global_batch_size_to_load);
  double tokens = tokens_per_device(r.batch);
  out += fmt::format("Tokens per device per step: {:.0f} ({:.0f} per step on all devices)\n",
                     tokens, tokens * static_cast<double>(r.resolved.mesh.num_devices));
  if (peak > 0) {
    out += fmt::format(
        "Compute floor: {:.2f} TFLOPs at {:g} TFLOP/s peak ({}) = {:.1f} ms per step at 100% "
        "MFU\n",
        r.flops.total_tflops(), peak / 1e12, m.dtype, 1e3 * r.flops.total_tflops() * 1e12 / peak);
  }
  return out;
}

std::string format_analysis_json(const AnalysisReport& r) {
  const Topology& t = r.resolved.topology;
  const ModelSpec& m = r.model;
  const Mesh& mesh = r.resolved.mesh;
  std::string axes;
  for (size_t i = 0; i < mesh.axes.size(); ++i) axes += (i ? ", " : "") + json_string(mesh.axes[i]);
  return fmt::format(
      "{{\n"
      "  \"model_name\": {},\n"
      "  \"decoder_block\": {},\n"
      "  \"topology\": {},\n"
      "  \"platform\": {},\n"
      "  \"num_devices\": {},\n"
      "  \"num_slices\": {},\n"
      "  \"mesh_axes\": [{}],\n"
      "  \"mesh_shape\": {},\n"
      "  \"memory_bytes_per_device\": {},\n"
      "  \"parameters\": {},\n"
      "  \"total_tflops_per_device\": {:.6f},\n"
      "  \"learnable_tflops_per_device\": {:.6f},\n"
      "  \"attention_tflops_per_device\": {:.6f},\n"
      "  \"train_step_ops\": {},\n"
      "  \"ir_model_tflops_per_device\": {:.6f},\n"
      "  \"hardware_tflops_per_device\": {:.6f},\n"
      "  \"argument_bytes\": {},\n"
      "  \"output_bytes\": {},\n"
      "  \"alias_bytes\": {},\n"
      "  \"temp_bytes\": {},\n"
      "  \"host_temp_bytes\": {},\n"
      "  \"host_argument_bytes\": {},\n"
      "  \"host_output_bytes\": {},\n"
      "  \"host_alias_bytes\": {},\n"
      "  \"xla_on_chip_arenas_bytes\": {},\n"
      "  \"xla_temp_extra_bytes\": {},\n"
      "  \"xla_uncarried_peak_bytes\": {},\n"
      "  \"arena_bytes\": {},\n"
      "  \"total_bytes\": {},\n"
      "  \"memory_limit_bytes\": {},\n"
      "  \"fits\": {},\n"
      "  \"tokens_per_device\": {:.1f},\n"
      "  \"per_device_batch_size\": {},\n"
      "  \"max_target_length\": {},\n"
      "  \"gradient_accumulation_steps\": {},\n"
      "  \"global_batch_size_to_train_on\": {},\n"
      "  \"global_batch_size_to_load\": {}\n"
      "}}\n",
      json_string(m.model_name), json_string(m.decoder_block), json_string(t.name),
      json_string(t.platform), mesh.num_devices, mesh.num_slices, axes, json_int_list(mesh.shape),
      t.memory_bytes_per_device, r.parameters, r.flops.total_tflops(), r.flops.learnable_tflops(),
      r.flops.attention_tflops(), r.train_step_ops, r.ir_flops.total_tflops(),
      static_cast<double>(r.hardware_flops_per_device / 1e12L), r.memory.plan.argument_bytes,
      r.memory.plan.output_bytes, r.memory.plan.alias_bytes, r.memory.plan.temp_bytes,
      r.memory.plan.host_temp_bytes, r.memory.host.argument_bytes, r.memory.host.output_bytes,
      r.memory.host.alias_bytes, xla_on_chip_arenas_bytes(t.generation),
      r.memory.plan.xla_temp_extra_bytes, r.memory.plan.uncarried_peak_bytes,
      r.memory.plan.arena_bytes(), r.memory.plan.total_bytes(),
      r.memory_limit_bytes, r.fits() ? "true" : "false", tokens_per_device(r.batch),
      r.batch.per_device_batch_size, r.batch.max_target_length, r.batch.gradient_accumulation_steps,
      r.batch.global_batch_size_to_train_on, r.batch.global_batch_size_to_load);
}

}  // namespace precast
