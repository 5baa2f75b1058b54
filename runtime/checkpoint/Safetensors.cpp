#include "runtime/checkpoint/Safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "runtime/checkpoint/JsonValue.h"

namespace precast::checkpoint {
namespace {

struct DtypeName {
  std::string_view ir;
  std::string_view safetensors;
  int64_t bytes;
};

constexpr std::array<DtypeName, 7> kDtypes = {{{"f64", "F64", 8},
                                               {"f32", "F32", 4},
                                               {"bf16", "BF16", 2},
                                               {"f16", "F16", 2},
                                               {"s32", "I32", 4},
                                               {"u32", "U32", 4},
                                               {"pred", "BOOL", 1}}};

// The header never gets near this; a larger length field means a damaged or foreign file.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Error bad(const std::string& file, const std::string& what) {
  return Error(ExitCode::kIncompatible,
               fmt::format("{}: {}; the file is damaged or not a safetensors file: restore it or "
                           "save the checkpoint again",
                           file, what));
}

}  // namespace

std::string_view safetensors_dtype(std::string_view ir_dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.ir == ir_dtype) return d.safetensors;
  }
  return {};
}

std::string_view ir_dtype_from_safetensors(std::string_view dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.safetensors == dtype) return d.ir;
  }
  return {};
}

int64_t safetensors_element_bytes(std::string_view dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.safetensors == dtype) return d.bytes;
  }
  return 0;
}

int64_t tensor_view_bytes(const TensorView& t) {
  return element_count(t.shape) * safetensors_element_bytes(safetensors_dtype(t.dtype));
}

Status encode_safetensors(const std::vector<TensorView>& tensors, std::string& header) {
  std::string json = "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"precast\"}";
  int64_t offset = 0;
  for (const TensorView& t : tensors) {
    std::string_view dtype = safetensors_dtype(t.dtype);
    if (dtype.empty()) {
      return internal_error(fmt::format("tensor {} has dtype {}, which safetensors cannot hold",
                                        t.name, t.dtype));
    }
    int64_t bytes = tensor_view_bytes(t);
    json += fmt::format(",{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        json_quote(t.name), dtype, fmt::join(t.shape, ","), offset,
                        offset + bytes);
    offset += bytes;
  }
  json += "}";
  // Trailing spaces (the format allows whitespace padding of the header) bring the data's start,
  // 8 + the header, to a multiple of 4096: every tensor stays 8-aligned as the format recommends,
  // and a writer can send the data from an aligned buffer with O_DIRECT (DurableFile.h).
  json.append((kSafetensorsDataAlignment - (8 + json.size()) % kSafetensorsDataAlignment) %
                  kSafetensorsDataAlignment,
              ' ');
  header.assign(8, '\0');
  uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  header += json;
  return Status::success();
}

uint64_t safetensors_header_length(std::string_view first_8_bytes) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) {
    length = (length << 8) | static_cast<unsigned char>(first_8_bytes[static_cast<size_t>(i)]);
  }
  return length;
}

Expected<std::vector<TensorPlace>> decode_safetensors_header(std::string_view prefix,
                                                             uint64_t file_size,
                                                             const std::string& file) {
  if (file_size < 8 || prefix.size() < 8) {
    return bad(file, fmt::format("{} bytes, fewer than the 8-byte header length", file_size));
  }
  const uint64_t length = safetensors_header_length(prefix);
  if (length > kMaxHeaderBytes || length > file_size - 8) {
    return bad(file, fmt::format("the header length at byte 0 is {}, but the file has {} bytes",
                                 length, file_size));
  }
  if (prefix.size() < 8 + length) {
    return internal_error(fmt::format("{}: {} header bytes given, {} needed", file, prefix.size(),
                                      8 + length));
  }
  Expected<JsonValue> header = parse_json(prefix.substr(8, length));
  if (!header.ok()) return bad(file, "header: " + header.error().message());
  if (!header->is_object()) return bad(file, "the header is not a JSON object");
  const uint64_t data_start = 8 + length;
  const uint64_t data_size = file_size - data_start;

  std::vector<std::pair<std::pair<int64_t, int64_t>, Tensor>> found;
  for (const auto& [name, entry] : header->members) {
    if (name == "__metadata__") continue;
    const JsonValue* dtype = entry.find("dtype");
    const JsonValue* shape = entry.find("shape");
    const JsonValue* offsets = entry.find("data_offsets");
    if (dtype == nullptr || dtype->kind != JsonValue::Kind::kString || shape == nullptr ||
        shape->kind != JsonValue::Kind::kArray || offsets == nullptr ||
        offsets->kind != JsonValue::Kind::kArray || offsets->items.size() != 2) {
      return bad(file, fmt::format("header entry {} lacks a dtype string, a shape list or a "
                                   "two-number data_offsets",
                                   name));
    }
    Tensor t;
    t.name = name;
    t.dtype = std::string(ir_dtype_from_safetensors(dtype->text));
    if (t.dtype.empty()) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("{}: tensor {} has dtype {}, which Precast does not train with "
                               "(F64, F32, BF16, F16, I32, U32, BOOL); convert it first",
                               file, name, dtype->text));
    }
    int64_t count = 1;
    for (const JsonValue& d : shape->items) {
      int64_t dim = 0;
      if (!d.as_int(dim) || dim < 0 || (dim > 0 && count > (int64_t{1} << 50) / dim)) {
        return bad(file, fmt::format("tensor {} has shape entry {}", name, d.text));
      }
      t.shape.push_back(dim);
      count *= dim;
    }
    int64_t begin = 0, end = 0;
    if (!offsets->items[0].as_int(begin) || !offsets->items[1].as_int(end) || begin < 0 ||
        end < begin) {
      return bad(file, fmt::format("tensor {} has data_offsets [{}, {}]", name,
                                   offsets->items[0].text, offsets->items[1].text));
    }
    int64_t expected = count * safetensors_element_bytes(dtype->text);
    if (end - begin != expected) {
      return bad(file, fmt::format("tensor {} ({} {}) needs {} bytes but data_offsets [{}, {}] "
                                   "span {}",
                                   name, dtype->text, fmt::join(t.shape, "x"), expected, begin,
                                   end, end - begin));
    }
    if (static_cast<uint64_t>(end) > data_size) {
      return bad(file, fmt::format("tensor {} ends at data byte {} (file byte {}), but the file "
                                   "has {} bytes: it is truncated",
                                   name, end, data_start + static_cast<uint64_t>(end),
                                   file_size));
    }
    found.push_back({{begin, end}, std::move(t)});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  int64_t covered = 0;
  std::vector<TensorPlace> places;
  for (auto& [range, t] : found) {
    if (range.first != covered) {
      return bad(file, fmt::format("tensor {} starts at data byte {}, expected {} (the data must "
                                   "be covered without holes or overlaps)",
                                   t.name, range.first, covered));
    }
    covered = range.second;
    places.push_back({std::move(t), data_start + static_cast<uint64_t>(range.first),
                      static_cast<uint64_t>(range.second - range.first)});
  }
  if (static_cast<uint64_t>(covered) != data_size) {
    return bad(file, fmt::format("the tensors cover {} data bytes, but {} follow the header",
                                 covered, data_size));
  }
  return places;
}

Expected<std::vector<Tensor>> decode_safetensors(const std::string& bytes,
                                                 const std::string& file) {
  PRECAST_ASSIGN_OR_RETURN(std::vector<TensorPlace> places,
                           decode_safetensors_header(bytes, bytes.size(), file));
  std::vector<Tensor> tensors;
  tensors.reserve(places.size());
  for (TensorPlace& p : places) {
    p.tensor.bytes = bytes.substr(p.file_offset, p.bytes);
    tensors.push_back(std::move(p.tensor));
  }
  return tensors;
}

}  // namespace precast::checkpoint
