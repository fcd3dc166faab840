// How libchorus_pmpi sees an MPI datatype, and how it hands any datatype's
// buffer to Chorus as plain bytes.
//
// MPI requires only that ranks' type signatures match (the sequence of
// basic types), not their datatype handles: the root may broadcast one
// MPI_Type_contiguous(4096, MPI_INT) while another rank receives 4096
// MPI_INT, or a vector type. So every decision the library makes from a
// datatype uses only what the signature fixes (the bytes of one item and
// the one element type, if there is one), never the handle or its layout;
// the layout only decides whether a buffer is used in place (dense) or
// packed into a staging copy with MPI_Pack and unpacked with MPI_Unpack.
#pragma once

#include <chorus/types.hpp>

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace chorus::pmpi {

// The element type of a signature as a reduction sees it.
struct Element {
  enum class Kind : std::uint8_t {
    number,   // an integer or floating-point type Chorus represents exactly (`type`)
    byte,     // MPI_BYTE: bitwise ops only (as uint8)
    boolean,  // MPI_C_BOOL: logical ops only (as uint8 holding 0 or 1)
  };
  Kind kind = Kind::number;
  DataType type = DataType::uint8;
  friend bool operator==(const Element&, const Element&) = default;
};

struct TypeInfo {
  bool valid = false;       // MPI could describe it
  std::size_t size = 0;     // bytes of one item's signature (MPI_Type_size)
  MPI_Aint extent = 0;      // distance from one item to the next
  bool dense = false;       // item i is its `size` bytes at i * size, in signature order
  // The one element type of the whole signature, when every basic type in
  // it maps onto the same Chorus element; empty for mixed signatures and
  // for types Chorus has no element for (MPI_SHORT, complex, pair types).
  std::optional<Element> element;
};

// A predefined datatype with a Chorus element, by its handle, at once; any
// other by walking its constructors (MPI_Type_get_envelope/get_contents)
// for its element and asking MPI for its size and extent. Fills every field of
// `info` (written in place: a TypeInfo returned by value went through a
// temporary whose narrow stores the copy read back in wider loads, a
// stalled store-to-load forward on every reduction).
void describe(MPI_Datatype t, TypeInfo& info);

// A buffer of blocks of items of one datatype (block j: count(j) items at
// displacement displ(j) items, in extents), as contiguous bytes for Chorus:
// the user's memory itself when the datatype is dense, else a staging copy
// in which the blocks' packed bytes lie back to back. Copies share the
// staging copy, so an async call's lambdas may hold one.
class Staged {
 public:
  Staged() = default;
  // One block of `count` items.
  Staged(void* user, int count, MPI_Datatype type, const TypeInfo& info);
  // `blocks` blocks of `count` items each, back to back (MPI_Allgather's
  // receive buffer, MPI_Alltoall's).
  Staged(void* user, int blocks, int count, MPI_Datatype type, const TypeInfo& info);
  // v-forms: counts and displacements (in extents) per block. Not copied:
  // the v-forms are blocking calls, in which the caller's arrays stay.
  Staged(void* user, const int* counts, const int* displs, int blocks, MPI_Datatype type,
         const TypeInfo& info);

  std::byte* data() const { return data_; }
  std::size_t bytes() const;  // of all blocks (as Chorus sees them)
  std::size_t block_bytes(int j) const;
  std::size_t block_offset(int j) const;  // in data()
  // Every block's bytes, and offset in data(), into `out` (p entries).
  void all_block_bytes(std::vector<std::size_t>& out) const;
  void all_block_offsets(std::vector<std::size_t>& out) const;

  // Copy between the user's buffer and the staging copy (nothing when
  // dense): one block, or all. Throw chorus::Error when MPI fails.
  void pack(int j) const;
  void pack() const;
  void unpack(int j) const;
  void unpack() const;

 private:
  int count(int j) const { return counts_ == nullptr ? count_ : counts_[j]; }
  MPI_Aint user_displ(int j) const;  // in extents
  void allocate();
  void transfer(int j, bool to_staging) const;

  std::byte* user_ = nullptr;
  std::byte* data_ = nullptr;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  std::size_t size_ = 0;
  MPI_Aint extent_ = 0;
  int blocks_ = 0;
  int count_ = 0;                   // uniform blocks
  const int* counts_ = nullptr;  // v-forms: the caller's arrays
  const int* displs_ = nullptr;
  std::vector<std::size_t> offsets_;  // staged: where block j starts in the copy
  std::shared_ptr<std::vector<std::byte>> copy_;
};

}  // namespace chorus::pmpi
