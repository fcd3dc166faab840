// The kernels compiled for the avx512 instruction set; see kernels_impl.hpp.
#define CHORUS_KERNEL_ISA isa_avx512
#include "reduce/kernels_impl.hpp"

namespace chorus::reduce {

const KernelTable& avx512_kernels() {
  static const KernelTable table = make_kernel_table("avx512");
  return table;
}

}  // namespace chorus::reduce
