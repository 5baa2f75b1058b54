// Role: the collectives the runtime runs a program's collective steps through, over byte
// buffers with an element type and counts: all-reduce (sum, max), all-gather, reduce-scatter,
// all-to-all, collective-permute, barrier and broadcast. SingleProcessCommunicator is the
// group of one (copies); MpiCommunicator.h gives one per group of MPI ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "ir/support/Error.h"

namespace precast::runtime {

enum class ElementType : uint8_t { kF32, kF64, kBF16, kF16, kS32, kU32, kPred };
enum class ReduceOp : uint8_t { kSum, kMax };

// The element type of an IR dtype name ("f32", "bf16", ...), or nullopt.
std::optional<ElementType> element_type(std::string_view dtype);
// The IR dtype name of an element type: element_type's inverse ("f32", ..., "pred").
std::string_view element_type_name(ElementType type);
int64_t element_bytes(ElementType type);

// Every call is collective: each rank of the group calls it with the same counts and type, in
// the same order. `count` is in elements. Unless noted, send and recv may not overlap. Errors
// (a transport failure, a count this group cannot split) are Errors naming the call.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // recv[i] = op over ranks of send[i], i < count. send == recv is allowed.
  virtual Status all_reduce(const void* send, void* recv, int64_t count, ElementType type,
                            ReduceOp op) = 0;
  // recv = the ranks' `count` elements each, concatenated in rank order (size() * count).
  virtual Status all_gather(const void* send, void* recv, int64_t count, ElementType type) = 0;
  // send holds size() * count elements; rank r's recv = op over ranks of piece r (count).
  virtual Status reduce_scatter(const void* send, void* recv, int64_t count, ElementType type,
                                ReduceOp op) = 0;
  // send holds size() pieces of `count`; piece j goes to rank j, whose recv holds the pieces
  // from every rank in rank order.
  virtual Status all_to_all(const void* send, void* recv, int64_t count, ElementType type) = 0;
  // Rank r sends its `count` elements to rank (r + shift) mod size() and receives from
  // (r - shift) mod size().
  virtual Status collective_permute(const void* send, void* recv, int64_t count,
                                    ElementType type, int64_t shift) = 0;
  virtual Status barrier() = 0;
  // Every rank's buffer becomes root's.
  virtual Status broadcast(void* buffer, int64_t count, ElementType type, int root) = 0;
};

// The group of one process: every collective is a copy of send into recv (identity), barrier a
// no-op, broadcast from root 0 leaves the buffer as it is.
class SingleProcessCommunicator final : public Communicator {
 public:
  // A group of `group_size` processes; anything but 1 is an Error (usage, exit 2) saying that
  // this build runs one process.
  static Expected<std::unique_ptr<SingleProcessCommunicator>> create(int64_t group_size = 1);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status all_reduce(const void* send, void* recv, int64_t count, ElementType type,
                    ReduceOp op) override;
  Status all_gather(const void* send, void* recv, int64_t count, ElementType type) override;
  Status reduce_scatter(const void* send, void* recv, int64_t count, ElementType type,
                        ReduceOp op) override;
  Status all_to_all(const void* send, void* recv, int64_t count, ElementType type) override;
  Status collective_permute(const void* send, void* recv, int64_t count, ElementType type,
                            int64_t shift) override;
  Status barrier() override;
  Status broadcast(void* buffer, int64_t count, ElementType type, int root) override;

 private:
  SingleProcessCommunicator() = default;
};

}  // namespace precast::runtime
