#include "compiler/driver/Compile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/Bytes.h"
#include "compiler/analysis/ModelFormulas.h"
#include "compiler/artifact/ArtifactIo.h"
#include "compiler/artifact/Compatibility.h"
#include "compiler/artifact/Sha256.h"
#include "compiler/backend/cpu/CodeGen.h"
#include "compiler/config/ArtifactConfig.h"
#include "compiler/driver/Analyze.h"
#include "compiler/driver/EntryPoints.h"
#include "ir/Printer.h"

namespace precast {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const char* kMetricNames[] = {"loss",          "lm_loss",   "perplexity",    "z_loss",
                              "total_weights", "grad_norm", "raw_grad_norm", "param_norm",
                              "moe_lb_loss"};  // the last only with the load-balancing loss

std::string init_of(const frontend::WeightInfo& weight) {
  switch (weight.init) {
    case frontend::InitKind::kOnes:
      return "ones";
    case frontend::InitKind::kZeros:
      return "zeros";
    case frontend::InitKind::kNormal:
      return fmt::format("normal {:.17g}", weight.stddev);
    case frontend::InitKind::kTruncatedNormal:
      return fmt::format("truncated_normal {:.17g} {:.17g}", weight.stddev,
                         frontend::kTruncationBound);
  }
  return "zeros";
}

}  // namespace

artifact::TensorSignature tensor_of(const ir::Function& f, ir::Value v, std::string name,
                                    std::string role) {
  artifact::TensorSignature t;
  t.name = std::move(name);
  t.shape = f.type(v).dims;
  t.dtype = std::string(ir::dtype_name(f.type(v).dtype));
  t.role = std::move(role);
  // The global value's sharding ("P('fsdp', None)"): which mesh axes split each dimension, what
  // the runtime reads to find this device's piece of a global tensor.
  t.sharding = ir::print_sharding(f, v);
  return t;
}

namespace {

artifact::Signature signature_of(const ir::Function& f, const TrainProgram& program) {
  const autodiff::TrainStepLayout& layout = program.layout;
  artifact::Signature s;
  for (size_t i = 0; i < f.params().size(); ++i) {
    ir::Value p = f.params()[i];
    std::string role = i < layout.num_weights          ? "parameter"
                       : i < layout.num_state          ? "optimizer_state"
                       : i < layout.first_scalar_param ? "batch"
                                                       : "scalar";
    artifact::TensorSignature t = tensor_of(f, p, std::string(f.value_name(p)), role);
    if (i < layout.num_weights) t.init = init_of(program.weights[i]);
    s.inputs.push_back(std::move(t));
  }
  for (size_t k = 0; k < f.results().size(); ++k) {
    ir::Value r = f.results()[k];
    bool state = k < layout.first_metric_result;
    size_t metric = k - layout.first_metric_result;
    std::string name = state ? s.inputs[static_cast<size_t>(f.result_alias(k))].name
                       : metric < std::size(kMetricNames) ? kMetricNames[metric]
                                                          : fmt::format("metric_{}", metric);
    std::string role = state ? s.inputs[static_cast<size_t>(f.result_alias(k))].role : "metric";
    artifact::TensorSignature t = tensor_of(f, r, name, role);
    t.aliased_input = f.result_alias(k);
    for (size_t j = 0; j < k; ++j) {
      if (f.results()[j].id == r.id && f.result_alias(j) < 0 && t.aliased_input < 0) {
        t.same_as_output = static_cast<int64_t>(j);
        break;
      }
    }
    s.outputs.push_back(std::move(t));
  }
  return s;
}

}  // namespace

artifact::BufferPlan plan_of(const ir::Function& f, const MemoryPlan& plan) {
  artifact::BufferPlan out;
  out.arena_bytes = plan.temp_bytes;
  out.alignment = 64;
  out.argument_bytes = plan.argument_bytes;
  out.output_bytes = plan.output_bytes;
  out.alias_bytes = plan.alias_bytes;
  out.temp_bytes = plan.temp_bytes;
  for (const Buffer& b : plan.buffers) {
    artifact::PlannedBuffer p;
    if (!b.value.valid()) {
      p.value_name = fmt::format("(collective staging at op {})", b.start);
    } else {
      p.value_name = f.value_name(b.value).empty() ? fmt::format("%{}", b.value.id)
                                                   : std::string(f.value_name(b.value));
    }
    p.offset = std::max<int64_t>(b.offset, 0);
    p.bytes = b.bytes;
    p.live_start = b.start;
    p.live_end = b.end;
    p.category = b.offset >= 0 ? "temp" : "output";
    out.buffers.push_back(std::move(p));
  }
  return out;
}

namespace {

artifact::BufferRef ref_of(const backend::ValueStorage& s, int64_t bytes) {
  artifact::BufferRef ref;
  ref.space = s.kind == backend::StorageKind::kArgument ? artifact::BufferSpace::kArgument
              : s.kind == backend::StorageKind::kOutput ? artifact::BufferSpace::kOutput
                                                         : artifact::BufferSpace::kTemp;
  ref.index_or_offset = s.index;
  ref.bytes = bytes;
  return ref;
}

}  // namespace

artifact::Collective collective_of(const backend::CollectiveCall& call) {
  artifact::Collective c;
  switch (call.kind) {
    case ir::OpKind::kAllGather:
      c.kind = artifact::CollectiveKind::kAllGather;
      break;
    case ir::OpKind::kReduceScatter:
      c.kind = artifact::CollectiveKind::kReduceScatter;
      break;
    case ir::OpKind::kAllToAll:
      c.kind = artifact::CollectiveKind::kAllToAll;
      break;
    case ir::OpKind::kCollectivePermute:
      c.kind = artifact::CollectiveKind::kCollectivePermute;
      break;
    default:
      c.kind = artifact::CollectiveKind::kAllReduce;
      break;
  }
  bool reduces = c.kind == artifact::CollectiveKind::kAllReduce ||
                 c.kind == artifact::CollectiveKind::kReduceScatter;
  c.reduction = !reduces   ? artifact::Reduction::kNone
                : call.max ? artifact::Reduction::kMax
                           : artifact::Reduction::kSum;
  c.mesh_axes = call.mesh_axes;
  c.shift = call.shift;
  c.dimensions = call.dimensions;
  c.dtype = std::string(ir::dtype_name(call.dtype));
  c.bytes = call.bytes;
  return c;
}

// The entry's calls in order, each with the buffers it reads, then those it writes.
std::vector<artifact::Step> program_of(const backend::CompiledStep& compiled) {
  std::vector<artifact::Step> program;
  for (const backend::ProgramCall& call : compiled.program) {
    artifact::Step step;
    switch (call.kind) {
      case backend::ProgramCall::Kind::kKernel: step.kind = artifact::StepKind::kKernelCall; break;
      case backend::ProgramCall::Kind::kGemm: step.kind = artifact::StepKind::kGemm; break;
      case backend::ProgramCall::Kind::kAttention:
        step.kind = artifact::StepKind::kAttention;
        break;
      case backend::ProgramCall::Kind::kCopy: step.kind = artifact::StepKind::kCopy; break;
      case backend::ProgramCall::Kind::kCollective:
        step.kind = artifact::StepKind::kCollective;
        step.collective = collective_of(call.collective);
        break;
    }
    step.symbol = call.symbol;
    step.op = call.op_name;
    step.scope = call.scope;
    for (const auto& [storage, bytes] : call.reads) step.buffers.push_back(ref_of(storage, bytes));
    for (const auto& [storage, bytes] : call.writes) step.buffers.push_back(ref_of(storage, bytes));
    step.int_params = {call.op, static_cast<int64_t>(call.reads.size())};
    program.push_back(std::move(step));
  }
  return program;
}

namespace {

std::vector<std::string> feature_names(const std::string& features) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < features.size()) {
    size_t end = features.find(',', begin);
    if (end == std::string::npos) end = features.size();
    std::string_view item(features.data() + begin, end - begin);
    if (!item.empty() && item[0] == '+') out.emplace_back(item.substr(1));
    begin = end + 1;
  }
  return out;
}

}  // namespace

Expected<CompileResult> compile_step(const CompileRequest& request,
                                     const std::filesystem::path& topologies_file) {
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve_config(request.config, topologies_file));
  return compile_step(request, std::move(resolved));
}

Expected<CompileResult> compile_step(const CompileRequest& request, ResolvedConfig resolved) {
  CompileResult result;
  auto start = std::chrono::steady_clock::now();
  if (resolved.topology.platform != "cpu") {
    return usage_error(fmt::format(
        "compile_topology={}: precast compile generates code for CPU topologies (cpu-1, cpu-N); "
        "analyse {} with `precast analyze` instead",
        resolved.topology.name, resolved.topology.name));
  }
  // The analysis lowers, cleans up, schedules and plans the step: its plan is the one the
  // runtime allocates, so what `precast analyze` printed is what precast-run gets.
  if (request.progress) request.progress("analysis (lower, passes, partition, schedule, plan)", 0, 0);
  PRECAST_ASSIGN_OR_RETURN(AnalysisReport report, analyze(std::move(resolved), request.pipeline));
  const Config& config = report.resolved.config;
  result.lower_seconds = seconds_since(start);
  TrainProgram& program = *report.program;
  const ir::Function* step = program.layout.function;
  const MemoryPlan& plan = report.memory.plan;

  backend::CodeGenOptions options = code_gen_options(report.resolved);
  options.progress = request.progress;
  PRECAST_ASSIGN_OR_RETURN(backend::ResolvedTarget target, backend::resolve_target(options.target));
  auto codegen_start = std::chrono::steady_clock::now();
  PRECAST_ASSIGN_OR_RETURN(backend::CompiledStep compiled,
                           backend::generate_step(*step, plan, options));
  result.codegen_seconds = seconds_since(codegen_start);
  result.emit_seconds = compiled.emit_ms / 1e3;

  artifact::Artifact& a = result.artifact;
  a.compiler_version = kCompilerVersion;
  a.key.target_triple = artifact::normalize_triple(target.triple);
  // The CPU features the code may use. Compiling for this host, only those the runtime can see
  // in /proc/cpuinfo are recorded (LLVM also lists pseudo-features like evex512 that no
  // runtime check could confirm); a host lacking any of them is refused.
  a.key.cpu_features = feature_names(target.features);
  if (target.is_host) {
    std::vector<std::string> visible = artifact::host_info().cpu_features;
    std::erase_if(a.key.cpu_features, [&](const std::string& f) {
      return std::find(visible.begin(), visible.end(), f) == visible.end();
    });
  }
  a.key.topology_name = report.resolved.topology.name;
  for (size_t i = 0; i < report.resolved.mesh.axes.size(); ++i) {
    a.key.mesh.push_back({report.resolved.mesh.axes[i], report.resolved.mesh.shape[i]});
  }
  a.key.num_devices = report.resolved.mesh.num_devices;
  a.ir_text = ir::print_function(*step);
  a.key.ir_hash = artifact::to_hex(artifact::sha256(a.ir_text));
  a.signature = signature_of(*step, program);
  a.plan = plan_of(*step, plan);
  a.program = program_of(compiled);
  a.object_code.assign(compiled.object.begin(), compiled.object.end());
  a.report_text = format_memory_line(plan) + "\n" + format_memory_breakdown(*step, plan);
  a.config = artifact_config(config);
  a.setup_text = fmt::format("Compiled by precast {} with LLVM {} for {}, target CPU {}\n",
                             kCompilerVersion, backend::llvm_version(), a.key.target_triple,
                             target.cpu) +
                 format_parameter_line(report.parameters) + "\n" +
                 format_tflops_block(report.flops);
  a.model_tflops_per_device = report.flops.total_tflops();
  a.tokens_per_device = tokens_per_device(report.batch);
  // eval_step and sample_step, when the config asks for them (EntryPoints.h).
  std::string entries_summary;
  for (std::string_view name : requested_entry_points(config)) {
    if (request.progress) request.progress(fmt::format("entry point {}", name), 0, 0);
    auto entry_start = std::chrono::steady_clock::now();
    PRECAST_ASSIGN_OR_RETURN(artifact::EntryPoint entry,
                             compile_entry_point(name, report.resolved, &options));
    entries_summary += fmt::format(
        "Compiled entry point {}: {} steps, object {} bytes, arena {} bytes, in {:.3f} s\n", name,
        entry.program.size(), entry.object_code.size(), entry.plan.arena_bytes,
        seconds_since(entry_start));
    a.entry_points.push_back(std::move(entry));
  }
  result.analysis_text = format_analysis_text(report);
  result.timing_report = program.timing_report;

  result.summary = fmt::format(
      "Compiled @train_step for {} ({}, cpu {}): {} ops, {} kernels, {} GEMM calls; object {} "
      "bytes\nArena (temp) {} bytes, arguments {} bytes, outputs {} bytes ({} donated): the "
      "plan precast-run allocates\n{}\nTimes: analysis (lower, passes, partition, schedule, plan) "
      "{:.3f} s, codegen "
      "{:.3f} s (of which LLVM O3 + object {:.3f} s)\n",
      report.resolved.topology.name, a.key.target_triple, target.cpu, step->num_ops(),
      compiled.num_kernels, compiled.num_gemm_calls, compiled.object.size(), plan.temp_bytes,
      plan.argument_bytes, plan.output_bytes, plan.alias_bytes, format_memory_line(plan),
      result.lower_seconds, result.codegen_seconds, result.emit_seconds);
  result.summary += entries_summary;

  if (!request.output.empty()) {
    if (request.progress) request.progress("writing " + request.output, 0, 0);
    auto write_start = std::chrono::steady_clock::now();
    PRECAST_RETURN_IF_ERROR(artifact::write_artifact(a, request.output));
    result.write_seconds = seconds_since(write_start);
    result.summary += fmt::format("Successfully saved compiled object as {}\n", request.output);
  }
  return result;
}

}  // namespace precast
