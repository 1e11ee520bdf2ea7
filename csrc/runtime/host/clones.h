// TPU_AVX2_CLONES: a tile loop's attribute giving it an AVX2 clone next to the default (SSE)
// one, chosen by the ifunc resolver when the library loads. The loops are exact IEEE
// arithmetic (no FMA contraction, no reassociation), so both clones give the same bits.
#pragma once

#if defined(__x86_64__)
#define TPU_AVX2_CLONES [[gnu::target_clones("avx2", "default")]]
#else
#define TPU_AVX2_CLONES
#endif
