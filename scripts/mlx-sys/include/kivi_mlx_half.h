/* Force-included when mlx-c is compiled and when bindgen reads its headers on
 * non-ARM targets. mlx-c declares float16_t/bfloat16_t (and HAS_FLOAT16 /
 * HAS_BFLOAT16, which gate the functions using them) only where the compiler has
 * native half types (ARM); elsewhere those functions vanish and mlx-rs does not
 * compile. The C API only passes these types by pointer, so a 2-byte storage type
 * is ABI-identical. */
#ifndef KIVI_MLX_HALF_H
#define KIVI_MLX_HALF_H

#if !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) && !defined(__aarch64__)
#include <stdint.h>
typedef uint16_t float16_t;
#define HAS_FLOAT16
#endif

#if !defined(__ARM_FEATURE_BF16) && !defined(__aarch64__)
#include <stdint.h>
typedef uint16_t bfloat16_t;
#define HAS_BFLOAT16
#endif

#endif
