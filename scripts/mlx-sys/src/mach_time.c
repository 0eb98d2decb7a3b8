/* mlx-rs seeds its default random key from mach_approximate_time(), a macOS
 * call. Off Apple targets the same contract (a monotonic tick count) comes from
 * CLOCK_MONOTONIC in nanoseconds. */
#include <stdint.h>
#include <time.h>

uint64_t mach_approximate_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
