// The kernels compiled for the baseline of the target (SSE2 on x86-64); see
// kernels_impl.hpp. This is the only table on CPUs other than x86-64.
#define CHORUS_KERNEL_ISA isa_generic
#include "reduce/kernels_impl.hpp"

namespace chorus::reduce {

const KernelTable& generic_kernels() {
  static const KernelTable table = make_kernel_table("generic");
  return table;
}

}  // namespace chorus::reduce
