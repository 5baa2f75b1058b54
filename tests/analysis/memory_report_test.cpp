// The collectives `precast analyze` reports are read off the per-device program: counts by kind
// and network, and the wire bytes of ring algorithms, checked here against hand-computed figures.
#include <gtest/gtest.h>

#include <string>

#include "compiler/analysis/MemoryReport.h"
#include "ir/Parser.h"

namespace precast {
namespace {

// One of each per-device op (tests/lit/ir/collectives.ir), plus a second all-gather.
constexpr const char* kDevice = R"(
func @device(%w_shard: f32[16,32]{embed,mlp}, %partial: f32[8,32]) -> (f32[64,32]{embed,mlp}, f32[64,32], f32[8,32], f32[8,16], f32[16,16], f32[8,32], f32[4,32]) {
  %w = all_gather %w_shard {dimension=0, mesh_axes=[fsdp], group_size=4} : f32[64,32]{embed,mlp}
  %again = all_gather %w_shard {dimension=0, mesh_axes=[fsdp], group_size=4} : f32[64,32]
  %sum = all_reduce %partial {mesh_axes=[fsdp, tensor], group_size=8, dcn=true} : f32[8,32]
  %grad = reduce_scatter %partial {dimension=1, mesh_axes=[tensor], group_size=2} : f32[8,16]
  %moved = all_to_all %partial {dimension=0, mesh_axes=[context], group_size=2, split_dimension=1} : f32[16,16]
  %next = collective_permute %partial {mesh_axes=[stage], group_size=4, shift=1} : f32[8,32]
  %mine = shard_slice %partial {dimension=0, mesh_axes=[data], group_size=2} : f32[4,32]
  return %w, %again, %sum, %grad, %moved, %next, %mine
}
)";

TEST(MemoryReport, CollectivesAreCountedWithRingWireBytes) {
  Expected<ir::Module> module = ir::parse_module(kDevice);
  ASSERT_TRUE(module.ok()) << module.error().message();
  std::map<std::string, CollectiveTotals> c = count_collectives(module->function(0));
  ASSERT_EQ(c.size(), 5u);  // shard_slice sends nothing
  // all-gather: result f32[64,32] = 8192 bytes; a device receives 3 of 4 pieces: 6144, twice.
  EXPECT_EQ(c["all-gather ICI"].count, 2);
  EXPECT_EQ(c["all-gather ICI"].bytes, 2 * 8192);
  EXPECT_EQ(c["all-gather ICI"].wire_bytes, 2 * 6144);
  // all-reduce of 1024 bytes over 8 devices across slices: reduce-scatter then all-gather,
  // 2 * 7/8 * 1024 = 1792.
  EXPECT_EQ(c["all-reduce DCN"].count, 1);
  EXPECT_EQ(c["all-reduce DCN"].wire_bytes, 1792);
  // reduce-scatter and all-to-all of 1024 bytes over 2: half of it leaves the device.
  EXPECT_EQ(c["reduce-scatter ICI"].wire_bytes, 512);
  EXPECT_EQ(c["all-to-all ICI"].wire_bytes, 512);
  // collective-permute: the whole operand goes to the neighbour.
  EXPECT_EQ(c["collective-permute ICI"].count, 1);
  EXPECT_EQ(c["collective-permute ICI"].wire_bytes, 1024);

  MemoryReport report;
  report.collectives = c;
  std::string text = format_collectives(report);
  EXPECT_NE(text.find("collective-permute ICI"), std::string::npos) << text;
  EXPECT_NE(text.find("all-reduce DCN"), std::string::npos) << text;
}

TEST(MemoryReport, NoCollectivesOnOneDevice) {
  Expected<ir::Module> module = ir::parse_module(R"(
func @one(%x: f32[4]) -> (f32[4]) {
  %y = add %x, %x : f32[4]
  return %y
}
)");
  ASSERT_TRUE(module.ok()) << module.error().message();
  MemoryReport report;
  report.collectives = count_collectives(module->function(0));
  EXPECT_TRUE(report.collectives.empty());
  EXPECT_NE(format_collectives(report).find("none"), std::string::npos);
}

}  // namespace
}  // namespace precast
