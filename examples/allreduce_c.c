/* The C ABI: every rank contributes rank + 1 and gets the sum, checking
 * every result code the way a framework binding would.
 *
 * Run it like allreduce_hello: under mpirun, torchrun, or with
 * CHORUS_RANK, CHORUS_SIZE and CHORUS_STORE set. */
#include <chorus/chorus.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call, comm)                                                                \
  do {                                                                                   \
    chorus_result_t result_ = (call);                                                    \
    if (result_ != chorus_success) {                                                     \
      fprintf(stderr, "%s failed: %s: %s\n", #call, chorus_get_error_string(result_),    \
              chorus_get_last_error(comm));                                              \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

int main(void) {
  chorus_comm_t comm = NULL;
  CHECK(chorus_comm_init_from_env(&comm), NULL);
  int rank = 0, size = 0;
  CHECK(chorus_comm_rank(comm, &rank), comm);
  CHECK(chorus_comm_size(comm, &size), comm);

  enum { kCount = 4096 };
  int* values = malloc(kCount * sizeof *values);
  if (values == NULL) return 1;
  for (int i = 0; i < kCount; ++i) values[i] = rank + 1;
  CHECK(chorus_allreduce(values, values, kCount, chorus_int32, chorus_sum, comm), comm);

  /* A mistake is a result code and a message, never a crash. */
  chorus_result_t bad = chorus_allreduce(values, values, kCount, chorus_float32, chorus_band, comm);
  const int want = size * (size + 1) / 2;
  const int ok = values[0] == want && values[kCount - 1] == want && bad == chorus_invalid_argument;
  printf("rank %d of %d: sum %d (want %d); bad call: %s (%s): %s\n", rank, size, values[0], want,
         chorus_get_error_string(bad), chorus_get_last_error(comm), ok ? "ok" : "WRONG");
  free(values);
  CHECK(chorus_comm_destroy(comm), NULL);
  return ok ? 0 : 1;
}
