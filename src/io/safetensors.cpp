#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tdyn {
namespace {

DType parse_dtype(const std::string& s, const std::string& tensor, const std::string& file) {
  static const std::map<std::string, DType> known = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64}, {"I64", DType::I64},
      {"I32", DType::I32}, {"I16", DType::I16}, {"I8", DType::I8},    {"U8", DType::U8},   {"BOOL", DType::BOOL}};
  auto it = known.find(s);
  if (it == known.end()) fail("{}: tensor '{}' has unsupported dtype '{}'", file, tensor, s);
  return it->second;
}

// Parses JSON, rejecting duplicate keys in any object (nlohmann would silently keep the last one).
nlohmann::json parse_json_strict(std::string_view text, const std::string& what) {
  std::vector<std::set<std::string>> keys_per_depth;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      if (keys_per_depth.size() <= static_cast<size_t>(depth)) keys_per_depth.resize(depth + 1);
      keys_per_depth[depth].clear();
    } else if (event == E::key && depth >= 1) {
      auto& keys = keys_per_depth[depth - 1];
      if (!keys.insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", what, e.what());
  }
  if (!duplicate.empty()) fail("{}: duplicate key '{}'", what, duplicate);
  return j;
}

uint64_t checked_numel(const nlohmann::json& shape, const std::string& tensor, const std::string& file, Shape* out) {
  if (!shape.is_array()) fail("{}: tensor '{}' has a shape that is not a list", file, tensor);
  uint64_t n = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) fail("{}: tensor '{}' has a non-integer or negative dimension", file, tensor);
    uint64_t v = d.get<uint64_t>();
    // 2^60 elements keep the byte count (at most 8 bytes per element) below 2^63: it cannot wrap around.
    if (v != 0 && n > (uint64_t{1} << 60) / v) fail("{}: tensor '{}' shape overflows", file, tensor);
    n *= v;
    out->push_back(static_cast<int64_t>(v));
  }
  return n;
}

}  // namespace

void read_safetensors(const fs::path& path, TensorStore& store) { read_safetensors(MappedFile::open(path), store); }

void read_safetensors(std::shared_ptr<const MappedFile> file, TensorStore& store) {
  const std::string name = file->path();
  if (file->size() < 8) fail("{}: too short for a safetensors file ({} bytes)", name, file->size());
  uint64_t header_len;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > kSafetensorsMaxHeader) fail("{}: header length {} exceeds the {} byte limit", name, header_len, kSafetensorsMaxHeader);
  if (header_len > file->size() - 8) fail("{}: header length {} runs past the end of the file ({} bytes)", name, header_len, file->size());
  std::string_view header = file->view().substr(8, header_len);
  nlohmann::json j = parse_json_strict(header, name + " header");
  if (!j.is_object()) fail("{}: header is not a JSON object", name);
  const std::byte* buffer = file->data() + 8 + header_len;
  const uint64_t buffer_size = file->size() - 8 - header_len;

  struct Span { uint64_t begin, end; std::string tensor; };
  std::vector<Span> spans;
  std::vector<TensorInfo> infos;
  for (auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("{}: __metadata__ is not an object", name);
      for (auto& [k, v] : value.items()) {
        if (!v.is_string()) fail("{}: __metadata__ value for '{}' is not a string", name, k);
        store.metadata()[k] = v;
      }
      continue;
    }
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets"))
      fail("{}: tensor '{}' needs dtype, shape and data_offsets", name, key);
    if (!value["dtype"].is_string()) fail("{}: tensor '{}' dtype is not a string", name, key);
    TensorInfo info;
    info.name = key;
    info.file = name;
    info.dtype = parse_dtype(value["dtype"].get<std::string>(), key, name);
    uint64_t n = checked_numel(value["shape"], key, name, &info.shape);
    const auto& off = value["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor '{}' data_offsets must be two non-negative integers", name, key);
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > buffer_size)
      fail("{}: tensor '{}' data_offsets [{}, {}] lie outside the {}-byte data buffer", name, key, begin, end, buffer_size);
    uint64_t expected = n * dtype_size(info.dtype);
    if (end - begin != expected)
      fail("{}: tensor '{}' has {} bytes but shape {} of {} needs {}", name, key, end - begin, shape_str(info.shape),
           dtype_name(info.dtype), expected);
    info.data = buffer + begin;
    info.nbytes = end - begin;
    spans.push_back({begin, end, key});
    infos.push_back(std::move(info));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      fail("{}: tensors '{}' and '{}' overlap in the data buffer", name, spans[i - 1].tensor, spans[i].tensor);
  }
  for (auto& info : infos) store.add(std::move(info));
  store.keep_alive(std::move(file));
  store.format = "safetensors";
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& name) {
  nlohmann::json j = parse_json_strict(text, name);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: expected an object with a \"weight_map\"", name);
  std::map<std::string, std::string> weight_map;
  for (auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) fail("{}: weight_map entry for '{}' is not a file name", name, tensor);
    std::string s = shard.get<std::string>();
    if (s.empty() || s.find('/') != std::string::npos || s == "..")
      fail("{}: shard name '{}' for '{}' must be a plain file name in the same directory", name, s, tensor);
    weight_map[tensor] = s;
  }
  return weight_map;
}

void check_safetensors_index(const std::map<std::string, std::string>& weight_map, const TensorStore& store,
                             const std::string& name) {
  for (const auto& [tensor, shard] : weight_map) {
    const TensorInfo* t = store.find(tensor);
    if (!t) fail("{}: tensor '{}' is mapped to '{}' but that shard does not contain it", name, tensor, shard);
    if (fs::path(t->file).filename() != shard)
      fail("{}: tensor '{}' is mapped to '{}' but found in '{}'", name, tensor, shard, t->file);
  }
}

void read_safetensors_index(const fs::path& index_file, TensorStore& store) {
  read_weight_index(index_file, store, [](const fs::path& shard, TensorStore& s) { read_safetensors(shard, s); });
}

void read_weight_index(const fs::path& index_file, TensorStore& store,
                       const std::function<void(const fs::path&, TensorStore&)>& read_shard) {
  const std::string name = index_file.string();
  const std::map<std::string, std::string> weight_map = parse_safetensors_index(read_file(index_file), name);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : weight_map) shards.insert(shard);
  for (const auto& shard : shards) {
    fs::path path = index_file.parent_path() / shard;
    if (!fs::exists(path)) fail("{}: shard '{}' is missing", name, path.string());
    read_shard(path, store);  // duplicates across shards are rejected by TensorStore::add
  }
  check_safetensors_index(weight_map, store, name);
}

void write_safetensors(const fs::path& path, const std::map<std::string, TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    uint64_t n = static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype);
    TDYN_CHECK(t.bytes.size() == n);
    header[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = h.size();
  std::memcpy(out.data(), &len, 8);
  out += h;
  for (const auto& [name, t] : tensors) out += t.bytes;
  write_file_atomic(path, out);
}

TensorToWrite f32_tensor(const Shape& shape, const float* data) {
  return {DType::F32, shape, std::string(reinterpret_cast<const char*>(data), numel(shape) * sizeof(float))};
}

}  // namespace tdyn
