// In-process linking of a relocatable ELF object with raw JITLink (see ObjectLoader.h).
//
// Raw JITLink rather than ORC: the runtime needs one object linked once, and ORC's session,
// dylibs and materialisation machinery cost ~14 MB of static code (TOOLCHAIN.md). In-process
// JITLink with InProcessMemoryManager completes synchronously inside link_ELF().
#include "runtime/loader/ObjectLoader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>

#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/JITLink/EHFrameSupport.h"
#include "llvm/ExecutionEngine/JITLink/ELF.h"
#include "llvm/ExecutionEngine/JITLink/JITLink.h"
#include "llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h"
#include "llvm/ExecutionEngine/Orc/Shared/ExecutorAddress.h"
#include "llvm/ExecutionEngine/Orc/Shared/ExecutorSymbolDef.h"
#include "llvm/ExecutionEngine/Orc/TargetProcess/RegisterEHFrames.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBufferRef.h"
#include "runtime/loader/ElfObjectCheck.h"

namespace precast::runtime {

namespace jitlink = llvm::jitlink;
namespace orc = llvm::orc;

struct LoadedObject::State {
  std::unique_ptr<jitlink::InProcessMemoryManager> memory;
  jitlink::JITLinkMemoryManager::FinalizedAlloc allocation;
  std::map<std::string, void*, std::less<>> symbols;
  size_t linked_bytes = 0;
  const void* eh_frame = nullptr;
  size_t eh_frame_size = 0;
  bool eh_frame_registered = false;
  // Libraries symbols were taken from stay open while the code may call into them.
  std::vector<void*> library_handles;

  ~State() {
    if (eh_frame_registered) {
      llvm::consumeError(orc::deregisterEHFrameSection(eh_frame, eh_frame_size));
    }
    if (allocation) llvm::consumeError(memory->deallocate(std::move(allocation)));
    for (void* handle : library_handles) dlclose(handle);
  }
};

namespace {

Error incompatible(const LoadOptions& options, const std::string& message) {
  return Error(ExitCode::kIncompatible, options.object_name + ": " + message);
}

// What one link produced besides the State: failures, and the names nothing resolved.
struct LinkOutcome {
  std::optional<std::string> failure;
  std::vector<std::string> unresolved;
  bool finalized = false;
};

class SymbolResolver {
 public:
  SymbolResolver(const SymbolTable& table, const LoadOptions& options, std::vector<void*>& handles)
      : table_(table), options_(options), handles_(handles) {}

  const void* resolve(const std::string& name) {
    if (auto it = table_.find(name); it != table_.end()) return it->second;
    bool vector_math = name.rfind("_ZGV", 0) == 0;
    if (vector_math && options_.resolve_from_libmvec)
      return from_library(libmvec_, "libmvec.so.1", name);
    if (!vector_math && options_.resolve_from_libm) return from_library(libm_, "libm.so.6", name);
    return nullptr;
  }

 private:
  const void* from_library(std::optional<void*>& handle, const char* library,
                           const std::string& name) {
    if (!handle) {
      handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
      if (*handle != nullptr) handles_.push_back(*handle);
    }
    return *handle == nullptr ? nullptr : dlsym(*handle, name.c_str());
  }

  const SymbolTable& table_;
  const LoadOptions& options_;
  std::vector<void*>& handles_;
  std::optional<void*> libmvec_;
  std::optional<void*> libm_;
};

class LinkContext final : public jitlink::JITLinkContext {
 public:
  LinkContext(LoadedObject::State& state, LinkOutcome& outcome, const SymbolTable& table,
              const LoadOptions& options)
      : JITLinkContext(nullptr),
        state_(state),
        outcome_(outcome),
        resolver_(table, options, state.library_handles) {}

  jitlink::JITLinkMemoryManager& getMemoryManager() override { return *state_.memory; }

  void notifyFailed(llvm::Error error) override {
    outcome_.failure = llvm::toString(std::move(error));
  }

  void lookup(const LookupMap& wanted,
              std::unique_ptr<jitlink::JITLinkAsyncLookupContinuation> continuation) override {
    jitlink::AsyncLookupResult result;
    for (const auto& [name, flags] : wanted) {
      const void* address = resolver_.resolve(name.str());
      if (address != nullptr) {
        result[name] = orc::ExecutorSymbolDef(orc::ExecutorAddr::fromPtr(address),
                                              llvm::JITSymbolFlags::Exported);
      } else if (flags == jitlink::SymbolLookupFlags::RequiredSymbol) {
        outcome_.unresolved.push_back(name.str());
      }  // a missing weak reference links as address 0
    }
    if (!outcome_.unresolved.empty()) {
      continuation->run(llvm::make_error<llvm::StringError>("unresolved external symbols",
                                                            llvm::inconvertibleErrorCode()));
      return;
    }
    continuation->run(std::move(result));
  }

  llvm::Error notifyResolved(jitlink::LinkGraph& graph) override {
    for (jitlink::Symbol* symbol : graph.defined_symbols()) {
      if (!symbol->hasName() || symbol->getScope() == jitlink::Scope::Local) continue;
      state_.symbols[symbol->getName().str()] = symbol->getAddress().toPtr<void*>();
    }
    for (jitlink::Block* block : graph.blocks()) state_.linked_bytes += block->getSize();
    return llvm::Error::success();
  }

  void notifyFinalized(jitlink::JITLinkMemoryManager::FinalizedAlloc allocation) override {
    state_.allocation = std::move(allocation);
    outcome_.finalized = true;
  }

  llvm::Error modifyPassConfig(jitlink::LinkGraph& graph,
                               jitlink::PassConfiguration& config) override {
    config.PostFixupPasses.push_back(jitlink::createEHFrameRecorderPass(
        graph.getTargetTriple(), [this](orc::ExecutorAddr address, size_t size) {
          if (size == 0) return;
          state_.eh_frame = address.toPtr<const void*>();
          state_.eh_frame_size = size;
        }));
    return llvm::Error::success();
  }

 private:
  LoadedObject::State& state_;
  LinkOutcome& outcome_;
  SymbolResolver resolver_;
};

std::string joined(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

Expected<LoadedObject> load_object(const char* object, size_t size, const SymbolTable& symbols,
                                   const LoadOptions& options) {
  PRECAST_RETURN_IF_ERROR(check_elf_object(object, size, options.object_name));
  // LLVM's ELF reader needs an aligned buffer; an object inside an artifact may not be.
  std::vector<uint64_t> aligned_copy;
  if (reinterpret_cast<uintptr_t>(object) % alignof(uint64_t) != 0) {
    aligned_copy.resize((size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    std::memcpy(aligned_copy.data(), object, size);
    object = reinterpret_cast<const char*>(aligned_copy.data());
  }
  llvm::MemoryBufferRef buffer(llvm::StringRef(object, size), options.object_name);
  auto graph = jitlink::createLinkGraphFromELFObject(buffer);
  if (!graph) {
    return incompatible(options,
                        "cannot read the object code: " + llvm::toString(graph.takeError()));
  }

  auto state = std::make_unique<LoadedObject::State>();
  auto memory = jitlink::InProcessMemoryManager::Create();
  if (!memory) {
    return internal_error("cannot set up JIT memory: " + llvm::toString(memory.takeError()));
  }
  state->memory = std::move(*memory);

  LinkOutcome outcome;
  jitlink::link_ELF(std::move(*graph),
                    std::make_unique<LinkContext>(*state, outcome, symbols, options));
  if (!outcome.unresolved.empty()) {
    return incompatible(options, "unresolved symbols: " + joined(outcome.unresolved) +
                                     " (not in the runtime's symbol table" +
                                     (options.resolve_from_libm ? ", libm" : "") +
                                     (options.resolve_from_libmvec ? " or libmvec" : "") + ")");
  }
  if (outcome.failure) return incompatible(options, "cannot link: " + *outcome.failure);
  if (!outcome.finalized) return internal_error("JITLink finished without finalizing the object");

  if (state->eh_frame_size > 0) {
    if (llvm::Error error = orc::registerEHFrameSection(state->eh_frame, state->eh_frame_size)) {
      return internal_error("cannot register EH frames: " + llvm::toString(std::move(error)));
    }
    state->eh_frame_registered = true;
  }
  return LoadedObject(std::move(state));
}

LoadedObject::LoadedObject(std::unique_ptr<State> state) : state_(std::move(state)) {}
LoadedObject::LoadedObject(LoadedObject&&) noexcept = default;
LoadedObject& LoadedObject::operator=(LoadedObject&&) noexcept = default;
LoadedObject::~LoadedObject() = default;

void* LoadedObject::find(std::string_view name) const {
  auto it = state_->symbols.find(name);
  return it == state_->symbols.end() ? nullptr : it->second;
}

Expected<void*> LoadedObject::lookup(std::string_view name) const {
  if (void* address = find(name)) return address;
  return Error(ExitCode::kIncompatible,
               "the object code defines no symbol '" + std::string(name) + "'");
}

std::vector<std::string> LoadedObject::defined_symbols() const {
  std::vector<std::string> names;
  for (const auto& entry : state_->symbols) names.push_back(entry.first);
  return names;
}

size_t LoadedObject::linked_bytes() const {
  return state_->linked_bytes;
}

std::string loader_llvm_version() { return LLVM_VERSION_STRING; }

}  // namespace precast::runtime
