#include "io/torch_pickle.h"

#include <cstring>
#include <functional>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/zip.h"

namespace tdyn {
namespace {

// The globals a state dict needs. Anything else is refused by name.
enum class Global { OrderedDict, RebuildTensorV2, RebuildTensorV3, RebuildParameter, StorageType, DTypeObject };

struct AllowedGlobal {
  Global kind;
  DType dtype = DType::U8;
  bool untyped = false;  // torch.UntypedStorage: bytes, the tensor's dtype comes from _rebuild_tensor_v3
};

const std::map<std::string, AllowedGlobal>& allowed_globals() {
  static const std::map<std::string, AllowedGlobal> table = [] {
    std::map<std::string, AllowedGlobal> t = {
        {"collections.OrderedDict", {Global::OrderedDict}},
        {"torch._utils._rebuild_tensor_v2", {Global::RebuildTensorV2}},
        {"torch._utils._rebuild_tensor_v3", {Global::RebuildTensorV3}},
        {"torch._utils._rebuild_parameter", {Global::RebuildParameter}},
        {"torch.UntypedStorage", {Global::StorageType, DType::U8, true}},
        {"torch.storage.UntypedStorage", {Global::StorageType, DType::U8, true}},
    };
    const std::pair<const char*, DType> storages[] = {
        {"Float", DType::F32}, {"Half", DType::F16}, {"BFloat16", DType::BF16}, {"Double", DType::F64},
        {"Long", DType::I64},  {"Int", DType::I32},  {"Short", DType::I16},     {"Char", DType::I8},
        {"Byte", DType::U8},   {"Bool", DType::BOOL}};
    for (const auto& [name, dtype] : storages) t[fmt::format("torch.{}Storage", name)] = {Global::StorageType, dtype};
    const std::pair<const char*, DType> dtypes[] = {
        {"float32", DType::F32}, {"float", DType::F32},  {"float16", DType::F16}, {"half", DType::F16},
        {"bfloat16", DType::BF16}, {"float64", DType::F64}, {"double", DType::F64}, {"int64", DType::I64},
        {"long", DType::I64},    {"int32", DType::I32},  {"int", DType::I32},     {"int16", DType::I16},
        {"short", DType::I16},   {"int8", DType::I8},    {"uint8", DType::U8},    {"bool", DType::BOOL}};
    for (const auto& [name, dtype] : dtypes) t[fmt::format("torch.{}", name)] = {Global::DTypeObject, dtype};
    return t;
  }();
  return table;
}

enum class Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Storage, Tensor };

const char* kind_name(Kind k) {
  static const char* names[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict", "global", "storage", "tensor"};
  return names[static_cast<int>(k)];
}

// Values live in one arena and refer to each other by index: a pickle may make containers that hold
// themselves, which owning pointers would leak or destroy recursively.
using Id = size_t;
struct Value {
  Kind kind = Kind::None;
  int64_t i = 0;          // Bool, Int; Storage, Tensor: index into the unpickler's storages / tensors
  double f = 0;           // Float
  std::string s;          // String; Global: "module.name"
  std::vector<Id> items;  // Tuple, List; Dict: key, value, key, value, ...
  AllowedGlobal global{Global::OrderedDict};
};

struct StorageRecord {
  std::string key;
  DType dtype;
  bool untyped;
  uint64_t nbytes;
  const std::byte* data;
};

struct TensorRecord {
  size_t storage;
  DType dtype;
  int64_t offset;             // in elements of dtype
  std::vector<int64_t> size, stride;
  uint64_t at;                // pickle byte offset of the call, for errors
};

// Loads data/<key> of the archive: (key, storage dtype, untyped, numel) -> the storage's bytes.
using StorageLoader = std::function<StorageRecord(const std::string& key, DType dtype, bool untyped, uint64_t numel)>;

class Unpickler {
 public:
  Unpickler(std::string_view pickle, std::string where, StorageLoader load)
      : in_(pickle), where_(std::move(where)), load_(std::move(load)) {}

  // Runs the pickle to STOP and returns the state dict as (name, tensor) in pickle order.
  std::vector<std::pair<std::string, TensorRecord>> state_dict();
  const std::vector<StorageRecord>& storages() const { return storages_; }

 private:
  template <typename... Args>
  [[noreturn]] void error(uint64_t at, fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: byte {}: {}", where_, at, fmt::format(format, std::forward<Args>(args)...));
  }

  std::string_view take(uint64_t n) {
    if (n > in_.size() - pos_) error(pos_, "the pickle ends inside an opcode argument ({} bytes needed, {} left)", n, in_.size() - pos_);
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(int n) {
    std::string_view b = take(n);
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[k]);
    return v;
  }
  std::string line() {
    size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) error(pos_, "GLOBAL argument without a newline");
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  Id make(Value v) {
    values_.push_back(std::move(v));
    return values_.size() - 1;
  }
  Id make_int(int64_t i, Kind kind = Kind::Int) {
    Value v;
    v.kind = kind;
    v.i = i;
    return make(std::move(v));
  }
  void push(Id id) { stack_.push_back(id); }
  Id pop(uint64_t at) {
    if (stack_.size() <= mark_floor()) error(at, "stack underflow");
    Id id = stack_.back();
    stack_.pop_back();
    return id;
  }
  size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Id> pop_to_mark(uint64_t at) {
    if (marks_.empty()) error(at, "no MARK before this opcode");
    std::vector<Id> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  const Value& expect(Id id, Kind kind, uint64_t at, const char* what) const {
    if (values_[id].kind != kind) error(at, "{} is a {}, expected a {}", what, kind_name(values_[id].kind), kind_name(kind));
    return values_[id];
  }
  Value& container(uint64_t at, Kind kind, const char* op) {
    if (stack_.size() <= mark_floor()) error(at, "{} with no {} on the stack", op, kind_name(kind));
    Value& v = values_[stack_.back()];
    if (v.kind != kind) error(at, "{} on a {}, expected a {}", op, kind_name(v.kind), kind_name(kind));
    return v;
  }

  Id resolve_global(const std::string& module, const std::string& name, uint64_t at);
  Id persistent_load(Id pid, uint64_t at);
  Id reduce(Id callable, Id args, uint64_t at);
  std::vector<int64_t> int_tuple(Id id, uint64_t at, const char* what) const;

  std::string_view in_;
  std::string where_;
  StorageLoader load_;
  uint64_t pos_ = 0;
  std::vector<Value> values_;
  std::vector<Id> stack_;
  std::vector<size_t> marks_;  // stack heights at each MARK
  std::map<uint64_t, Id> memo_;
  std::vector<StorageRecord> storages_;
  std::map<std::string, size_t> storage_by_key_;
  std::vector<TensorRecord> tensors_;
};

Id Unpickler::resolve_global(const std::string& module, const std::string& name, uint64_t at) {
  const std::string full = module + "." + name;
  auto it = allowed_globals().find(full);
  if (it == allowed_globals().end())
    error(at,
          "the pickle refers to the global '{}', which a state dict never needs; refused before anything runs (a "
          "state dict uses only collections.OrderedDict, torch._utils._rebuild_tensor_v2/_v3, "
          "torch._utils._rebuild_parameter, torch.*Storage and torch dtypes). torch.load would have called it: "
          "do not load this file with torch either unless you trust where it came from",
          full);
  Value v;
  v.kind = Kind::Global;
  v.s = full;
  v.global = it->second;
  return make(std::move(v));
}

// ('storage', storage type, key, location, numel) -> a storage record; the same key always the same storage.
Id Unpickler::persistent_load(Id pid, uint64_t at) {
  const Value& t = expect(pid, Kind::Tuple, at, "the persistent id");
  if (t.items.size() != 5 || values_[t.items[0]].kind != Kind::String || values_[t.items[0]].s != "storage")
    error(at, "persistent id is not ('storage', type, key, location, numel)");
  const Value& type = expect(t.items[1], Kind::Global, at, "the storage type");
  if (type.global.kind != Global::StorageType) error(at, "'{}' is not a storage type", type.s);
  const std::string key = expect(t.items[2], Kind::String, at, "the storage key").s;
  expect(t.items[3], Kind::String, at, "the storage location");
  const int64_t numel = expect(t.items[4], Kind::Int, at, "the storage size").i;
  if (numel < 0) error(at, "storage '{}' has negative size {}", key, numel);
  auto found = storage_by_key_.find(key);
  if (found != storage_by_key_.end()) {
    const StorageRecord& s = storages_[found->second];
    if (s.dtype != type.global.dtype || s.untyped != type.global.untyped ||
        s.nbytes != static_cast<uint64_t>(numel) * dtype_size(s.dtype))
      error(at, "storage '{}' is referred to with two different types or sizes", key);
  } else {
    storage_by_key_[key] = storages_.size();
    storages_.push_back(load_(key, type.global.dtype, type.global.untyped, static_cast<uint64_t>(numel)));
  }
  return make_int(static_cast<int64_t>(storage_by_key_[key]), Kind::Storage);
}

std::vector<int64_t> Unpickler::int_tuple(Id id, uint64_t at, const char* what) const {
  std::vector<int64_t> out;
  for (Id item : expect(id, Kind::Tuple, at, what).items) out.push_back(expect(item, Kind::Int, at, what).i);
  return out;
}

// The "call" of an allowed global: builds a dict or a tensor record; nothing runs.
Id Unpickler::reduce(Id callable, Id args_id, uint64_t at) {
  const Value& f = expect(callable, Kind::Global, at, "the callable of REDUCE");
  const std::vector<Id> args = expect(args_id, Kind::Tuple, at, "the arguments of REDUCE").items;
  switch (f.global.kind) {
    case Global::OrderedDict: {
      if (!args.empty()) error(at, "collections.OrderedDict called with arguments; torch.save writes OrderedDict()");
      Value d;
      d.kind = Kind::Dict;
      return make(std::move(d));
    }
    case Global::RebuildParameter:
      if (args.size() != 3) error(at, "torch._utils._rebuild_parameter takes 3 arguments, got {}", args.size());
      expect(args[0], Kind::Tensor, at, "the data of a parameter");
      return args[0];
    case Global::RebuildTensorV2:
    case Global::RebuildTensorV3: {
      const bool v3 = f.global.kind == Global::RebuildTensorV3;
      const size_t need = v3 ? 7 : 6;
      if (args.size() != need && args.size() != need + 1)
        error(at, "{} takes {} or {} arguments, got {}", f.s, need, need + 1, args.size());
      TensorRecord t;
      t.storage = static_cast<size_t>(expect(args[0], Kind::Storage, at, "the first argument of a tensor").i);
      t.offset = expect(args[1], Kind::Int, at, "the storage offset").i;
      t.size = int_tuple(args[2], at, "the size of a tensor");
      t.stride = int_tuple(args[3], at, "the stride of a tensor");
      t.at = at;
      const StorageRecord& s = storages_[t.storage];
      if (v3) {
        const Value& d = expect(args[6], Kind::Global, at, "the dtype of a tensor");
        if (d.global.kind != Global::DTypeObject) error(at, "the dtype of a tensor is '{}', not a torch dtype", d.s);
        t.dtype = d.global.dtype;
      } else if (s.untyped) {
        error(at, "_rebuild_tensor_v2 over an untyped storage: the tensor's dtype is unknown");
      } else {
        t.dtype = s.dtype;
      }
      tensors_.push_back(std::move(t));
      return make_int(static_cast<int64_t>(tensors_.size() - 1), Kind::Tensor);
    }
    default:
      error(at, "'{}' cannot be called", f.s);
  }
}

std::vector<std::pair<std::string, TensorRecord>> Unpickler::state_dict() {
  for (;;) {
    const uint64_t at = pos_;
    if (pos_ >= in_.size()) error(at, "the pickle ends without STOP");
    const unsigned char op = static_cast<unsigned char>(in_[pos_++]);
    switch (op) {
      case 0x80: {  // PROTO
        const uint64_t proto = le(1);
        if (proto > 5) error(at, "pickle protocol {} is newer than any Python writes", proto);
        break;
      }
      case 0x95: le(8); break;  // FRAME (protocol 4): a length hint only
      case 'c': {               // GLOBAL module\nname\n
        std::string module = line();
        std::string name = line();
        push(resolve_global(module, name, at));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        const Id name = pop(at), module = pop(at);
        push(resolve_global(expect(module, Kind::String, at, "the module of STACK_GLOBAL").s,
                            expect(name, Kind::String, at, "the name of STACK_GLOBAL").s, at));
        break;
      }
      case 'q': case 'r': case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
        const uint64_t index = op == 'q' ? le(1) : op == 'r' ? le(4) : memo_.size();
        if (stack_.size() <= mark_floor()) error(at, "memo store with an empty stack");
        memo_[index] = stack_.back();
        break;
      }
      case 'h': case 'j': {  // BINGET, LONG_BINGET
        const uint64_t index = le(op == 'h' ? 1 : 4);
        auto it = memo_.find(index);
        if (it == memo_.end()) error(at, "memo entry {} was never stored", index);
        push(it->second);
        break;
      }
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case ')': case 0x85: case 0x86: case 0x87: case 't': {  // EMPTY_TUPLE, TUPLE1/2/3, TUPLE
        Value v;
        v.kind = Kind::Tuple;
        if (op == 't') {
          v.items = pop_to_mark(at);
        } else {
          v.items.resize(op == ')' ? 0 : op - 0x84);
          for (size_t k = v.items.size(); k-- > 0;) v.items[k] = pop(at);
        }
        push(make(std::move(v)));
        break;
      }
      case ']': case '}': {  // EMPTY_LIST, EMPTY_DICT
        Value v;
        v.kind = op == ']' ? Kind::List : Kind::Dict;
        push(make(std::move(v)));
        break;
      }
      case 'a': {  // APPEND
        const Id item = pop(at);
        container(at, Kind::List, "APPEND").items.push_back(item);
        break;
      }
      case 'e': {  // APPENDS
        const std::vector<Id> items = pop_to_mark(at);
        auto& list = container(at, Kind::List, "APPENDS").items;
        list.insert(list.end(), items.begin(), items.end());
        break;
      }
      case 's': {  // SETITEM
        const Id value = pop(at), key = pop(at);
        auto& dict = container(at, Kind::Dict, "SETITEM").items;
        dict.push_back(key);
        dict.push_back(value);
        break;
      }
      case 'u': {  // SETITEMS
        const std::vector<Id> items = pop_to_mark(at);
        if (items.size() % 2) error(at, "SETITEMS with an odd number of items");
        auto& dict = container(at, Kind::Dict, "SETITEMS").items;
        dict.insert(dict.end(), items.begin(), items.end());
        break;
      }
      case 'X': case 0x8c: case 0x8d: case 'T': case 'U': case 'B': case 'C': {
        // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING, BINBYTES, SHORT_BINBYTES
        const int width = op == 0x8c || op == 'U' || op == 'C' ? 1 : op == 0x8d ? 8 : 4;
        Value v;
        v.kind = Kind::String;
        v.s = std::string(take(le(width)));
        push(make(std::move(v)));
        break;
      }
      case 'K': push(make_int(static_cast<int64_t>(le(1)))); break;                     // BININT1
      case 'M': push(make_int(static_cast<int64_t>(le(2)))); break;                     // BININT2
      case 'J': push(make_int(static_cast<int32_t>(static_cast<uint32_t>(le(4))))); break;  // BININT
      case 0x8a: {  // LONG1: n-byte little-endian two's complement
        const uint64_t n = le(1);
        if (n > 8) error(at, "integer of {} bytes is too large for a tensor size", n);
        uint64_t v = n ? le(static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        push(make_int(static_cast<int64_t>(v)));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        std::string_view b = take(8);
        uint64_t bits = 0;
        for (char c : b) bits = (bits << 8) | static_cast<unsigned char>(c);
        Value v;
        v.kind = Kind::Float;
        std::memcpy(&v.f, &bits, 8);
        push(make(std::move(v)));
        break;
      }
      case 'N': push(make(Value{})); break;                       // NONE
      case 0x88: case 0x89: push(make_int(op == 0x88, Kind::Bool)); break;  // NEWTRUE, NEWFALSE
      case 'Q': {  // BINPERSID
        const Id pid = pop(at);
        push(persistent_load(pid, at));
        break;
      }
      case 'R': {  // REDUCE
        const Id args = pop(at), callable = pop(at);
        push(reduce(callable, args, at));
        break;
      }
      case 'b': {  // BUILD: only an OrderedDict's attributes (state_dict()._metadata), which tdyn does not need
        const Id state = pop(at);
        container(at, Kind::Dict, "BUILD");
        expect(state, Kind::Dict, at, "the state of BUILD");
        break;
      }
      case '.': {  // STOP
        const Id top = pop(at);
        if (!marks_.empty() || !stack_.empty()) error(at, "STOP with {} values left on the stack", stack_.size() + 1);
        const Value& dict = values_[top];
        if (dict.kind != Kind::Dict) error(at, "the pickle holds a {}, not a state dict {{name: tensor}}", kind_name(dict.kind));
        std::vector<std::pair<std::string, TensorRecord>> out;
        std::set<std::string> seen;
        for (size_t k = 0; k < dict.items.size(); k += 2) {
          const Value& key = values_[dict.items[k]];
          const Value& value = values_[dict.items[k + 1]];
          if (key.kind != Kind::String) error(at, "a state dict key is a {}, not a str", kind_name(key.kind));
          if (value.kind != Kind::Tensor)
            error(at, "'{}' is a {}, not a tensor: expected a flat state dict {{name: tensor}} as save_pretrained "
                  "writes it (a training checkpoint holding one, e.g. under 'state_dict' or 'model', must be "
                  "re-saved as that dict alone)", key.s, kind_name(value.kind));
          if (!seen.insert(key.s).second) error(at, "tensor '{}' appears twice in the state dict", key.s);
          out.emplace_back(key.s, tensors_[value.i]);
        }
        return out;
      }
      default: {
        static const std::map<unsigned char, const char*> names = {
            {'i', "INST"}, {'o', "OBJ"}, {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"}, {0x82, "EXT1"}, {0x83, "EXT2"},
            {0x84, "EXT4"}, {'P', "PERSID"}, {'I', "INT"}, {'L', "LONG"}, {'S', "STRING"}, {'V', "UNICODE"},
            {'F', "FLOAT"}, {'d', "DICT"}, {'l', "LIST"}, {'g', "GET"}, {'p', "PUT"}, {'2', "DUP"}, {'0', "POP"},
            {'1', "POP_MARK"}, {0x8b, "LONG4"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"},
            {0x91, "FROZENSET"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}};
        auto it = names.find(op);
        error(at, "pickle opcode 0x{:02x} ({}) is not one that torch.save writes for a state dict; refused", op,
              it == names.end() ? "unknown" : it->second);
      }
    }
  }
}

std::string top_folder(const ZipArchive& zip) {
  if (zip.entries().empty()) fail("{}: the zip archive is empty", zip.file()->path());
  const std::string& first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0)
    fail("{}: zip entry '{}' is not inside a top folder as torch.save writes them", zip.file()->path(), first);
  return first.substr(0, slash);
}

}  // namespace

void read_torch(const fs::path& path, TensorStore& store) { read_torch(MappedFile::open(path), store); }

namespace {

// A file that is not a zip archive: name the older torch.save format it is, if any.
[[noreturn]] void refuse_not_zip(std::string_view head, const std::string& name) {
  // torch.save before 1.6 wrote a pickle stream (magic number, protocol, sys info, then the object) or,
  // earlier still, a tar archive.
  if (!head.empty() && static_cast<unsigned char>(head[0]) == 0x80)
    fail("{}: legacy (pre-1.6) torch.save format, a bare pickle stream; tdyn reads only the zip format. Re-save "
         "it with PyTorch >= 1.6 (torch.save(torch.load(f), f)), or convert it to model.safetensors", name);
  if (head.size() >= 262 && head.substr(257, 5) == "ustar")
    fail("{}: legacy tar-format torch.save checkpoint; re-save it with PyTorch >= 1.6 or convert it to "
         "model.safetensors", name);
  fail("{}: not a PyTorch zip checkpoint (no zip signature PK\\3\\4 at byte 0)", name);
}

// Tensor t of the state dict in place in its storage s: contiguous, with its elements inside the storage.
TensorInfo tensor_in_storage(const std::string& tensor, const TensorRecord& t, const StorageRecord& s, const std::string& name) {
  auto bad = [&](const std::string& what) {
    fail("{}: tensor '{}' (pickle byte {}): {}", name, tensor, t.at, what);
  };
  if (t.size.size() != t.stride.size())
    bad(fmt::format("size ({}) and stride ({}) have different lengths", fmt::join(t.size, ", "), fmt::join(t.stride, ", ")));
  TensorInfo info;
  info.name = tensor;
  info.dtype = t.dtype;
  info.file = name;
  uint64_t n = 1;
  for (int64_t d : t.size) {
    if (d < 0) bad(fmt::format("negative size ({})", fmt::join(t.size, ", ")));
    if (d != 0 && n > (uint64_t{1} << 60) / static_cast<uint64_t>(d)) bad("its size overflows");
    n *= static_cast<uint64_t>(d);
    info.shape.push_back(d);
  }
  // Contiguous (C order): each stride is the product of the sizes after it; a dimension of size 1 may have
  // any stride, as in torch's own is_contiguous().
  int64_t expected = 1;
  for (size_t k = t.size.size(); n > 0 && k-- > 0;) {
    if (t.size[k] != 1 && t.stride[k] != expected)
      bad(fmt::format("not contiguous (size ({}), stride ({})); only contiguous tensors can be used in place: save "
                      "{{k: v.contiguous() for k, v in state_dict.items()}}",
                      fmt::join(t.size, ", "), fmt::join(t.stride, ", ")));
    expected *= t.size[k];
  }
  const uint64_t elem = dtype_size(t.dtype);
  if (t.offset < 0) bad(fmt::format("negative storage offset {}", t.offset));
  const uint64_t begin = static_cast<uint64_t>(t.offset);
  if (begin > s.nbytes / elem || n > s.nbytes / elem - begin)
    bad(fmt::format("elements [{}, {}) of {} lie outside storage '{}' ({} bytes)", begin, begin + n,
                    dtype_name(t.dtype), s.key, s.nbytes));
  info.data = s.data + begin * elem;
  info.nbytes = n * elem;
  return info;
}

}  // namespace

void read_torch(std::shared_ptr<const MappedFile> file, TensorStore& store) {
  const std::string name = file->path();
  const std::string_view head = file->view().substr(0, 512);
  if (!looks_like_zip(head)) refuse_not_zip(head, name);
  const ZipArchive zip(file);
  const std::string prefix = top_folder(zip);
  if (zip.find(prefix + "/constants.pkl"))
    fail("{}: a TorchScript archive (torch.jit.save), not a state dict; save model.state_dict() with torch.save", name);
  if (const ZipEntry* order = zip.find(prefix + "/byteorder")) {
    std::string_view b = zip.data(*order);
    if (b != "little") fail("{}: byte order '{}'; tdyn reads only little-endian checkpoints", name, b);
  }
  const ZipEntry* pickle = zip.find(prefix + "/data.pkl");
  if (!pickle) fail("{}: no '{}/data.pkl' in the archive: not a torch.save checkpoint", name, prefix);

  auto load = [&](const std::string& key, DType dtype, bool untyped, uint64_t numel) {
    const std::string entry_name = prefix + "/data/" + key;
    const ZipEntry* entry = zip.find(entry_name);
    if (!entry) fail("{}: storage '{}' has no entry '{}' in the archive", name, key, entry_name);
    const std::string_view bytes = zip.data(*entry);
    // 2^60 elements of at most 8 bytes cannot overflow.
    if (numel > (uint64_t{1} << 60) || bytes.size() != numel * dtype_size(dtype))
      fail("{}: storage '{}' ({}) should hold {} {} element(s) = {} bytes but its entry '{}' has {} bytes", name, key,
           untyped ? "untyped" : dtype_name(dtype), numel, untyped ? "byte" : dtype_name(dtype),
           numel * dtype_size(dtype), entry_name, bytes.size());
    return StorageRecord{key, dtype, untyped, bytes.size(), reinterpret_cast<const std::byte*>(bytes.data())};
  };
  Unpickler unpickler(zip.data(*pickle), name + ": " + pickle->name, load);
  const auto tensors = unpickler.state_dict();

  std::vector<TensorInfo> infos;
  for (const auto& [tensor, t] : tensors) infos.push_back(tensor_in_storage(tensor, t, unpickler.storages()[t.storage], name));
  for (auto& info : infos) store.add(std::move(info));
  if (const ZipEntry* version = zip.find(prefix + "/version")) store.metadata()["torch_version_record"] = std::string(zip.data(*version));
  store.metadata()["torch_archive"] = prefix;
  store.keep_alive(std::move(file));
  store.format = "pytorch";
}

void read_torch_index(const fs::path& index_file, TensorStore& store) {
  read_weight_index(index_file, store, [](const fs::path& shard, TensorStore& s) { read_torch(shard, s); });
}

namespace {

// Protocol-2 pickle opcodes, as Python's pickler writes them.
class PickleWriter {
 public:
  std::string out = std::string("\x80\x02", 2);
  void global(const std::string& module, const std::string& name) { out += "c" + module + "\n" + name + "\n"; }
  void str(const std::string& s) {
    out += 'X';
    put(s.size(), 4);
    out += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) { out += 'K'; put(v, 1); }
    else if (v >= 0 && v < 65536) { out += 'M'; put(v, 2); }
    else if (v >= INT32_MIN && v <= INT32_MAX) { out += 'J'; put(static_cast<uint32_t>(v), 4); }
    else { out += "\x8a\x08"; put(static_cast<uint64_t>(v), 8); }
  }
  void tuple(const std::vector<int64_t>& values) {
    if (values.empty()) { out += ')'; return; }
    out += '(';
    for (int64_t v : values) integer(v);
    out += 't';
  }
  void op(char c) { out += c; }
  void binput(int i) { out += 'q'; put(i, 1); }
  void binget(int i) { out += 'h'; put(i, 1); }

 private:
  void put(uint64_t v, int n) {
    for (int k = 0; k < n; ++k) out += static_cast<char>((v >> (8 * k)) & 0xFF);
  }
};

const char* storage_name(DType t) {
  switch (t) {
    case DType::F32: return "FloatStorage";
    case DType::F16: return "HalfStorage";
    case DType::BF16: return "BFloat16Storage";
    case DType::F64: return "DoubleStorage";
    case DType::I64: return "LongStorage";
    case DType::I32: return "IntStorage";
    case DType::I16: return "ShortStorage";
    case DType::I8: return "CharStorage";
    case DType::U8: return "ByteStorage";
    case DType::BOOL: return "BoolStorage";
    default: fail("dtype {} has no torch storage type", dtype_name(t));
  }
}

}  // namespace

std::string torch_checkpoint_bytes(const std::map<std::string, TensorToWrite>& tensors, const std::string& archive) {
  PickleWriter p;
  p.global("collections", "OrderedDict");
  p.binput(0);
  p.op(')');
  p.op('R');
  p.op('(');
  std::vector<std::pair<std::string, std::string>> entries = {{archive + "/data.pkl", ""}};
  int key = 0;
  for (const auto& [name, t] : tensors) {
    p.str(name);
    if (key == 0) {
      p.global("torch._utils", "_rebuild_tensor_v2");
      p.binput(1);
    } else {
      p.binget(1);
    }
    p.op('(');
    p.op('(');
    p.str("storage");
    p.global("torch", storage_name(t.dtype));
    p.str(std::to_string(key));
    p.str("cpu");
    p.integer(numel(t.shape));
    p.op('t');
    p.op('Q');
    p.integer(0);
    p.tuple(t.shape);
    std::vector<int64_t> stride(t.shape.size(), 1);
    for (size_t k = t.shape.size(); k-- > 1;) stride[k - 1] = stride[k] * t.shape[k];
    p.tuple(stride);
    p.op('\x89');  // requires_grad False
    p.binget(0);   // backward hooks: OrderedDict()
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
    entries.emplace_back(archive + "/data/" + std::to_string(key), t.bytes);
    ++key;
  }
  p.op('u');
  p.op('.');
  entries[0].second = p.out;
  entries.emplace_back(archive + "/version", "3\n");
  return write_zip_stored(entries);
}

}  // namespace tdyn
