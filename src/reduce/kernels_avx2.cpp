// The kernels compiled for the avx2 instruction set; see kernels_impl.hpp.
#define CHORUS_KERNEL_ISA isa_avx2
#include "reduce/kernels_impl.hpp"

namespace chorus::reduce {

const KernelTable& avx2_kernels() {
  static const KernelTable table = make_kernel_table("avx2");
  return table;
}

}  // namespace chorus::reduce
