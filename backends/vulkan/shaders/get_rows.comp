#version 450
// get_rows.comp — out[r, c] = row ids[r] of the table, decoded to f32 (Backend::get_rows).
// One thread per output element, grid-stride. The host checked every id against the table.
#include "dequant.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 table;     // [n_rows][row_bytes] in WTYPE
  uvec2 ids;       // int32 [n]
  uvec2 out_;      // f32 [n, cols]
  uvec2 grid;      // the type's value grid (grid i-quants; vk_grids.h), else 0
  uint cols;
  uint row_bytes;
  uint n;
} p;

void main() {
  U32Buf t = U32Buf(p.table), g = U32Buf(p.grid);
  I32Buf ids = I32Buf(p.ids);
  F32Buf o = F32Buf(p.out_);
  const uint total = p.n * p.cols, stride = gl_NumWorkGroups.x * 64u;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
    const uint r = i / p.cols, c = i % p.cols;
    o.v[i] = dq(t, g, uint(ids.v[r]) * p.row_bytes, c);
  }
}
