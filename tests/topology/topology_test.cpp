// The topology table against MaxText's CSV, and mesh construction with MaxText's fill rules and
// exact error messages (maxtext-facts §b, §f).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/topology/Mesh.h"
#include "compiler/topology/Topology.h"

namespace precast {
namespace {

const std::filesystem::path kTable =
    std::filesystem::path(PRECAST_SOURCE_DIR) / "configs/topologies.yml";

TopologyTable table() {
  Expected<TopologyTable> t = TopologyTable::load(kTable);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return t.ok() ? *t : TopologyTable();
}

Topology find(const std::string& name) {
  Expected<Topology> t = table().find(name);
  EXPECT_TRUE(t.ok()) << name << ": " << (t.ok() ? "" : t.error().message());
  return t.ok() ? *t : Topology();
}

TEST(TopologyTable, HoldsEveryTpuRowOfMaxTextsTable) {
  int tpu = 0;
  TopologyTable all = table();
  for (const Topology& t : all.all()) tpu += t.platform == "tpu" ? 1 : 0;
  EXPECT_EQ(tpu, 223);  // the CSV's 224 rows less the a3 GPU row
}

TEST(TopologyTable, V5p128) {
  Topology t = find("v5p-128");
  EXPECT_EQ(t.devices_per_slice, 64);
  EXPECT_EQ(t.physical_shape, (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(t.topology_name, "v5:4x4x4");
  EXPECT_EQ(t.wrap, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(t.hosts_per_slice, 16);
  EXPECT_EQ(t.chips_per_host_bounds, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_DOUBLE_EQ(t.peak_flops_per_device.at("bfloat16"), 459e12);
}

TEST(TopologyTable, OtherGenerations) {
  EXPECT_EQ(find("v4-8").devices_per_slice, 4);
  EXPECT_EQ(find("v4-8").memory_bytes_per_device, int64_t{32} << 30);
  Topology v5e = find("v5e-256");
  EXPECT_EQ(v5e.devices_per_slice, 256);
  EXPECT_EQ(v5e.wrap, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(find("v6e-128").wrap, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(find("v6e-1").chips_per_host, 1);
  Topology ironwood = find("tpu7x-8");
  EXPECT_EQ(ironwood.devices_per_slice, 8);
  EXPECT_EQ(ironwood.chips, 4);
  EXPECT_EQ(ironwood.devices_per_chip, 2);
  EXPECT_EQ(ironwood.memory_bytes_per_device, int64_t{96} << 30);  // 192 GiB chip, 2 devices
  EXPECT_EQ(find("v5p-17920").devices_per_slice, 8960);
  EXPECT_EQ(find("v4-4096").physical_shape, (std::vector<int64_t>{8, 16, 16}));
}

TEST(TopologyTable, GpuHostsAndSlices) {
  Topology h100 = find("h100-8");
  EXPECT_EQ(h100.platform, "gpu");
  EXPECT_EQ(h100.devices(4), 32);
  EXPECT_EQ(find("a3").name, "h100-8");
  EXPECT_EQ(find("h200-8").devices_per_slice, 8);
  EXPECT_DOUBLE_EQ(find("a100-8").peak_flops_per_device.at("bfloat16"), 312e12);
}

TEST(TopologyTable, CpuIsSynthesized) {
  EXPECT_EQ(find("cpu-4").devices_per_slice, 4);
  EXPECT_EQ(find("cpu").devices_per_slice, 1);
  EXPECT_EQ(find("cpu-1").platform, "cpu");
  EXPECT_FALSE(table().find("cpu-0").ok());
  EXPECT_FALSE(table().find("cpu-x").ok());
}

TEST(TopologyTable, UnknownNameListsCloseNames) {
  Expected<Topology> t = table().find("v5p-127");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().exit_code(), 2);
  EXPECT_EQ(
      t.error().message().rfind("Invalid compile topology: v5p-127. Did you mean 'v5p-128'", 0), 0u)
      << t.error().message();
}

TEST(TopologyTable, BadFilesNameFileAndLine) {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / "precast_bad_topologies.yml";
  std::ofstream(path) << "generations:\n  v4: {platform: tpu\ntpu: {}\n";
  Expected<TopologyTable> t = TopologyTable::load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find(path.string() + ":"), std::string::npos);
  EXPECT_NE(t.error().message().find("malformed YAML"), std::string::npos);
  std::ofstream(path) << "generations:\n  v4: {platform: tpu}\ntpu: {}\ngpu: {}\ncpu: {}\n";
  t = TopologyTable::load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(
      t.error().message().find(path.string() + ":2: generations entry 'v4' is missing a field"),
      std::string::npos)
      << t.error().message();
  std::filesystem::remove(path);
  EXPECT_FALSE(TopologyTable::load("/nonexistent/topologies.yml").ok());
}

std::string fill_error(std::vector<int64_t> values, int64_t target, const char* kind) {
  Expected<std::vector<int64_t>> r = fill_unspecified_mesh_axes(std::move(values), target, kind);
  return r.ok() ? "<ok>" : r.error().message();
}

TEST(MeshFill, OneUnspecifiedAxisTakesTheRemainder) {
  Expected<std::vector<int64_t>> r = fill_unspecified_mesh_axes({1, 2, -1, 4}, 64, "ICI");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<int64_t>{1, 2, 8, 4}));
  Expected<std::vector<int64_t>> none = fill_unspecified_mesh_axes({2, 4}, 8, "ICI");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, (std::vector<int64_t>{2, 4}));
}

TEST(MeshFill, MaxTextErrorMessages) {
  EXPECT_EQ(fill_error({-1, 2, -1}, 8, "ICI"),
            "Found unspecified values (-1) for more than one ICI parallelism axis. At most one "
            "axis can be unspecified.");
  EXPECT_EQ(fill_error({-1, 3}, 8, "ICI"),
            "Unspecified value unable to be determined with the given ICI parallelism values");
  EXPECT_EQ(fill_error({2, 2}, 8, "ICI"),
            "Number of devices per slice 8 does not match the product of the ICI parallelism 4");
  EXPECT_EQ(fill_error({3, 1}, 2, "DCN"),
            "Number of slices 2 does not match the product of the DCN parallelism 3");
}

const std::vector<std::string> kAxes = {"data", "stage", "fsdp", "tensor"};

TEST(BuildMesh, SingleSliceIgnoresDcnAutoFill) {
  Expected<Mesh> mesh = build_mesh({kAxes, {1, 1, -1, 2}, {-1, 1, 1, 1}, 16, 1});
  ASSERT_TRUE(mesh.ok()) << mesh.error().message();
  EXPECT_EQ(mesh->shape, (std::vector<int64_t>{1, 1, 8, 2}));
  EXPECT_EQ(mesh->axis_size("fsdp"), 8);
  EXPECT_EQ(mesh->axis_size("expert"), 1);
  EXPECT_EQ(mesh->num_devices_line(), "Num_devices: 16, shape (1, 1, 8, 2)");
}

TEST(BuildMesh, MultiSliceMultipliesIciByDcn) {
  Expected<Mesh> mesh = build_mesh({kAxes, {1, 1, -1, 1}, {-1, 1, 1, 1}, 128, 2});
  ASSERT_TRUE(mesh.ok()) << mesh.error().message();
  EXPECT_EQ(mesh->ici, (std::vector<int64_t>{1, 1, 64, 1}));
  EXPECT_EQ(mesh->dcn, (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(mesh->shape, (std::vector<int64_t>{2, 1, 64, 1}));
}

TEST(BuildMesh, DcnParallelismNeedsSlices) {
  Expected<Mesh> mesh = build_mesh({kAxes, {1, 1, -1, 1}, {2, 1, 1, 1}, 8, 1});
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.error().message(), "DCN parallelism requested but only one slice available.");
}

TEST(BuildMesh, OneAxisTupleHasTrailingComma) {
  Expected<Mesh> mesh = build_mesh({{"fsdp"}, {-1}, {1}, 4, 1});
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->shape_string(), "(4,)");
}

}  // namespace
}  // namespace precast
