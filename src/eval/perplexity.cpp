// perplexity.cpp — llama-perplexity's method and the KL base file (see perplexity.h).
#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/logprobs.h"

namespace kvrun {

namespace {

constexpr char kKldMagic[8] = {'K', 'V', 'R', 'U', 'N', 'K', 'L', 'D'};
constexpr uint32_t kKldVersion = 1;
constexpr size_t kKldHeaderBytes = 56;

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

/// Index of the largest value, the lower index on ties.
size_t argmax(std::span<const float> x) {
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

/// Mean and standard error of the mean from a sum and a sum of squares (llama-perplexity's
/// convention: no error below 11 samples).
std::pair<double, double> mean_and_error(double sum, double sum2, int64_t count) {
  if (count < 1) return {0.0, 0.0};
  const double mean = sum / double(count);
  const double var = sum2 / double(count) - mean * mean;
  const double err = var > 0 && count > 10 ? std::sqrt(var / double(count - 1)) : 0.0;
  return {mean, err};
}

/// Linear-interpolated percentile of sorted values, fraction in [0, 1].
double percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0.0;
  const double pos = fraction * double(sorted.size() - 1);
  const size_t i = size_t(pos);
  const double t = pos - double(i);
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return (1 - t) * sorted[i] + t * sorted[j];
}

void write_le_floats(std::FILE* f, const std::vector<float>& v, const std::string& path) {
  static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559);
  // x86-64 and AArch64 Linux are little-endian, so the floats are written as they are in memory.
  if (std::fwrite(v.data(), sizeof(float), v.size(), f) != v.size())
    throw std::runtime_error(path + ": write failed");
}

}  // namespace

PerplexityInput prepare_perplexity(const Tokenizer& tok, std::string_view text, int64_t n_ctx,
                                   int64_t max_chunks) {
  if (n_ctx < 4) throw std::invalid_argument("perplexity needs a context of at least 4 tokens");
  if (tok.add_eos())
    throw std::invalid_argument(
        "the tokenizer appends EOS to every text; the perplexity method assumes it does not");
  PerplexityInput in;
  in.tokens = tok.tokenize(text, /*add_special=*/true, /*parse_special=*/false);
  in.n_ctx = n_ctx;
  in.first = n_ctx / 2;
  in.bos = tok.add_bos() ? tok.bos() : -1;
  const int64_t n = int64_t(in.tokens.size());
  if (n < 2 * n_ctx)
    throw std::invalid_argument("the text has " + std::to_string(n) +
                                " tokens; perplexity with a context of " + std::to_string(n_ctx) +
                                " needs at least " + std::to_string(2 * n_ctx) +
                                " (use a longer text or a smaller -c)");
  in.n_chunks = n / n_ctx;
  if (max_chunks > 0) in.n_chunks = std::min(in.n_chunks, max_chunks);
  return in;
}

double token_nll(std::span<const float> logits, int32_t target) {
  float mx = logits[0];
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(v - mx);
  return -(double(logits[size_t(target)] - mx) - std::log(sum));
}

PerplexityResult compute_perplexity(Context& ctx, const PerplexityInput& in,
                                    const ChunkObserver& observer, const ChunkProgress& progress) {
  if (ctx.n_ctx() < in.n_ctx)
    throw std::invalid_argument("the context holds " + std::to_string(ctx.n_ctx()) +
                                " tokens, fewer than the perplexity chunk of " +
                                std::to_string(in.n_ctx));
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_vocab = ctx.n_vocab();
  const int64_t n_scored = in.n_scored_per_chunk();
  const int64_t n_batch = ctx.n_batch();
  std::vector<int32_t> chunk(size_t(in.n_ctx));
  std::vector<float> scored(size_t(n_scored * n_vocab));
  PerplexityResult r;
  r.n_tokens = int64_t(in.tokens.size());
  double nll = 0.0, nll2 = 0.0;
  int64_t count = 0;
  for (int64_t c = 0; c < in.n_chunks; ++c) {
    const int32_t* src = in.tokens.data() + c * in.n_ctx;
    std::copy(src, src + in.n_ctx, chunk.begin());
    if (in.bos >= 0) chunk[0] = in.bos;
    ctx.reset();
    for (int64_t b = 0; b < in.n_ctx; b += n_batch) {
      const int64_t len = std::min(n_batch, in.n_ctx - b);
      const bool wanted = b + len > in.first;  // rows ≥ first are scored (the last is not)
      const std::span<const float> lg =
          ctx.eval(std::span<const int32_t>(chunk.data() + b, size_t(len)), wanted);
      if (!wanted) continue;
      for (int64_t p = std::max(b, in.first); p < b + len && p < in.first + n_scored; ++p)
        std::copy_n(lg.data() + (p - b) * n_vocab, n_vocab,
                    scored.data() + (p - in.first) * n_vocab);
    }
    const std::span<const int32_t> targets(src + in.first + 1, size_t(n_scored));
    for (int64_t i = 0; i < n_scored; ++i) {
      const double v = token_nll(
          std::span<const float>(scored.data() + i * n_vocab, size_t(n_vocab)), targets[i]);
      nll += v;
      nll2 += v * v;
    }
    count += n_scored;
    r.chunk_ppl.push_back(std::exp(nll / double(count)));
    if (observer) observer(ChunkLogits{c, n_vocab, scored, targets});
    if (progress) progress(c, r.chunk_ppl.back());
  }
  r.n_chunks = in.n_chunks;
  r.n_tokens_scored = count;
  if (count > 0) {
    r.nll_mean = nll / double(count);
    const double var = std::max(0.0, nll2 / double(count) - r.nll_mean * r.nll_mean);
    r.nll_sd = std::sqrt(var);
    r.ppl = std::exp(r.nll_mean);
    r.ppl_err = count > 1 ? r.ppl * std::sqrt(var / double(count - 1)) : 0.0;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

uint64_t vocab_hash(const Tokenizer& tok) {
  uint64_t h = kFnvOffset;
  const char zero = 0;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string& t = tok.token_text(id);
    h = fnv1a(h, t.data(), t.size());
    h = fnv1a(h, &zero, 1);
  }
  return h;
}

uint64_t tokens_hash(const PerplexityInput& in) {
  uint64_t h = kFnvOffset;
  const size_t n = size_t(in.n_chunks * in.n_ctx);
  for (size_t i = 0; i < n && i < in.tokens.size(); ++i) {
    unsigned char b[4];
    put_u32(b, uint32_t(in.tokens[i]));
    h = fnv1a(h, b, 4);
  }
  return h;
}

KldHeader KldHeader::of(const Tokenizer& tok, const PerplexityInput& in, int64_t n_vocab) {
  KldHeader h;
  h.n_vocab = uint32_t(n_vocab);
  h.n_ctx = uint32_t(in.n_ctx);
  h.n_chunks = uint32_t(in.n_chunks);
  h.first = uint32_t(in.first);
  h.n_scored = uint32_t(in.n_scored_per_chunk());
  h.vocab_hash = kvrun::vocab_hash(tok);
  h.tokens_hash = kvrun::tokens_hash(in);
  h.n_text_tokens = in.tokens.size();
  return h;
}

KldHeader read_kld_header(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open");
  unsigned char b[kKldHeaderBytes];
  const size_t got = std::fread(b, 1, sizeof b, f);
  std::fclose(f);
  if (got != sizeof b || std::memcmp(b, kKldMagic, 8) != 0)
    throw std::runtime_error(path + ": not a kvrun KL divergence base file");
  if (get_u32(b + 8) != kKldVersion)
    throw std::runtime_error(path + ": KL base file version " + std::to_string(get_u32(b + 8)) +
                             " is not supported (expected 1)");
  KldHeader h;
  h.n_vocab = get_u32(b + 12);
  h.n_ctx = get_u32(b + 16);
  h.n_chunks = get_u32(b + 20);
  h.first = get_u32(b + 24);
  h.n_scored = get_u32(b + 28);
  h.vocab_hash = get_u64(b + 32);
  h.tokens_hash = get_u64(b + 40);
  h.n_text_tokens = get_u64(b + 48);
  return h;
}

// ---- KldBaseWriter ------------------------------------------------------------------------

KldBaseWriter::KldBaseWriter(const std::string& path, const KldHeader& header)
    : path_(path), header_(header) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw std::runtime_error(path + ": cannot open for writing");
  unsigned char b[kKldHeaderBytes];
  std::memcpy(b, kKldMagic, 8);
  put_u32(b + 8, kKldVersion);
  put_u32(b + 12, header.n_vocab);
  put_u32(b + 16, header.n_ctx);
  put_u32(b + 20, header.n_chunks);
  put_u32(b + 24, header.first);
  put_u32(b + 28, header.n_scored);
  put_u64(b + 32, header.vocab_hash);
  put_u64(b + 40, header.tokens_hash);
  put_u64(b + 48, header.n_text_tokens);
  if (std::fwrite(b, 1, sizeof b, f_) != sizeof b)
    throw std::runtime_error(path + ": write failed");
}

KldBaseWriter::~KldBaseWriter() {
  if (f_) std::fclose(f_);
}

void KldBaseWriter::write_chunk(const ChunkLogits& c) {
  if (!f_) throw std::runtime_error(path_ + ": already finished");
  if (c.n_vocab != int64_t(header_.n_vocab) || int64_t(c.targets.size()) != header_.n_scored ||
      c.chunk != int64_t(chunks_written_))
    throw std::runtime_error(path_ + ": chunk does not match the KL base header");
  for (size_t r = 0; r < c.targets.size(); ++r) {
    row_ = log_softmax(c.logits.subspan(r * size_t(c.n_vocab), size_t(c.n_vocab)));
    write_le_floats(f_, row_, path_);
  }
  ++chunks_written_;
}

void KldBaseWriter::finish() {
  if (!f_) return;
  const bool complete = chunks_written_ == header_.n_chunks;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!closed) throw std::runtime_error(path_ + ": write failed");
  if (!complete)
    throw std::runtime_error(path_ + ": only " + std::to_string(chunks_written_) + " of " +
                             std::to_string(header_.n_chunks) + " chunks were written");
}

// ---- KldComparer --------------------------------------------------------------------------

namespace {

/// Throws a std::runtime_error naming the first field where `got` (the file) and `want` (this
/// run) differ.
void check_same_run(const std::string& path, const KldHeader& got, const KldHeader& want) {
  auto fail = [&](const std::string& what) {
    throw std::runtime_error(path + ": the KL base file " + what +
                             "; run the base again with this model family, text and -c");
  };
  if (got.n_vocab != want.n_vocab || got.vocab_hash != want.vocab_hash)
    fail("is from a model with another vocabulary (" + std::to_string(got.n_vocab) +
         " tokens; this model has " + std::to_string(want.n_vocab) + ")");
  if (got.n_ctx != want.n_ctx)
    fail("was computed with -c " + std::to_string(got.n_ctx) + ", this run uses -c " +
         std::to_string(want.n_ctx));
  if (got.first != want.first || got.n_scored != want.n_scored)
    fail("scores other chunk positions");
  auto other_text = [&] {
    fail("was computed on another text (" + std::to_string(got.n_text_tokens) +
         " tokens; this text has " + std::to_string(want.n_text_tokens) + ")");
  };
  if (got.n_text_tokens != want.n_text_tokens) other_text();
  if (got.n_chunks != want.n_chunks)
    fail("has " + std::to_string(got.n_chunks) + " chunks, this run evaluates " +
         std::to_string(want.n_chunks) + " (--chunks)");
  if (got.tokens_hash != want.tokens_hash) other_text();
}

}  // namespace

KldComparer::KldComparer(const std::string& path, const KldHeader& expected)
    : path_(path), header_(expected) {
  check_same_run(path, read_kld_header(path), expected);
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw std::runtime_error(path + ": cannot open");
  std::fseek(f_, 0, SEEK_END);
  const long size = std::ftell(f_);
  const uint64_t want = kKldHeaderBytes + expected.data_bytes();
  if (size < 0 || uint64_t(size) != want) {
    std::fclose(f_);
    f_ = nullptr;
    throw std::runtime_error(path + ": KL base file has " + std::to_string(size) +
                             " bytes, expected " + std::to_string(want) + " (truncated?)");
  }
  std::fseek(f_, long(kKldHeaderBytes), SEEK_SET);
}

KldComparer::~KldComparer() {
  if (f_) std::fclose(f_);
}

void KldComparer::compare_chunk(const ChunkLogits& c) {
  const size_t nv = header_.n_vocab;
  if (c.chunk != next_chunk_ || c.n_vocab != int64_t(nv) ||
      int64_t(c.targets.size()) != header_.n_scored || next_chunk_ >= header_.n_chunks)
    throw std::runtime_error(path_ + ": chunk does not match the KL base file");
  base_.resize(size_t(header_.n_scored) * nv);
  if (std::fread(base_.data(), sizeof(float), base_.size(), f_) != base_.size())
    throw std::runtime_error(path_ + ": read failed at chunk " + std::to_string(c.chunk));
  for (size_t r = 0; r < c.targets.size(); ++r) {
    const std::span<const float> logits = c.logits.subspan(r * nv, nv);
    const std::span<const float> base(base_.data() + r * nv, nv);
    const std::vector<float> lp = log_softmax(logits);
    double kld = 0.0;
    for (size_t i = 0; i < nv; ++i) {
      if (std::isinf(base[i])) continue;  // p_base = 0 contributes nothing
      kld += std::exp(double(base[i])) * (double(base[i]) - double(lp[i]));
    }
    sum_kld_ += kld;
    sum_kld2_ += kld * kld;
    kld_values_.push_back(kld);
    if (argmax(logits) == argmax(base)) ++same_top_;
    const size_t t = size_t(c.targets[r]);
    const double nll = -double(lp[t]), nll_base = -double(base[t]);
    sum_nll_ += nll;
    sum_nll2_ += nll * nll;
    sum_nll_base_ += nll_base;
    sum_nll_base2_ += nll_base * nll_base;
    sum_nll_cross_ += nll * nll_base;
    const double dp = std::exp(-nll) - std::exp(-nll_base);
    sum_dp2_ += dp * dp;
  }
  ++next_chunk_;
}

KldResult KldComparer::result() const {
  KldResult r;
  const int64_t n = int64_t(kld_values_.size());
  r.count = n;
  if (n == 0) return r;
  std::tie(r.kld_mean, r.kld_err) = mean_and_error(sum_kld_, sum_kld2_, n);
  std::vector<double> sorted = kld_values_;
  std::sort(sorted.begin(), sorted.end());
  r.kld_max = sorted.back();
  r.kld_median = percentile(sorted, 0.5);
  r.kld_p99 = percentile(sorted, 0.99);
  r.top1 = double(same_top_) / double(n);
  r.top1_err = n > 1 ? std::sqrt(r.top1 * (1 - r.top1) / double(n - 1)) : 0.0;
  const auto [lp, lp_err] = mean_and_error(sum_nll_, sum_nll2_, n);
  const auto [lb, lb_err] = mean_and_error(sum_nll_base_, sum_nll_base2_, n);
  const double cov =
      n >= 10 ? (sum_nll_cross_ / double(n) - lp * lb) / double(n - 1) : 0.0;  // of the means
  r.ppl = std::exp(lp);
  r.ppl_base = std::exp(lb);
  r.delta_ppl = r.ppl - r.ppl_base;
  const double pe = r.ppl * lp_err, be = r.ppl_base * lb_err;
  r.delta_ppl_err = std::sqrt(std::max(0.0, pe * pe + be * be - 2.0 * r.ppl * r.ppl_base * cov));
  r.rms_dp = std::sqrt(sum_dp2_ / double(n));
  return r;
}

}  // namespace kvrun
