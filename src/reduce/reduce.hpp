// Element-wise reduction kernels: what every reducing collective calls to
// combine a peer's chunk into its own.
//
// The kernels are chosen once per process from the CPU's features (AVX-512,
// AVX2, or the generic baseline); CHORUS_SIMD=generic|avx2|avx512 forces one.
// All paths give bit-identical results: each element is a single IEEE
// operation, and 16-bit floats are computed in float32 and rounded once.
//
// Errors (chorus::Error): an invalid dtype or op, or an op not defined on the
// dtype (bitwise on floats, avg on integers), throws before touching memory.
#pragma once

#include <chorus/types.hpp>

#include "reduce/kernels.hpp"

#include <cstddef>
#include <string_view>
#include <vector>

namespace chorus::reduce {

enum class Isa { generic, avx2, avx512 };

std::string_view to_string(Isa isa) noexcept;

// Whether this CPU (and OS) can run the kernels built for `isa`.
bool cpu_supports(Isa isa) noexcept;

// Every ISA this build has kernels for and this CPU can run, narrowest first.
std::vector<Isa> runnable_isas();

// The ISA in use: the widest runnable one unless CHORUS_SIMD forces another.
// Throws chorus::Error when CHORUS_SIMD names an unknown or unrunnable ISA.
Isa active_isa();

// The kernels of `isa`; throws chorus::Error (unsupported) if this CPU
// cannot run them.
const KernelTable& kernels(Isa isa);

// Throws chorus::Error unless `op` is defined on `type`.
void check_supported(DataType type, ReduceOp op);

// dst[i] = dst[i] op src[i].
void reduce(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op);

// dst[i] = a[i] op b[i]; dst may be exactly a or b.
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op);

// Finishes an average: buf[i] /= divisor, for floating-point types.
void divide(void* buf, std::size_t count, DataType type, std::size_t divisor);

}  // namespace chorus::reduce
