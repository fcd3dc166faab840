// The table of element-wise kernels that one instruction set provides.
//
// Every function accepts pointers of any alignment and `count` elements.
// reduce: dst[i] = a[i] op b[i]; dst may be exactly a or b (in place), but
// must not otherwise overlap them. Entries are nullptr where the op is not
// defined on the type (see include/chorus/types.hpp); the avg entry sums,
// and divide() finishes the average once all contributions are in.
#pragma once

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>

namespace chorus::reduce {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, std::size_t count);
using DivideFn = void (*)(void* buf, std::size_t count, std::size_t divisor);
using ToFloatFn = void (*)(const void* src, float* dst, std::size_t count);
using FromFloatFn = void (*)(const float* src, void* dst, std::size_t count);

struct KernelTable {
  const char* isa = nullptr;
  ReduceFn reduce[kDataTypeCount][kReduceOpCount] = {};
  DivideFn divide[kDataTypeCount] = {};  // floating-point types only
  ToFloatFn float16_to_float32 = nullptr;
  FromFloatFn float32_to_float16 = nullptr;
  ToFloatFn bfloat16_to_float32 = nullptr;
  FromFloatFn float32_to_bfloat16 = nullptr;
};

// One table per translation unit; the wide ones exist only on x86-64 and may
// only be called when the CPU supports them (reduce.hpp checks).
const KernelTable& generic_kernels();
#if defined(CHORUS_HAVE_X86_KERNELS)
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();
#endif

}  // namespace chorus::reduce
