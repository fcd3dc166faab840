#include "mpi/pmpi_datatypes.hpp"

#include <chorus/error.hpp>

#include <algorithm>
#include <climits>
#include <string>

namespace chorus::pmpi {

namespace {

std::optional<Element> number(DataType type) { return Element{Element::Kind::number, type}; }

std::optional<DataType> signed_of_size(std::size_t size) {
  if (size == 1) return DataType::int8;
  if (size == 4) return DataType::int32;
  if (size == 8) return DataType::int64;
  return std::nullopt;  // 16-bit integers: Chorus has none
}
std::optional<DataType> unsigned_of_size(std::size_t size) {
  if (size == 1) return DataType::uint8;
  if (size == 4) return DataType::uint32;
  if (size == 8) return DataType::uint64;
  return std::nullopt;
}

bool is_any_of(MPI_Datatype t, std::initializer_list<MPI_Datatype> types) {
  return std::find(types.begin(), types.end(), t) != types.end();
}

// Integer and real types named for Fortran, where this MPI has them.
bool is_fortran_signed(MPI_Datatype t) {
  if (t == MPI_INTEGER) return true;
#ifdef MPI_INTEGER1
  if (t == MPI_INTEGER1) return true;
#endif
#ifdef MPI_INTEGER4
  if (t == MPI_INTEGER4) return true;
#endif
#ifdef MPI_INTEGER8
  if (t == MPI_INTEGER8) return true;
#endif
  return false;
}
bool is_fortran_real(MPI_Datatype t) {
  if (t == MPI_REAL || t == MPI_DOUBLE_PRECISION) return true;
#ifdef MPI_REAL4
  if (t == MPI_REAL4) return true;
#endif
#ifdef MPI_REAL8
  if (t == MPI_REAL8) return true;
#endif
  return false;
}

std::size_t named_size(MPI_Datatype t) {
  int size = 0;
  return PMPI_Type_size(t, &size) == MPI_SUCCESS && size > 0 ? static_cast<std::size_t>(size) : 0;
}

bool is_named(MPI_Datatype t) {
  int integers = 0, addresses = 0, datatypes = 0, combiner = 0;
  return PMPI_Type_get_envelope(t, &integers, &addresses, &datatypes, &combiner) == MPI_SUCCESS &&
         combiner == MPI_COMBINER_NAMED;
}

// The element of a predefined datatype, by handle: every reduction's
// datatype is looked up here first. Inlined into describe(): returned, the
// optional came back in a register that the caller spilled byte by byte and
// read back as a word, a stalled store-to-load forward on every call.
[[gnu::always_inline]] inline std::optional<Element> element_of_named(MPI_Datatype t) {
  // The commonest first: a reduction of MPI_FLOAT costs one comparison.
  if (t == MPI_FLOAT) return number(DataType::float32);
  if (t == MPI_DOUBLE) return number(DataType::float64);
  if (t == MPI_INT || t == MPI_INT32_T) return number(DataType::int32);
  if (t == MPI_BYTE) return Element{Element::Kind::byte, DataType::uint8};
  if (t == MPI_C_BOOL) {
    if (named_size(t) != 1) return std::nullopt;
    return Element{Element::Kind::boolean, DataType::uint8};
  }
  if (is_any_of(t, {MPI_INT8_T, MPI_INT64_T, MPI_SIGNED_CHAR, MPI_LONG, MPI_LONG_LONG_INT,
                    MPI_LONG_LONG, MPI_AINT, MPI_OFFSET, MPI_COUNT}) ||
      is_fortran_signed(t)) {
    if (auto type = signed_of_size(named_size(t))) return number(*type);
    return std::nullopt;
  }
  if (is_any_of(t, {MPI_UINT8_T, MPI_UINT32_T, MPI_UINT64_T, MPI_UNSIGNED_CHAR, MPI_UNSIGNED,
                    MPI_UNSIGNED_LONG, MPI_UNSIGNED_LONG_LONG})) {
    if (auto type = unsigned_of_size(named_size(t))) return number(*type);
    return std::nullopt;
  }
  if (is_fortran_real(t)) {
    const std::size_t size = named_size(t);
    if (size == 4) return number(DataType::float32);
    if (size == 8) return number(DataType::float64);
  }
  return std::nullopt;
}

constexpr int kMaxDepth = 32;  // constructors nested deeper are not looked into

TypeInfo describe_at(MPI_Datatype t, int depth) {
  TypeInfo info;
  if (t == MPI_DATATYPE_NULL || depth > kMaxDepth) return info;
  int integers = 0, addresses = 0, datatypes = 0, combiner = 0;
  MPI_Count size = 0, lb = 0, extent = 0;
  if (PMPI_Type_get_envelope(t, &integers, &addresses, &datatypes, &combiner) != MPI_SUCCESS ||
      PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size < 0 ||
      PMPI_Type_get_extent_x(t, &lb, &extent) != MPI_SUCCESS)
    return info;
  info.valid = true;
  info.size = static_cast<std::size_t>(size);
  info.extent = static_cast<MPI_Aint>(extent);
  const bool tight = lb == 0 && extent == size;
  if (combiner == MPI_COMBINER_NAMED) {
    info.element = element_of_named(t);
    info.dense = tight;
    return info;
  }
  std::vector<int> ints(static_cast<std::size_t>(integers));
  std::vector<MPI_Aint> addrs(static_cast<std::size_t>(addresses));
  std::vector<MPI_Datatype> children(static_cast<std::size_t>(datatypes));
  if (PMPI_Type_get_contents(t, integers, addresses, datatypes, ints.data(), addrs.data(),
                             children.data()) != MPI_SUCCESS)
    return TypeInfo{};
  // The signature's element: the one element of every child that adds to
  // it (a struct's fields of zero blocks, MPI_LB and MPI_UB add nothing).
  bool mixed = false, all_dense = true;
  for (std::size_t i = 0; i < children.size(); ++i) {
    const TypeInfo child = describe_at(children[i], depth + 1);
    if (!child.valid) mixed = true;
    all_dense = all_dense && child.dense;
    const bool adds = child.size > 0 && (combiner != MPI_COMBINER_STRUCT || ints[i + 1] > 0);
    if (adds && !mixed) {
      if (!child.element || (info.element && *info.element != *child.element)) mixed = true;
      else info.element = child.element;
    }
    if (!is_named(children[i])) PMPI_Type_free(&children[i]);
  }
  if (mixed) info.element.reset();
  // Dense only where nothing can reorder or space the bytes.
  const bool keeps_order = combiner == MPI_COMBINER_DUP || combiner == MPI_COMBINER_CONTIGUOUS ||
                           combiner == MPI_COMBINER_RESIZED;
  info.dense = keeps_order && all_dense && tight;
  return info;
}

}  // namespace

void describe(MPI_Datatype t, TypeInfo& info) {
  // A predefined type with a Chorus element is that element, dense: known
  // without the three MPI calls below, which cost a small broadcast or
  // allgather more than Chorus's own work.
  if (const std::optional<Element> element = element_of_named(t)) {
    const std::size_t size = size_of(element->type);
    info.valid = true;
    info.size = size;
    info.extent = static_cast<MPI_Aint>(size);
    info.dense = true;
    // Field by field: GCC copied the optional through the stack, stored as
    // bytes and loaded as a word (the stall the inlining avoids).
    info.element.emplace();
    info.element->kind = element->kind;
    info.element->type = element->type;
    return;
  }
  info = describe_at(t, 0);
}

// ---- Staged ----------------------------------------------------------------

Staged::Staged(void* user, int count, MPI_Datatype type, const TypeInfo& info)
    : Staged(user, 1, count, type, info) {}

Staged::Staged(void* user, int blocks, int count, MPI_Datatype type, const TypeInfo& info)
    : user_(static_cast<std::byte*>(user)),
      type_(type),
      size_(info.size),
      extent_(info.extent),
      blocks_(blocks),
      count_(count) {
  if (info.dense) data_ = user_;
  else allocate();
}

Staged::Staged(void* user, const int* counts, const int* displs, int blocks, MPI_Datatype type,
               const TypeInfo& info)
    : user_(static_cast<std::byte*>(user)),
      type_(type),
      size_(info.size),
      extent_(info.extent),
      blocks_(blocks),
      counts_(counts),
      displs_(displs) {
  // Chorus's offsets are unsigned: a block before the buffer's start is staged.
  const bool backwards = std::any_of(displs, displs + blocks, [](int d) { return d < 0; });
  if (info.dense && !backwards) data_ = user_;
  else allocate();
}

void Staged::allocate() {
  offsets_.resize(static_cast<std::size_t>(blocks_));
  std::size_t total = 0;
  for (int j = 0; j < blocks_; ++j) {
    offsets_[static_cast<std::size_t>(j)] = total;
    total += block_bytes(j);
  }
  copy_ = std::make_shared<std::vector<std::byte>>(std::max<std::size_t>(total, 1));
  data_ = copy_->data();
}

MPI_Aint Staged::user_displ(int j) const {
  return displs_ == nullptr ? static_cast<MPI_Aint>(j) * count_ : displs_[j];
}

std::size_t Staged::block_bytes(int j) const {
  return static_cast<std::size_t>(std::max(count(j), 0)) * size_;
}

std::size_t Staged::block_offset(int j) const {
  if (copy_) return offsets_[static_cast<std::size_t>(j)];
  return static_cast<std::size_t>(user_displ(j) * extent_);
}

std::size_t Staged::bytes() const {
  std::size_t total = 0;
  for (int j = 0; j < blocks_; ++j) total += block_bytes(j);
  return total;
}

void Staged::all_block_bytes(std::vector<std::size_t>& out) const {
  out.resize(static_cast<std::size_t>(blocks_));
  for (int j = 0; j < blocks_; ++j) out[static_cast<std::size_t>(j)] = block_bytes(j);
}

void Staged::all_block_offsets(std::vector<std::size_t>& out) const {
  out.resize(static_cast<std::size_t>(blocks_));
  for (int j = 0; j < blocks_; ++j) out[static_cast<std::size_t>(j)] = block_offset(j);
}

// MPI_Pack and MPI_Unpack count bytes in int: a block is moved in pieces
// of at most INT_MAX bytes, each a whole number of items.
void Staged::transfer(int j, bool to_staging) const {
  if (!copy_) return;
  const int n = count(j);
  if (n <= 0 || size_ == 0) return;
  if (size_ > static_cast<std::size_t>(INT_MAX))
    throw Error(ErrorCode::invalid_argument,
                "one item of the datatype is larger than MPI_Pack can move (" +
                    std::to_string(size_) + " bytes)");
  const int per_piece = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(n),
                                                               INT_MAX / size_));
  std::byte* user = user_ + user_displ(j) * extent_;
  std::byte* staging = data_ + offsets_[static_cast<std::size_t>(j)];
  for (int done = 0; done < n; done += per_piece) {
    const int items = std::min(per_piece, n - done);
    const int bytes = static_cast<int>(static_cast<std::size_t>(items) * size_);
    void* u = user + static_cast<MPI_Aint>(done) * extent_;
    void* s = staging + static_cast<std::size_t>(done) * size_;
    int position = 0;
    const int rc = to_staging
                       ? PMPI_Pack(u, items, type_, s, bytes, &position, MPI_COMM_SELF)
                       : PMPI_Unpack(s, bytes, &position, u, items, type_, MPI_COMM_SELF);
    if (rc != MPI_SUCCESS || position != bytes)
      throw Error(ErrorCode::invalid_argument,
                  std::string(to_staging ? "MPI_Pack" : "MPI_Unpack") +
                      " of the datatype did not give its signature's bytes");
  }
}

void Staged::pack(int j) const { transfer(j, true); }
void Staged::unpack(int j) const { transfer(j, false); }
void Staged::pack() const {
  for (int j = 0; j < blocks_; ++j) transfer(j, true);
}
void Staged::unpack() const {
  for (int j = 0; j < blocks_; ++j) transfer(j, false);
}

}  // namespace chorus::pmpi
