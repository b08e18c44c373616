// common.glsl — what every kvrun compute shader shares: buffers reached by device address
// (GL_EXT_buffer_reference: push constants carry 64-bit addresses as uvec2, low word first) and
// byte / f16 / bf16 reads out of 32-bit words, so no 8- or 16-bit storage feature is needed.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Buf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Buf { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Buf { int v[]; };

// A null address (both words zero).
bool is_null(uvec2 a) { return a.x == 0u && a.y == 0u; }

// Byte `o` of the buffer.
uint rd8(U32Buf b, uint o) { return (b.v[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
// Signed byte `o`.
int rd8s(U32Buf b, uint o) { return bitfieldExtract(int(b.v[o >> 2]), int((o & 3u) * 8u), 8); }
// The 16-bit little-endian value at even byte offset `o`.
uint rd16(U32Buf b, uint o) { return (b.v[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu; }
// IEEE binary16 at even byte offset `o`, as float (exact).
float rdf16(U32Buf b, uint o) { return unpackHalf2x16(rd16(b, o)).x; }
// bfloat16 at even byte offset `o` (the high half of an f32).
float rdbf16(U32Buf b, uint o) { return uintBitsToFloat(rd16(b, o) << 16); }
