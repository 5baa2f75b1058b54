// The reference interpreter: runs a function on host tensors, slowly and simply, as the oracle
// for the code generator and for autodiff's finite-difference checks. Every element is held
// as a double; after each op the result is rounded to its dtype (f32/bf16/f16 round to
// nearest even, s32/u32 wrap), so a single op matches a correctly rounded op of that format.
// Reductions and contractions accumulate in double before the one final rounding.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/Module.h"

namespace precast::ir {

struct HostTensor {
  TensorType type;
  std::vector<double> values;  // row-major, type.num_elements() entries

  static HostTensor filled(const TensorType& type, double value);
  static HostTensor scalar(double value, DType dtype = DType::kF32);
  static HostTensor of(const TensorType& type, std::vector<double> values);
};

struct InterpreterOptions {
  // false: floating values stay in double everywhere (an f32 graph evaluated in f64), which is
  // what finite-difference gradient checks want. Integer and pred results are always exact.
  bool round_to_dtype = true;
  // true: composites run through their op-table decomposition instead of the direct kernel
  // (the direct attention kernel follows `flash`: blocked online softmax, or full scores).
  bool decompose_composites = false;
  // Called with every op result as it is computed (device 0 for `interpret`): for debugging a
  // pass by comparing intermediate values.
  std::function<void(size_t device, Value value, const HostTensor& tensor)> observer;
};

// Verifies the function, checks the arguments against its parameters (usage errors), and
// returns its results.
Expected<std::vector<HostTensor>> interpret(const Function& function,
                                            std::span<const HostTensor> arguments,
                                            const InterpreterOptions& options = {});
Expected<std::vector<HostTensor>> interpret(const Module& module, std::string_view function_name,
                                            std::span<const HostTensor> arguments,
                                            const InterpreterOptions& options = {});

// The device mesh a per-device function (one with collectives, after SPMD partitioning) runs on:
// axis names and sizes, major to minor, numbered in MaxText's device order as the MPI runtime
// numbers its ranks (runtime/collectives/DeviceMesh): with `dcn` (the part of each axis across
// slices; empty: one slice) device d is in slice d / devices_per_slice, its place inside the slice
// is row-major over the ICI sizes (sizes[i] / dcn[i]), the slice row-major over the DCN sizes,
// and along axis i its coordinate is dcn_digit * ici[i] + ici_digit. One slice: d's row-major
// digits over `sizes`.
struct InterpreterMesh {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  std::vector<int64_t> dcn;  // empty, or one entry per axis dividing its size
  int64_t num_devices() const;
  // Per axis, 0 <= coordinate < sizes[i]. Precondition: 0 <= device < num_devices().
  std::vector<int64_t> coordinates(int64_t device) const;
};

// Runs a per-device function on every device of the mesh in lockstep; arguments[d] and the
// returned results[d] are device d's. Collectives combine the group's values exactly as the
// runtime's would (sums in double, then rounded); shard_slice keeps the device's piece.
// `interpret` runs such a function only when every collective's group has one device.
Expected<std::vector<std::vector<HostTensor>>> interpret_spmd(
    const Function& function, const InterpreterMesh& mesh,
    std::span<const std::vector<HostTensor>> arguments, const InterpreterOptions& options = {});

}  // namespace precast::ir
