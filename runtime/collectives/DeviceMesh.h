// Role: which mesh coordinates a device (an MPI rank) has, and which devices form its group for
// a collective over some mesh axes, in MaxText's device order. Arithmetic only (no MPI), so the
// mapping is tested on one process and the MPI communicator only follows it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::runtime {

// One mesh axis with its devices split into the part inside a slice (ICI) and the part across
// slices (DCN): the axis holds ici * dcn devices. One slice: dcn = 1 everywhere.
struct MeshAxisSplit {
  std::string name;
  int64_t ici = 1;
  int64_t dcn = 1;

  int64_t size() const { return ici * dcn; }
};

// The devices that differ from one device only along a group's axes.
struct DeviceGroup {
  int64_t color = 0;             // the same for every member, different for every other group
  int64_t position = 0;          // the device's place in `members`
  std::vector<int64_t> members;  // device ids in position order
  bool spans_slices = false;     // some members are in different slices (the DCN network)
};

// Device numbering (MaxText's create_device_mesh / create_hybrid_device_mesh on hosts whose
// devices are listed in id order): device d is in slice d / devices_per_slice, and its position
// inside the slice is row-major over the axes' ICI sizes; the slice number is row-major over the
// DCN sizes. Along axis i the coordinate is dcn_digit * ici[i] + ici_digit. With one slice this
// is plain row-major numbering over the mesh axes in order.
class DeviceMesh {
 public:
  // Errors (exit 4): no axis, a size below 1, an axis named twice.
  static Expected<DeviceMesh> create(std::vector<MeshAxisSplit> axes);
  // One slice: every axis's size is its ICI size.
  static Expected<DeviceMesh> single_slice(const std::vector<artifact::MeshAxis>& mesh);
  // An artifact's mesh split as it was compiled: the ICI and DCN sizes of each axis from the
  // derived keys ici_parallelism and dcn_parallelism of its recorded config (one entry per mesh
  // axis). Errors (exit 4): a config without them, or sizes that do not multiply to the mesh's.
  static Expected<DeviceMesh> of_artifact(const artifact::Artifact& artifact);

  const std::vector<MeshAxisSplit>& axes() const { return axes_; }
  int64_t num_devices() const { return num_slices_ * devices_per_slice_; }
  int64_t num_slices() const { return num_slices_; }
  int64_t devices_per_slice() const { return devices_per_slice_; }

  // Per axis in mesh order, 0 <= coordinate < size. Precondition: 0 <= device < num_devices().
  std::vector<int64_t> coordinates(int64_t device) const;
  // The inverse. Precondition: one coordinate per axis, each in range.
  int64_t device(std::span<const int64_t> coordinates) const;

  // `device`'s group along `axes` (in the order given, which orders the members: position is
  // row-major over the given axes' coordinates, as the lockstep interpreter numbers a group);
  // color is row-major over the coordinates on the other axes. Errors (exit 4) name an axis the
  // mesh lacks or one given twice.
  Expected<DeviceGroup> group(int64_t device, std::span<const std::string> axes) const;
  // `device`'s group among explicit replica groups (device ids, each device in exactly one):
  // color is the group's index. Errors (exit 4) name a device missing, repeated or out of range.
  Expected<DeviceGroup> replica_group(int64_t device,
                                      const std::vector<std::vector<int64_t>>& groups) const;

  // "data=2, fsdp=2", with "(ici 2 x dcn 2)" after an axis that spans slices.
  std::string describe() const;

 private:
  explicit DeviceMesh(std::vector<MeshAxisSplit> axes);
  int64_t slice_of(int64_t device) const { return device / devices_per_slice_; }

  std::vector<MeshAxisSplit> axes_;
  int64_t num_slices_ = 1;
  int64_t devices_per_slice_ = 1;
};

}  // namespace precast::runtime
