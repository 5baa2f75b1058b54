#include "runtime/train/StatePiece.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/Safetensors.h"

namespace precast::runtime {

namespace fs = std::filesystem;

std::string state_piece_name(int64_t rank) {
  return fmt::format("state.rank-{}.safetensors", rank);
}

Status save_state_piece(const std::string& directory, int64_t rank,
                        const artifact::Signature& signature,
                        const std::vector<std::vector<uint8_t>>& final_state) {
  if (final_state.size() != signature.inputs.size()) {
    return internal_error(fmt::format("the final state has {} buffers for {} inputs",
                                      final_state.size(), signature.inputs.size()));
  }
  std::vector<checkpoint::TensorView> state;
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    const artifact::TensorSignature& t = signature.inputs[i];
    if (t.role != "parameter" && t.role != "optimizer_state") continue;
    state.push_back({t.name, t.dtype, t.shape, final_state[i].data()});
  }
  std::string header;
  PRECAST_RETURN_IF_ERROR(checkpoint::encode_safetensors(state, header));
  std::vector<checkpoint::ByteRange> pieces{{header.data(), header.size()}};
  for (const checkpoint::TensorView& t : state) {
    pieces.push_back({t.data, static_cast<size_t>(checkpoint::tensor_view_bytes(t))});
  }

  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) {
    return Error(ExitCode::kFailure,
                 fmt::format("--save-final-state: cannot create {}: {}", directory, ec.message()));
  }
  // A temporary name first: a reader never sees half a file under the final name.
  const fs::path target = fs::path(directory) / state_piece_name(rank);
  const fs::path temporary = fs::path(target.string() + ".tmp");
  PRECAST_RETURN_IF_ERROR(checkpoint::write_file_durably(temporary.string(), pieces));
  fs::rename(temporary, target, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot rename {} to {}: {}", temporary.string(),
                                                 target.string(), ec.message()));
  }
  return checkpoint::sync_directory(directory);
}

}  // namespace precast::runtime
