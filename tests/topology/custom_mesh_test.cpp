// MaxText's custom meshes (max_utils.reshape_mesh_to_rings) by hand: the device order of the
// first rings of hybrid_ring_64x4 and hybrid_ring_32x8 on a 16x16 grid, every device once, and
// MaxText's refusals (wrong ICI values, a slice that is not 256 devices, an unknown strategy).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "compiler/topology/CustomMesh.h"
#include "compiler/topology/Mesh.h"

namespace precast {
namespace {

TEST(CustomMesh, HybridRing64x4IsSquaresOfFour) {
  Expected<std::vector<int64_t>> order = hybrid_ring_order("hybrid_ring_64x4");
  ASSERT_TRUE(order.ok());
  ASSERT_EQ(order->size(), 256u);
  // Ring 0: a[0,0], a[0,1], a[1,1], a[1,0] of the 16x16 grid (index row * 16 + column); ring 1
  // the next square to the right; ring 8 (i = 1, j = 0) starts at row 2.
  EXPECT_EQ(std::vector<int64_t>(order->begin(), order->begin() + 8),
            (std::vector<int64_t>{0, 1, 17, 16, 2, 3, 19, 18}));
  EXPECT_EQ(std::vector<int64_t>(order->begin() + 32, order->begin() + 36),
            (std::vector<int64_t>{32, 33, 49, 48}));
  EXPECT_EQ(std::vector<int64_t>(order->end() - 4, order->end()),
            (std::vector<int64_t>{238, 239, 255, 254}));
  std::vector<int64_t> sorted = *order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(256);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
}

TEST(CustomMesh, HybridRing32x8WalksATwoByFourBlock) {
  Expected<std::vector<int64_t>> order = hybrid_ring_order("hybrid_ring_32x8");
  ASSERT_TRUE(order.ok());
  ASSERT_EQ(order->size(), 256u);
  // Ring 0: a[0,0..3], then a[1,3..0]; ring 1 the next block of four columns.
  EXPECT_EQ(std::vector<int64_t>(order->begin(), order->begin() + 16),
            (std::vector<int64_t>{0, 1, 2, 3, 19, 18, 17, 16, 4, 5, 6, 7, 23, 22, 21, 20}));
  std::vector<int64_t> sorted = *order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted.front(), 0);
  EXPECT_EQ(sorted.back(), 255);
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
}

MeshRequest request_64x4() {
  MeshRequest r;
  r.axes = {"data", "fsdp", "context", "tensor"};
  r.ici = {1, -1, 4, 1};
  r.dcn = {1, 1, 1, 1};
  r.num_devices = 256;
  return r;
}

// build_mesh, then the custom mesh as resolve_config applies it.
Expected<Mesh> custom_mesh(const MeshRequest& request, const std::string& strategy,
                           bool allow_split) {
  PRECAST_ASSIGN_OR_RETURN(Mesh mesh, build_mesh(request));
  PRECAST_RETURN_IF_ERROR(apply_custom_mesh(mesh, strategy, allow_split));
  return mesh;
}

TEST(CustomMesh, TheLogicalMeshIsTheIciOne) {
  // MaxText's custom_64x4_mesh case: fsdp fills to 64 next to context 4.
  Expected<Mesh> mesh = custom_mesh(request_64x4(), "hybrid_ring_64x4", true);
  ASSERT_TRUE(mesh.ok()) << mesh.error().message();
  EXPECT_EQ(mesh->shape, (std::vector<int64_t>{1, 64, 4, 1}));
  EXPECT_EQ(mesh->custom_mesh, "hybrid_ring_64x4");
  // One slice without allow_split_physical_axes: MaxText does not read custom_mesh.
  Expected<Mesh> plain = custom_mesh(request_64x4(), "hybrid_ring_64x4", false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->custom_mesh, "");
}

TEST(CustomMesh, RefusedWithMaxTextsMessages) {
  MeshRequest wrong = request_64x4();
  wrong.ici = {1, -1, 8, 1};
  Expected<Mesh> a = custom_mesh(wrong, "hybrid_ring_64x4", true);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message().find(
                "Invalid custom_mesh:hybrid_ring_64x4 chosen for ICI mesh shape [1, 32, 8, 1]"),
            std::string::npos)
      << a.error().message();
  // The values {1, 4, 64} right, but 64 x 4 x 4 = 1024 devices in the slice, not 16 x 16.
  MeshRequest big = request_64x4();
  big.num_devices = 1024;
  big.ici = {1, 64, 4, 4};
  Expected<Mesh> b = custom_mesh(big, "hybrid_ring_64x4", true);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message().find("This custom mesh is not valid for 1024 devices"),
            std::string::npos)
      << b.error().message();
  Expected<Mesh> c = custom_mesh(request_64x4(), "ring_16x16", true);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("The strategy ring_16x16 to reshape the mesh is invalid."),
            std::string::npos)
      << c.error().message();
}

}  // namespace
}  // namespace precast
