// LLVM module → optimised relocatable ELF object (see ObjectEmitter.h).
#include "compiler/backend/cpu/ObjectEmitter.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string_view>

#include "llvm/ADT/SmallVector.h"
#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/Analysis/TargetTransformInfo.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

namespace precast::backend {
namespace {

// Only the two CPU architectures we ship code for; registering every built-in target would
// link all of them into the compiler.
void initialize_targets() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
  });
}

std::vector<std::string> split_features(std::string_view list) {
  std::vector<std::string> features;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    if (!item.empty()) features.emplace_back(item);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return features;
}

std::string join_sorted(std::vector<std::string> features) {
  std::sort(features.begin(), features.end(), [](const std::string& a, const std::string& b) {
    // Order by feature name, so "+avx" and "-avx512f" sort as avx < avx512f.
    return std::string_view(a).substr(1) < std::string_view(b).substr(1);
  });
  std::string joined;
  for (const std::string& feature : features) {
    if (!joined.empty()) joined += ',';
    joined += feature;
  }
  return joined;
}

bool is_known_feature(const llvm::MCSubtargetInfo& subtarget, std::string_view name) {
  for (const llvm::SubtargetFeatureKV& known : subtarget.getAllProcessorFeatures()) {
    if (name == known.Key) return true;
  }
  return false;
}

// The host's features, as "+name"/"-name" for every feature this LLVM target knows.
std::string host_features(const llvm::MCSubtargetInfo& subtarget) {
  std::vector<std::string> features;
  for (const auto& entry : llvm::sys::getHostCPUFeatures()) {
    std::string_view name(entry.getKey().data(), entry.getKey().size());
    if (!is_known_feature(subtarget, name)) continue;
    features.push_back((entry.getValue() ? "+" : "-") + std::string(name));
  }
  return join_sorted(std::move(features));
}

Expected<std::string> checked_features(const llvm::MCSubtargetInfo& subtarget,
                                       std::string_view list, const std::string& triple) {
  std::vector<std::string> features = split_features(list);
  for (const std::string& feature : features) {
    bool signed_name = feature.size() > 1 && (feature[0] == '+' || feature[0] == '-');
    if (!signed_name || !is_known_feature(subtarget, std::string_view(feature).substr(1))) {
      return usage_error("unknown CPU feature '" + feature + "' for target '" + triple +
                         "': write features as +name or -name with LLVM's feature names");
    }
  }
  return join_sorted(std::move(features));
}

// `as_written` is the user's spelling, for the message.
Expected<const llvm::Target*> lookup_target(const std::string& triple,
                                            const std::string& as_written) {
  std::string message;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, message);
  if (target == nullptr) {
    return usage_error("unknown target triple '" + as_written +
                       "': supported architectures are x86_64 and aarch64 (" + message + ")");
  }
  return target;
}

Expected<std::unique_ptr<llvm::TargetMachine>> create_target_machine(
    const ResolvedTarget& resolved) {
  PRECAST_ASSIGN_OR_RETURN(const llvm::Target* target,
                           lookup_target(resolved.triple, resolved.triple));
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      resolved.triple, resolved.cpu, resolved.features, options, llvm::Reloc::PIC_,
      llvm::CodeModel::Small, llvm::CodeGenOptLevel::Aggressive));
  if (machine == nullptr) {
    return internal_error("LLVM could not create a target machine for '" + resolved.triple + "'");
  }
  return machine;
}

void optimize(llvm::Module& module, llvm::TargetMachine& machine, bool use_libmvec) {
  const llvm::Triple& triple = machine.getTargetTriple();
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;  // off by default in the new pass manager
  tuning.LoopInterleaving = true;
  tuning.LoopUnrolling = true;
  llvm::PassBuilder builder(&machine, tuning);

  llvm::LoopAnalysisManager loop_analyses;
  llvm::FunctionAnalysisManager function_analyses;
  llvm::CGSCCAnalysisManager cgscc_analyses;
  llvm::ModuleAnalysisManager module_analyses;

  llvm::TargetLibraryInfoImpl library_info(triple);
  if (use_libmvec && triple.getArch() == llvm::Triple::x86_64 && triple.isOSLinux()) {
    library_info.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                                    triple);
  }
  // Registered before the defaults so that ours wins.
  function_analyses.registerPass([&] { return llvm::TargetLibraryAnalysis(library_info); });

  builder.registerModuleAnalyses(module_analyses);
  builder.registerCGSCCAnalyses(cgscc_analyses);
  builder.registerFunctionAnalyses(function_analyses);
  builder.registerLoopAnalyses(loop_analyses);
  builder.crossRegisterProxies(loop_analyses, function_analyses, cgscc_analyses, module_analyses);

  llvm::ModulePassManager passes =
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  passes.run(module, module_analyses);
}

Expected<std::vector<char>> generate_object(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager passes;
  passes.add(llvm::createTargetTransformInfoWrapperPass(machine.getTargetIRAnalysis()));
  llvm::TargetLibraryInfoImpl library_info(machine.getTargetTriple());
  passes.add(new llvm::TargetLibraryInfoWrapperPass(library_info));
  if (machine.addPassesToEmitFile(passes, stream, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return internal_error("LLVM target '" + machine.getTargetTriple().str() +
                          "' cannot emit object files");
  }
  passes.run(module);
  return std::vector<char>(buffer.begin(), buffer.end());
}

}  // namespace

Expected<ResolvedTarget> resolve_target(const TargetSpec& spec) {
  initialize_targets();
  llvm::Triple host(llvm::sys::getProcessTriple());
  llvm::Triple triple(spec.triple.empty() ? host.str() : llvm::Triple::normalize(spec.triple));
  PRECAST_ASSIGN_OR_RETURN(const llvm::Target* target, lookup_target(triple.str(), spec.triple));
  if (!triple.isOSBinFormatELF()) {
    return usage_error("target triple '" + spec.triple +
                       "' does not use ELF objects; the CPU backend emits ELF only (use e.g. "
                       "x86_64-linux-gnu or aarch64-linux-gnu)");
  }
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(triple.str(), "", ""));
  if (subtarget == nullptr) {
    return internal_error("LLVM has no subtarget information for '" + triple.str() + "'");
  }

  bool host_arch = triple.getArch() == host.getArch();
  ResolvedTarget resolved;
  resolved.triple = triple.str();
  resolved.cpu = spec.cpu.empty() ? (host_arch ? "host" : "generic") : spec.cpu;
  if (resolved.cpu == "host") {
    if (!host_arch) {
      return usage_error("target CPU 'host' needs the host's architecture (" +
                         host.getArchName().str() + "), but the triple is '" + triple.str() +
                         "'; name a CPU for that architecture");
    }
    resolved.cpu = llvm::sys::getHostCPUName().str();
    resolved.features = host_features(*subtarget);
    resolved.is_host = true;
    return resolved;
  }
  if (!subtarget->isCPUStringValid(resolved.cpu)) {
    return usage_error("unknown target CPU '" + resolved.cpu + "' for target '" + triple.str() +
                       "': use an LLVM CPU name (llc-19 -mtriple=" + triple.str() +
                       " -mcpu=help lists them) or 'host'");
  }
  PRECAST_ASSIGN_OR_RETURN(resolved.features,
                           checked_features(*subtarget, spec.features, triple.str()));
  return resolved;
}

Expected<std::string> target_features(const TargetSpec& spec) {
  PRECAST_ASSIGN_OR_RETURN(ResolvedTarget resolved, resolve_target(spec));
  return resolved.features;
}

Expected<std::vector<char>> emit_object(llvm::Module& module, const TargetSpec& spec) {
  PRECAST_ASSIGN_OR_RETURN(ResolvedTarget resolved, resolve_target(spec));
  std::string problems;
  llvm::raw_string_ostream problem_stream(problems);
  if (llvm::verifyModule(module, &problem_stream)) {
    return internal_error("LLVM module '" + module.getModuleIdentifier() +
                          "' does not verify: " + problems);
  }
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine,
                           create_target_machine(resolved));
  // Runtime symbols may lie more than 2 GB from the loaded code: reach them through the GOT/PLT.
  for (llvm::GlobalValue& global : module.global_values()) {
    if (global.isDeclaration()) global.setDSOLocal(false);
  }
  // Optimisation needs the target's data layout and triple (vector widths, libmvec mapping).
  module.setTargetTriple(resolved.triple);
  module.setDataLayout(machine->createDataLayout());
  optimize(module, *machine, spec.use_libmvec);
  return generate_object(module, *machine);
}

std::string llvm_version() {
  return LLVM_VERSION_STRING;
}

}  // namespace precast::backend
