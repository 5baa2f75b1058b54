#include "tests/autodiff/GradientCheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace precast::autodiff::testing {
namespace {

// A 64-bit linear congruential step; the high bits are the value.
uint64_t next_state(uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return state >> 11;
}

std::map<std::string, double>& worst_errors() {
  static std::map<std::string, double> errors;
  return errors;
}

// Prints every recorded check's worst relative error once the tests have run.
class ErrorSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    if (worst_errors().empty()) return;
    fmt::print("worst relative error per gradient check (|analytic - numeric| / max |grad|):\n");
    for (const auto& [label, error] : worst_errors()) fmt::print("  {:<58} {:.2e}\n", label, error);
  }
};

[[maybe_unused]] ::testing::Environment* const summary =
    ::testing::AddGlobalTestEnvironment(new ErrorSummary);

}  // namespace

std::vector<double> uniform_values(size_t count, uint32_t seed, double low, double high) {
  uint64_t state = 0x9e3779b97f4a7c15ULL * (seed + 1);
  std::vector<double> values(count);
  for (double& v : values) {
    double unit = static_cast<double>(next_state(state)) / 9007199254740992.0;  // [0, 1)
    v = low + (high - low) * unit;
  }
  return values;
}

std::vector<double> signed_values(size_t count, uint32_t seed, double low, double high) {
  std::vector<double> magnitudes = uniform_values(count, seed, low, high);
  std::vector<double> signs = uniform_values(count, seed + 1000, -1.0, 1.0);
  for (size_t i = 0; i < count; ++i) magnitudes[i] *= signs[i] < 0 ? -1.0 : 1.0;
  return magnitudes;
}

ir::HostTensor f64_tensor(std::vector<int64_t> dims, std::vector<double> values) {
  return ir::HostTensor::of(ir::TensorType{ir::DType::kF64, std::move(dims)}, std::move(values));
}

std::vector<ir::HostTensor> run(const ir::Function& function,
                                std::span<const ir::HostTensor> arguments) {
  ir::InterpreterOptions options;
  options.round_to_dtype = false;
  Expected<std::vector<ir::HostTensor>> results = ir::interpret(function, arguments, options);
  if (!results.ok()) {
    ADD_FAILURE() << "interpreting @" << function.name() << ": " << results.error().message();
    return {};
  }
  return std::move(results).value();
}

double central_difference(const ir::Function& function, std::vector<ir::HostTensor>& arguments,
                          size_t param, size_t element, double h) {
  double& x = arguments[param].values[element];
  double saved = x;
  x = saved + h;
  std::vector<ir::HostTensor> plus = run(function, arguments);
  x = saved - h;
  std::vector<ir::HostTensor> minus = run(function, arguments);
  x = saved;
  if (plus.empty() || minus.empty()) return NAN;
  return (plus[0].values[0] - minus[0].values[0]) / (2 * h);
}

double relative_error(double analytic, double numeric, double scale) {
  return std::abs(analytic - numeric) / std::max(scale, 1e-300);
}

void record_error(const std::string& label, double error) {
  double& worst = worst_errors()[label];
  worst = std::max(worst, error);
}

void expect_verifies_and_round_trips(const ir::Module& module) {
  Status verified = ir::verify_module(module);
  ASSERT_TRUE(verified.ok()) << verified.error().message() << "\n" << ir::print_module(module);
  std::string text = ir::print_module(module);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), text);
}

}  // namespace precast::autodiff::testing
