// membw.h — the machine's memory bandwidth as STREAM measures it (McCalpin, "Memory Bandwidth
// and Machine Balance in Current High Performance Computers", IEEE TCCA Newsletter 1995;
// https://www.cs.virginia.edu/stream/), for `kvrun bench --bandwidth`: decode speed is compared
// with what the memory can deliver.
#pragma once

#include <cstdint>

namespace kvrun::tools {

/// STREAM's triad a[i] = b[i] + s·c[i] over three arrays of `n_doubles` doubles (each should be
/// far larger than the last-level cache; STREAM asks for 4×), split across `n_threads` threads
/// (the caller included) by contiguous ranges. Returns the best of `reps` (≥ 1) runs in bytes per
/// second, counting 3 × 8 bytes per element as STREAM does (two reads, one write; the write-
/// allocate read is not counted). The arrays are touched once, untimed, by the same threads.
double stream_triad_bytes_per_s(int n_threads, int64_t n_doubles, int reps);

}  // namespace kvrun::tools
