// Helpers for the autodiff tests: deterministic inputs, running a function in the reference
// interpreter in double precision, central differences, and a table of the worst relative
// errors seen (printed when the test binary ends).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/Interpreter.h"
#include "ir/Module.h"

namespace precast::autodiff::testing {

// Deterministic values spread over [low, high).
std::vector<double> uniform_values(size_t count, uint32_t seed, double low, double high);

// Deterministic values with |v| in [low, high) and a pseudo-random sign: inputs kept away from 0.
std::vector<double> signed_values(size_t count, uint32_t seed, double low, double high);

ir::HostTensor f64_tensor(std::vector<int64_t> dims, std::vector<double> values);

// Runs `function` in the interpreter without rounding floats to their dtypes; a failure fails
// the current test and returns no results.
std::vector<ir::HostTensor> run(const ir::Function& function,
                                std::span<const ir::HostTensor> arguments);

// (f(x + h e_i) - f(x - h e_i)) / 2h of the scalar result 0 of `function`, where x is argument
// `param` and i the row-major `element`.
double central_difference(const ir::Function& function, std::vector<ir::HostTensor>& arguments,
                          size_t param, size_t element, double h);

// The error measure of every check: |analytic - numeric| / max(scale, 1e-300), where scale is
// the largest |gradient| of the parameter (so a tensor's small elements are held to the
// precision of its large ones).
double relative_error(double analytic, double numeric, double scale);

// Remembers the worst relative error of a labelled check for the summary printed at exit.
void record_error(const std::string& label, double error);

// Fails the current test unless the function verifies and print(parse(print)) == print.
void expect_verifies_and_round_trips(const ir::Module& module);

}  // namespace precast::autodiff::testing
