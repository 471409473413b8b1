// The kernels gemm_tune=on picked, kept in a file: a later run on the same device and
// cuBLASLt (a resumed one too) takes the same kernels without timing them again, so its
// results repeat bit for bit. Plain C++ (no CUDA, no cuBLASLt): cublaslt.cc turns an entry
// into a cublasLtMatmulAlgo_t, which cuBLASLt documents as serializable for the same
// library version, and checks it with cublasLtMatmulAlgoCheck before use.
//
// The file is text: a header line naming the format, the device and cuBLASLt's version, then
// one line a pick, the GEMM's key (kGemmKeyFields integers: shape, layouts, epilogue, operand
// alignments, as cublaslt.cc's key_of builds it) and the algorithm's 8 words in hex:
//   nfn gemm_tune picks 1 | NVIDIA H200 | cublasLt 130000
//   1 0 2304 16384 768 768 768 2304 1 1 0 0 256 256 256 256 256 256 1 : 0000000000000012 ...
// It is only ever replaced whole (written beside it, then renamed over it), so a reader never
// sees half of one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace nfn::cuda {

constexpr int kGemmKeyFields = 19;
using GemmKey = std::array<int64_t, kGemmKeyFields>;
using AlgoWords = std::array<uint64_t, 8>;  // cublasLtMatmulAlgo_t's data

struct TunedPicks {
  std::string path;    // the file
  std::string header;  // its first line for this device and cuBLASLt (picks_header)
  std::map<GemmKey, AlgoWords> picks;
};

// The header line for a device ("NVIDIA H200") and cuBLASLt version (cublasLtGetVersion).
std::string picks_header(const std::string& device, size_t cublaslt_version);

// The file gemm_tune keeps its picks in unless the context names one (option
// gemm_tune_cache): $NFN_GEMM_TUNE_CACHE if set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/nfn/gemm_tune/<device>-cublasLt<version>.txt, the device's
// name with every character but letters, digits, '-' and '.' made '_'. Empty when there is
// neither variable nor a home.
std::string default_picks_path(const std::string& device, size_t cublaslt_version);

// Fills t->picks from t->path. No file, or a file whose header is not t->header (another
// device, cuBLASLt version or format): no picks, true. A line that does not parse: false,
// *error = "<path> line N: <what>".
bool load_picks(TunedPicks* t, std::string* error);

// Writes t->header and t->picks to t->path, making its folder: a temporary file beside it,
// renamed over it. Picks already in the file for the same header and not in t are kept (t's
// win a key both have). false with *error saying what failed (nothing is left half written).
bool save_picks(const TunedPicks& t, std::string* error);

}  // namespace nfn::cuda
