#version 450
// attention.comp — causal attention over the paged KV cache (Backend::paged_attention), the
// flash scheme (online softmax: Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022).
// One workgroup of 64 per (query row, query head, context segment): the segment's visible
// positions go by in chunks of 64, each thread scoring one position (q · K in f32, K read in
// place in its cache type), then a shared-memory max, the rescale of the running sum and of
// the V accumulator (each thread owns output dims t, t + 64, …), V read in place. With one
// segment the result is written to `out`; with more, or with `states`, the partial state (max,
// sum, acc) goes to `part` and attn_merge.comp combines the segments by log-sum-exp
// (Flash-Decoding). The host resolved every block of every block table into its K and V
// addresses (`blocks`); a block whose address is 0 is skipped (Backend::paged_attention_part:
// the other KV tier's blocks), and a workgroup that saw no position writes m = −inf, l = 0.
#include "kv_common.glsl"

layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 8) buffer AddrBuf { uvec2 v[]; };

layout(push_constant) uniform Push {
  uvec2 q;       // f32 [n_rows, n_head · head_dim]
  uvec2 out_;    // f32 [n_rows, n_head · head_dim_v]
  uvec2 part;    // f32 [n_rows · n_head · n_seg][2 + head_dim_v]
  uvec2 blocks;  // uvec2 [n_blocks][2]: K block address, V block address (0: none)
  uvec2 rows;    // int32 [n_rows][2]: position, first block of the row's block table
  uint n_head;
  uint n_head_kv;
  uint group;    // n_head / n_head_kv
  uint head_dim;
  uint head_dim_v;
  uint block_size;
  uint k_row_bytes;
  uint v_row_bytes;
  uint k_type;
  uint v_type;
  uint window;   // 0: none
  uint seg_len;  // positions per segment
  uint n_seg;
  float scale;
  float softcap;  // 0: off
  uint states;    // 1: write the state to `part` even with one segment (paged_attention_part)
} p;

shared float qs[256];
shared float sc[64];
shared float red[64];

void main() {
  const uint r = gl_WorkGroupID.x, h = gl_WorkGroupID.y, seg = gl_WorkGroupID.z;
  const uint t = gl_LocalInvocationID.x;
  const uint hk = h / p.group;
  I32Buf rows = I32Buf(p.rows);
  AddrBuf blocks = AddrBuf(p.blocks);
  F32Buf q = F32Buf(p.q);
  const int pos = rows.v[2u * r];
  const uint bt = uint(rows.v[2u * r + 1u]);
  const int lo = p.window > 0u ? max(0, pos - int(p.window) + 1) : 0;
  const uint j0 = uint(lo) + seg * p.seg_len;
  const uint j1 = min(uint(pos) + 1u, j0 + p.seg_len);  // j0 ≥ j1: an empty segment
  for (uint d = t; d < p.head_dim; d += 64u) qs[d] = q.v[(r * p.n_head + h) * p.head_dim + d];
  barrier();
  float m = -1.0 / 0.0, l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);  // dims t, t + 64, t + 128, t + 192
  for (uint c0 = j0; c0 < j1; c0 += 64u) {
    const uint j = c0 + t;
    float s = -1.0 / 0.0;
    const uvec2 k_addr = j < j1 ? blocks.v[2u * (bt + j / p.block_size)] : uvec2(0u);
    if (j < j1 && (k_addr.x != 0u || k_addr.y != 0u)) {
      U32Buf kb = U32Buf(k_addr);
      const uint jr = j % p.block_size, e0 = hk * p.head_dim;
      float dot = 0.0;
      for (uint d = 0u; d < p.head_dim; ++d)
        dot += qs[d] * kv_read(kb, p.k_type, p.k_row_bytes, jr, e0 + d, hk, p.n_head_kv,
                              p.head_dim);
      s = dot * p.scale;
      if (p.softcap > 0.0) s = p.softcap * tanh(s / p.softcap);
    }
    sc[t] = s;
    red[t] = s;
    barrier();
    for (uint w = 32u; w > 0u; w >>= 1) {
      if (t < w) red[t] = max(red[t], red[t + w]);
      barrier();
    }
    const float m_new = max(m, red[0]);
    const float alpha = m_new == -1.0 / 0.0 ? 1.0 : exp(m - m_new);  // (nothing seen yet)
    const uint cnt = min(64u, j1 - c0);
    float psum = 0.0;
    for (uint u = 0u; u < cnt; ++u)
      if (sc[u] != -1.0 / 0.0) psum += exp(sc[u] - m_new);
    l = l * alpha + psum;
    for (uint i = 0u; i < 4u; ++i) {
      const uint d = t + 64u * i;
      if (d >= p.head_dim_v) break;
      float a = acc[i] * alpha;
      for (uint u = 0u; u < cnt; ++u) {
        if (sc[u] == -1.0 / 0.0) continue;  // a skipped block's position: its V is not read
        const uint jj = c0 + u;
        U32Buf vb = U32Buf(blocks.v[2u * (bt + jj / p.block_size) + 1u]);
        a += exp(sc[u] - m_new) * kv_read(vb, p.v_type, p.v_row_bytes, jj % p.block_size,
                                          hk * p.head_dim_v + d, hk, p.n_head_kv, p.head_dim_v);
      }
      acc[i] = a;
    }
    m = m_new;
    barrier();  // sc and red are rewritten by the next chunk
  }
  if (p.n_seg == 1u && p.states == 0u) {
    F32Buf o = F32Buf(p.out_);
    const float inv = 1.0 / l;
    for (uint i = 0u; i < 4u; ++i) {
      const uint d = t + 64u * i;
      if (d < p.head_dim_v) o.v[(r * p.n_head + h) * p.head_dim_v + d] = acc[i] * inv;
    }
  } else {
    F32Buf pt = F32Buf(p.part);
    const uint base = ((r * p.n_head + h) * p.n_seg + seg) * (2u + p.head_dim_v);
    if (t == 0u) {
      pt.v[base] = m;
      pt.v[base + 1u] = l;
    }
    for (uint i = 0u; i < 4u; ++i) {
      const uint d = t + 64u * i;
      if (d < p.head_dim_v) pt.v[base + 2u + d] = acc[i];
    }
  }
}
