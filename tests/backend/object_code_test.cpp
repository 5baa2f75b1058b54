// The CPU code path end to end: LLVM modules built here with IRBuilder → ObjectEmitter (O3,
// host or cross target) → ObjectLoader (JITLink in this process) → calls with exact results.
// Also the loader's error paths (unbound symbols, foreign and damaged objects) and timings.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler/backend/cpu/ObjectEmitter.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/loader/ObjectLoader.h"

namespace precast {
namespace {

using backend::emit_object;
using backend::TargetSpec;
using runtime::load_object;
using runtime::SymbolTable;

// ---- Runtime functions the loaded code calls (bound through the symbol table). ----

int64_t callback_calls = 0;
int64_t callback_total = 0;

extern "C" void precast_test_callback(int64_t value) {
  ++callback_calls;
  callback_total += value;
}

struct TestException : std::runtime_error {
  explicit TestException(int64_t value)
      : std::runtime_error("thrown from a runtime function"), value(value) {}
  int64_t value;
};

extern "C" void precast_test_throw(int64_t value) {
  if (value != 0) throw TestException(value);
}

template <typename Function>
const void* address_of(Function* function) {
  return reinterpret_cast<const void*>(function);
}

SymbolTable test_symbols() {
  return {
      {"precast_test_callback", address_of(&precast_test_callback)},
      {"precast_test_throw", address_of(&precast_test_throw)},
      {"expf", address_of(static_cast<float (*)(float)>(&::expf))},
      {"logf", address_of(static_cast<float (*)(float)>(&::logf))},
      {"tanhf", address_of(static_cast<float (*)(float)>(&::tanhf))},
  };
}

// ---- Building LLVM modules. ----

// for (i = 0; i < n; ++i) body(i); then `after` in the exit block.
void build_counted_loop(llvm::Function* function, llvm::Value* n,
                        const std::function<void(llvm::IRBuilder<>&, llvm::Value*)>& body) {
  llvm::LLVMContext& context = function->getContext();
  llvm::IRBuilder<> builder(context);
  auto* entry = llvm::BasicBlock::Create(context, "entry", function);
  auto* loop = llvm::BasicBlock::Create(context, "loop", function);
  auto* exit = llvm::BasicBlock::Create(context, "exit", function);
  builder.SetInsertPoint(entry);
  builder.CreateCondBr(builder.CreateICmpSGT(n, builder.getInt64(0)), loop, exit);
  builder.SetInsertPoint(loop);
  llvm::PHINode* index = builder.CreatePHI(builder.getInt64Ty(), 2, "i");
  index->addIncoming(builder.getInt64(0), entry);
  body(builder, index);
  llvm::Value* next = builder.CreateAdd(index, builder.getInt64(1), "next", true, true);
  index->addIncoming(next, builder.GetInsertBlock());
  builder.CreateCondBr(builder.CreateICmpSLT(next, n), loop, exit);
}

llvm::Function* declare_function(llvm::Module& module, const char* name, llvm::Type* result,
                                 std::vector<llvm::Type*> parameters) {
  auto* type = llvm::FunctionType::get(result, parameters, false);
  return llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module);
}

// void add(float* a, float* b, float* out, i64 n): out[i] = a[i] + b[i].
void build_add(llvm::Module& module) {
  llvm::LLVMContext& context = module.getContext();
  auto* f32 = llvm::Type::getFloatTy(context);
  auto* ptr = llvm::PointerType::get(context, 0);
  auto* i64 = llvm::Type::getInt64Ty(context);
  llvm::Function* add =
      declare_function(module, "add", llvm::Type::getVoidTy(context), {ptr, ptr, ptr, i64});
  add->addParamAttr(2, llvm::Attribute::NoAlias);
  llvm::Argument* a = add->getArg(0);
  llvm::Argument* b = add->getArg(1);
  llvm::Argument* out = add->getArg(2);
  build_counted_loop(add, add->getArg(3), [&](llvm::IRBuilder<>& builder, llvm::Value* i) {
    llvm::Value* x = builder.CreateLoad(f32, builder.CreateInBoundsGEP(f32, a, i));
    llvm::Value* y = builder.CreateLoad(f32, builder.CreateInBoundsGEP(f32, b, i));
    builder.CreateStore(builder.CreateFAdd(x, y), builder.CreateInBoundsGEP(f32, out, i));
  });
  llvm::IRBuilder<> builder(&add->back());
  builder.CreateRetVoid();
}

// void exp_all(float* x, float* out, i64 n): out[i] = expf(x[i]); then
// precast_test_callback(n). expf is declared like clang's -fno-math-errno declares it, so the
// loop vectoriser may call libmvec's variant.
void build_exp_all(llvm::Module& module) {
  llvm::LLVMContext& context = module.getContext();
  auto* f32 = llvm::Type::getFloatTy(context);
  auto* ptr = llvm::PointerType::get(context, 0);
  auto* i64 = llvm::Type::getInt64Ty(context);
  auto* void_type = llvm::Type::getVoidTy(context);
  llvm::Function* expf = declare_function(module, "expf", f32, {f32});
  expf->setDoesNotAccessMemory();
  expf->setDoesNotThrow();
  expf->addFnAttr(llvm::Attribute::WillReturn);
  llvm::Function* callback = declare_function(module, "precast_test_callback", void_type, {i64});
  llvm::Function* exp_all = declare_function(module, "exp_all", void_type, {ptr, ptr, i64});
  exp_all->addParamAttr(1, llvm::Attribute::NoAlias);
  llvm::Argument* x = exp_all->getArg(0);
  llvm::Argument* out = exp_all->getArg(1);
  build_counted_loop(exp_all, exp_all->getArg(2), [&](llvm::IRBuilder<>& builder, llvm::Value* i) {
    llvm::Value* value = builder.CreateLoad(f32, builder.CreateInBoundsGEP(f32, x, i));
    builder.CreateStore(builder.CreateCall(expf, {value}), builder.CreateInBoundsGEP(f32, out, i));
  });
  llvm::IRBuilder<> builder(&exp_all->back());
  builder.CreateCall(callback, {exp_all->getArg(2)});
  builder.CreateRetVoid();
}

// void throw_then_count(i64 v): precast_test_throw(v); precast_test_callback(v). The first call
// is not a tail call, so an exception from it unwinds through this function's frame.
void build_throw_then_count(llvm::Module& module) {
  llvm::LLVMContext& context = module.getContext();
  auto* i64 = llvm::Type::getInt64Ty(context);
  auto* void_type = llvm::Type::getVoidTy(context);
  llvm::Function* thrower = declare_function(module, "precast_test_throw", void_type, {i64});
  llvm::Function* callback = declare_function(module, "precast_test_callback", void_type, {i64});
  llvm::Function* function = declare_function(module, "throw_then_count", void_type, {i64});
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(context, "entry", function));
  builder.CreateCall(thrower, {function->getArg(0)});
  builder.CreateCall(callback, {function->getArg(0)});
  builder.CreateRetVoid();
}

// void bump(i64 v): precast_test_counter += v, with the runtime's counter declared dso_local (as
// a front end might); emit_object must drop that, since the counter lies > 2 GB away.
void build_bump_dso_local(llvm::Module& module) {
  llvm::LLVMContext& context = module.getContext();
  auto* i64 = llvm::Type::getInt64Ty(context);
  auto* counter = new llvm::GlobalVariable(module, i64, false, llvm::GlobalValue::ExternalLinkage,
                                           nullptr, "precast_test_counter");
  counter->setDSOLocal(true);
  llvm::Function* function =
      declare_function(module, "bump", llvm::Type::getVoidTy(context), {i64});
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(context, "entry", function));
  llvm::Value* sum = builder.CreateAdd(builder.CreateLoad(i64, counter), function->getArg(0));
  builder.CreateStore(sum, counter);
  builder.CreateRetVoid();
}

// i64 call_missing(i64 v): returns precast_missing_symbol(v) + precast_other_missing(v).
void build_call_missing(llvm::Module& module) {
  llvm::LLVMContext& context = module.getContext();
  auto* i64 = llvm::Type::getInt64Ty(context);
  llvm::Function* missing = declare_function(module, "precast_missing_symbol", i64, {i64});
  llvm::Function* other = declare_function(module, "precast_other_missing", i64, {i64});
  llvm::Function* function = declare_function(module, "call_missing", i64, {i64});
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(context, "entry", function));
  builder.CreateRet(builder.CreateAdd(builder.CreateCall(missing, {function->getArg(0)}),
                                      builder.CreateCall(other, {function->getArg(0)})));
}

// i64 precast_probe_entry(i64 n): sum of 0..n-1, after precast_probe_callback(n).
void build_probe_entry(llvm::Module& module) {
  llvm::LLVMContext& context = module.getContext();
  auto* i64 = llvm::Type::getInt64Ty(context);
  llvm::Function* callback =
      declare_function(module, "precast_probe_callback", llvm::Type::getVoidTy(context), {i64});
  llvm::Function* entry = declare_function(module, "precast_probe_entry", i64, {i64});
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(context, "entry", entry));
  llvm::Value* n = entry->getArg(0);
  builder.CreateCall(callback, {n});
  llvm::Value* product = builder.CreateMul(n, builder.CreateSub(n, builder.getInt64(1)));
  builder.CreateRet(builder.CreateSDiv(product, builder.getInt64(2)));
}

TargetSpec target(const char* triple, const char* cpu, const char* features) {
  TargetSpec spec;
  spec.triple = triple;
  spec.cpu = cpu;
  spec.features = features;
  return spec;
}

using ModuleBuilder = void (*)(llvm::Module&);

struct Emitted {
  std::vector<char> object;
  std::string optimized_ir;
  double emit_ms = 0;
};

Emitted emit_or_die(ModuleBuilder build, const TargetSpec& spec = {}) {
  llvm::LLVMContext context;
  llvm::Module module("test_module", context);
  build(module);
  auto start = std::chrono::steady_clock::now();
  Expected<std::vector<char>> object = emit_object(module, spec);
  double emit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!object.ok()) ADD_FAILURE() << object.error().message();
  Emitted emitted;
  if (object.ok()) emitted.object = std::move(object).value();
  llvm::raw_string_ostream ir(emitted.optimized_ir);
  module.print(ir, nullptr);
  emitted.emit_ms = emit_ms;
  return emitted;
}

bool contains(const std::vector<char>& bytes, const std::string& text) {
  return std::search(bytes.begin(), bytes.end(), text.begin(), text.end()) != bytes.end();
}

std::string write_temp_file(const std::vector<char>& bytes, const std::string& name) {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("precast_backend_" + std::to_string(getpid()) + "_" + name);
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

std::string run_command(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[4096];
  while (size_t read = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, read);
  *status = pclose(pipe);
  return output;
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// ---- Host code: emit, link, call. ----

TEST(CpuObjectCode, VectorisedAddLoopGivesExactSums) {
  Emitted emitted = emit_or_die(build_add);
  ASSERT_FALSE(emitted.object.empty());
  // The loop vectoriser ran: the optimised IR adds whole vectors of floats.
  EXPECT_NE(emitted.optimized_ir.find("fadd <"), std::string::npos) << emitted.optimized_ir;

  auto loaded = load_object(emitted.object, test_symbols());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  auto add = loaded->function<void(const float*, const float*, float*, int64_t)>("add");
  ASSERT_TRUE(add.ok()) << add.error().message();

  // 1003: not a multiple of any vector width, so the scalar remainder runs too.
  constexpr int64_t kCount = 1003;
  std::vector<float> a(kCount), b(kCount), out(kCount + 1, -7.0f);
  for (int64_t i = 0; i < kCount; ++i) {
    a[i] = 0.25f * float(i) - 100.0f;
    b[i] = 1.0f / float(i + 1);
  }
  (*add)(a.data(), b.data(), out.data(), kCount);
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << "index " << i;
  EXPECT_EQ(out[kCount], -7.0f) << "wrote past the end";
  (*add)(a.data(), b.data(), out.data(), 0);  // n = 0 touches nothing
  EXPECT_EQ(out[0], a[0] + b[0]);
  EXPECT_EQ(loaded->defined_symbols(), std::vector<std::string>{"add"});
  EXPECT_GT(loaded->linked_bytes(), 0u);
}

// Unit in the last place distance between two finite floats of the same sign.
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  return std::abs(int64_t(ia) - int64_t(ib));
}

// The libmvec function the optimised IR calls ("_ZGVdN8v_expf"), or "".
std::string called_vector_variant(const std::string& ir) {
  for (size_t at = ir.find("call "); at != std::string::npos; at = ir.find("call ", at + 1)) {
    size_t name = ir.find("@_ZGV", at);
    if (name == std::string::npos || name > ir.find('\n', at)) continue;
    return ir.substr(name + 1, ir.find('(', name) - name - 1);
  }
  return "";
}

TEST(CpuObjectCode, RuntimeCallbackAndLibmvecExpf) {
  Emitted emitted = emit_or_die(build_exp_all);
  ASSERT_FALSE(emitted.object.empty());
#if defined(__x86_64__) && defined(__linux__)
  // The vectoriser mapped expf to libmvec (e.g. _ZGVdN8v_expf with AVX2); only the table's
  // scalar expf and libmvec can satisfy the object.
  EXPECT_TRUE(contains(emitted.object, "_ZGV")) << emitted.optimized_ir;
  std::string variant = called_vector_variant(emitted.optimized_ir);
  EXPECT_NE(variant, "");
  std::printf("[ info ] the vectorised loop calls %s\n", variant.c_str());
#endif
  auto loaded = load_object(emitted.object, test_symbols());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  auto exp_all = loaded->function<void(const float*, float*, int64_t)>("exp_all");
  ASSERT_TRUE(exp_all.ok()) << exp_all.error().message();

  constexpr int64_t kCount = 517;
  std::vector<float> x(kCount), out(kCount);
  for (int64_t i = 0; i < kCount; ++i) x[i] = -20.0f + 0.078125f * float(i);  // exact in f32
  callback_calls = 0;
  callback_total = 0;
  (*exp_all)(x.data(), out.data(), kCount);
  EXPECT_EQ(callback_calls, 1);
  EXPECT_EQ(callback_total, kCount);
  int64_t worst_ulps = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    // glibc's manual bounds libmvec's error at 4 ulp (scalar expf: within 1); the reference
    // is exp in double, rounded.
    float reference = static_cast<float>(std::exp(static_cast<double>(x[i])));
    ASSERT_LE(ulp_distance(out[i], reference), 4) << "x = " << x[i];
    worst_ulps = std::max(worst_ulps, ulp_distance(out[i], reference));
  }
  std::printf("[ info ] expf: worst error %lld ulp against exp in double\n",
              static_cast<long long>(worst_ulps));
}

TEST(CpuObjectCode, ExceptionsUnwindThroughLoadedCode) {
  Emitted emitted = emit_or_die(build_throw_then_count);
  auto loaded = load_object(emitted.object, test_symbols());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  auto function = loaded->function<void(int64_t)>("throw_then_count");
  ASSERT_TRUE(function.ok());
  callback_calls = 0;
  callback_total = 0;
  (*function)(0);
  EXPECT_EQ(callback_calls, 1);
  // Unwinding through the loaded frame needs its registered EH frame; without it this aborts.
  try {
    (*function)(42);
    ADD_FAILURE() << "no exception";
  } catch (const TestException& exception) {
    EXPECT_EQ(exception.value, 42);
  }
  EXPECT_EQ(callback_calls, 1);
}

int64_t precast_test_counter = 0;

TEST(CpuObjectCode, RuntimeDataIsReachedThroughTheGot) {
  Emitted emitted = emit_or_die(build_bump_dso_local);
  SymbolTable symbols = test_symbols();
  symbols["precast_test_counter"] = &precast_test_counter;
  auto loaded = load_object(emitted.object, symbols);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  auto bump = loaded->function<void(int64_t)>("bump");
  ASSERT_TRUE(bump.ok());
  precast_test_counter = 40;
  (*bump)(2);
  EXPECT_EQ(precast_test_counter, 42);
}

TEST(CpuObjectCode, UnboundSymbolsAreErrorsNamingThem) {
  Emitted emitted = emit_or_die(build_call_missing);
  auto loaded = load_object(emitted.object, test_symbols());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code(), ExitCode::kIncompatible);
  const std::string& message = loaded.error().message();
  EXPECT_NE(message.find("precast_missing_symbol"), std::string::npos) << message;
  EXPECT_NE(message.find("precast_other_missing"), std::string::npos) << message;
  EXPECT_NE(message.find("unresolved"), std::string::npos) << message;
}

TEST(CpuObjectCode, LibmvecFallbackCanBeTurnedOff) {
#if !(defined(__x86_64__) && defined(__linux__))
  GTEST_SKIP() << "libmvec mapping is x86-64 Linux only";
#endif
  Emitted emitted = emit_or_die(build_exp_all);
  runtime::LoadOptions options;
  options.resolve_from_libmvec = false;
  options.object_name = "step.o";
  auto loaded = load_object(emitted.object, test_symbols(), options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().message().rfind("step.o: unresolved symbols: _ZGV", 0), 0u)
      << loaded.error().message();
}

TEST(CpuObjectCode, MissingDefinitionIsAnError) {
  Emitted emitted = emit_or_die(build_add);
  auto loaded = load_object(emitted.object, test_symbols());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->find("no_such_function"), nullptr);
  auto missing = loaded->lookup("no_such_function");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("no_such_function"), std::string::npos);
}

// ---- Cross compilation. ----

TEST(CpuObjectCode, AArch64ObjectFromThisHost) {
  TargetSpec spec;
  spec.triple = "aarch64-linux-gnu";
  Emitted emitted = emit_or_die(build_add, spec);
  ASSERT_GE(emitted.object.size(), 64u);
  EXPECT_EQ(std::string(emitted.object.data(), 4),
            "\x7f"
            "ELF");
  uint16_t machine = 0;
  std::memcpy(&machine, emitted.object.data() + 18, sizeof(machine));  // e_machine
  EXPECT_EQ(machine, 183);                                             // EM_AARCH64
  // AArch64 always has NEON: the loop is vectorised for it too.
  EXPECT_NE(emitted.optimized_ir.find("fadd <4 x float>"), std::string::npos);

  std::string objdump = std::string(PRECAST_LLVM_TOOLS_DIR) + "/llvm-objdump";
  if (std::filesystem::exists(objdump)) {
    std::string path = write_temp_file(emitted.object, "aarch64.o");
    int status = -1;
    std::string output = run_command(objdump + " -f " + path, &status);
    std::filesystem::remove(path);
    EXPECT_EQ(status, 0) << output;
    EXPECT_NE(output.find("architecture: aarch64"), std::string::npos) << output;
    EXPECT_NE(output.find("elf64-littleaarch64"), std::string::npos) << output;
  } else {
    std::printf("[ info ] %s not found; skipped the objdump check\n", objdump.c_str());
  }

#if defined(__x86_64__)
  auto loaded = load_object(emitted.object, test_symbols());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(loaded.error().message().find("aarch64"), std::string::npos)
      << loaded.error().message();
#endif
}

TEST(CpuObjectCode, TargetErrorsNameTheValue) {
  auto expect_usage_error = [](TargetSpec spec, const std::string& named) {
    llvm::LLVMContext context;
    llvm::Module module("m", context);
    build_add(module);
    auto object = emit_object(module, spec);
    ASSERT_FALSE(object.ok()) << named;
    EXPECT_EQ(object.error().code(), ExitCode::kUsage);
    EXPECT_NE(object.error().message().find("'" + named + "'"), std::string::npos)
        << object.error().message();
  };
  expect_usage_error(target("nonsense-triple", "", ""), "nonsense-triple");
  expect_usage_error(target("riscv64-linux-gnu", "", ""), "riscv64-linux-gnu");      // not built in
  expect_usage_error(target("x86_64-apple-darwin", "", ""), "x86_64-apple-darwin");  // not ELF
  expect_usage_error(target("", "pentium-9000", ""), "pentium-9000");
  expect_usage_error(target("aarch64-linux-gnu", "host", ""), "host");
  expect_usage_error(target("aarch64-linux-gnu", "skylake", ""), "skylake");
  expect_usage_error(target("", "x86-64-v3", "+not-a-feature"), "+not-a-feature");
  expect_usage_error(target("", "x86-64-v3", "avx2"), "avx2");  // no sign
}

TEST(CpuObjectCode, FeatureStringIsResolvedAndStable) {
  auto host = backend::resolve_target({});
  ASSERT_TRUE(host.ok()) << host.error().message();
  EXPECT_TRUE(host->is_host);
  EXPECT_NE(host->cpu, "host");
  auto again = backend::target_features({});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, host->features);
#if defined(__x86_64__)
  EXPECT_NE(host->features.find("+sse2"), std::string::npos) << host->features;
#endif
  std::printf("[ info ] host target %s cpu %s, %zu feature chars\n", host->triple.c_str(),
              host->cpu.c_str(), host->features.size());

  auto explicit_cpu =
      backend::resolve_target(target("x86_64-linux-gnu", "x86-64-v3", "-fma,+avx2"));
  ASSERT_TRUE(explicit_cpu.ok()) << explicit_cpu.error().message();
  EXPECT_EQ(explicit_cpu->triple, "x86_64-unknown-linux-gnu");
  EXPECT_EQ(explicit_cpu->features, "+avx2,-fma");  // sorted by name
  EXPECT_FALSE(explicit_cpu->is_host);

  auto cross = backend::resolve_target(target("aarch64-linux-gnu", "", ""));
  ASSERT_TRUE(cross.ok());
  EXPECT_EQ(cross->cpu, "generic");
  EXPECT_EQ(cross->features, "");
  EXPECT_EQ(backend::llvm_version().rfind("19.", 0), 0u) << backend::llvm_version();
}

// ---- Damaged objects: errors, never crashes. ----

void expect_incompatible(const std::vector<char>& bytes, const std::string& what) {
  auto loaded = load_object(bytes, test_symbols());
  ASSERT_FALSE(loaded.ok()) << what;
  EXPECT_EQ(loaded.error().code(), ExitCode::kIncompatible) << what;
  EXPECT_FALSE(loaded.error().message().empty());
}

TEST(CpuObjectCode, GarbageAndDamagedObjectsAreErrors) {
  expect_incompatible({}, "empty");
  std::mt19937 random(1234);
  std::vector<char> garbage(4096);
  for (char& byte : garbage) byte = static_cast<char>(random());
  expect_incompatible(garbage, "random bytes");
  std::memcpy(garbage.data(),
              "\x7f"
              "ELF",
              4);
  expect_incompatible(garbage, "ELF magic then random bytes");

  Emitted emitted = emit_or_die(build_exp_all);
  const std::vector<char>& good = emitted.object;
  ASSERT_GT(good.size(), 256u);
  expect_incompatible(std::vector<char>(good.begin(), good.begin() + good.size() / 2),
                      "truncated to half");
  expect_incompatible(std::vector<char>(good.begin(), good.begin() + 64), "header only");
  std::vector<char> bad_type = good;
  bad_type[16] = 2;  // e_type = ET_EXEC
  expect_incompatible(bad_type, "executable, not relocatable");
  std::vector<char> bad_table = good;
  uint64_t far = uint64_t(1) << 40;
  std::memcpy(bad_table.data() + 40, &far, sizeof(far));  // e_shoff
  expect_incompatible(bad_table, "section table out of range");

  // Misaligned input is fine: the loader copies it.
  std::vector<char> shifted(good.size() + 1);
  std::memcpy(shifted.data() + 1, good.data(), good.size());
  auto loaded = load_object(shifted.data() + 1, good.size(), test_symbols());
  EXPECT_TRUE(loaded.ok()) << loaded.error().message();

  // Random byte damage and truncation: any outcome but a crash. Damaged code or data
  // bytes may still link, so only the absence of a crash is checked; nothing is called.
  // PRECAST_DAMAGE_TRIALS=N runs N trials (default 500).
  const char* trials_text = std::getenv("PRECAST_DAMAGE_TRIALS");
  int trials = trials_text != nullptr ? std::atoi(trials_text) : 500;
  int rejected = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<char> damaged = good;
    int changes = 1 + random() % 8;
    for (int k = 0; k < changes; ++k)
      damaged[random() % damaged.size()] = static_cast<char>(random());
    if (trial % 16 == 0) damaged.resize(1 + random() % damaged.size());
    if (!load_object(damaged, test_symbols()).ok()) ++rejected;
  }
  std::printf("[ info ] %d of %d randomly damaged objects rejected, none crashed\n", rejected,
              trials);
}

// ---- Timings (printed, not asserted). ----

TEST(CpuObjectCode, ReportsEmitAndLinkTimes) {
  std::vector<double> emit_ms, link_ms;
  std::vector<char> object;
  for (int run = 0; run < 5; ++run) {
    Emitted emitted = emit_or_die(build_exp_all);
    emit_ms.push_back(emitted.emit_ms);
    object = emitted.object;
  }
  for (int run = 0; run < 20; ++run) {
    auto start = std::chrono::steady_clock::now();
    auto loaded = load_object(object, test_symbols());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    ASSERT_NE(loaded->find("exp_all"), nullptr);
    link_ms.push_back(milliseconds_since(start));
  }
  std::sort(emit_ms.begin(), emit_ms.end());
  std::sort(link_ms.begin(), link_ms.end());
  std::printf("[ info ] emit (O3 + codegen, exp_all): median %.2f ms, min %.2f ms; object %zu B\n",
              emit_ms[emit_ms.size() / 2], emit_ms[0], object.size());
  std::printf("[ info ] load+link+lookup: median %.3f ms, min %.3f ms\n",
              link_ms[link_ms.size() / 2], link_ms[0]);
}

// ---- The size probe (runtime/loader/loader_size_probe.cpp) runs an emitted object. ----

TEST(CpuObjectCode, LoaderProbeRunsAnEmittedObject) {
  Emitted emitted = emit_or_die(build_probe_entry);
  std::string path = write_temp_file(emitted.object, "probe.o");
  int status = -1;
  std::string output = run_command(
      std::string(PRECAST_LOADER_PROBE) + " " + path + " precast_probe_entry 10", &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output.rfind("result 45 callback_total 10 ", 0), 0u) << output;
  std::printf("[ info ] probe: %s", output.c_str());

  output = run_command(std::string(PRECAST_LOADER_PROBE) + " " + path + " no_such 1 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("no_such"), std::string::npos) << output;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace precast
