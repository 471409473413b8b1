// Block-quantized weights to f32 or bf16 (cc/util/quant.h's formula), a block per iteration.
#include "cc/ops/cpu/check.h"
#include "cc/util/quant.h"

extern "C" {

nfn_status nfn_dequantize(nfn_ctx* ctx, void* out, const void* in, nfn_qtype qtype, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_storage_dtype(ctx, "dequantize", dtype));
  NFN_REQUIRE(nfn::quant::valid_type(qtype), "dequantize: unknown qtype %d", static_cast<int>(qtype));
  NFN_REQUIRE(n % nfn::quant::kBlock == 0, "dequantize: n=%zu is not a multiple of the block of %d", n,
              nfn::quant::kBlock);
  NFN_REQUIRE((out != nullptr && in != nullptr) || n == 0, "dequantize: null pointer");
  const uint8_t* q = static_cast<const uint8_t*>(in);
  const long blocks = static_cast<long>(n / nfn::quant::kBlock);
  const size_t bytes = nfn::quant::block_bytes(qtype);
#pragma omp parallel for schedule(static) if (blocks > 1024)
  for (long b = 0; b < blocks; ++b)
    for (int j = 0; j < nfn::quant::kBlock; ++j) {
      const float x = nfn::quant::block_value(qtype, q + b * bytes, j);
      const size_t i = static_cast<size_t>(b) * nfn::quant::kBlock + j;
      if (dtype == NFN_F32)
        static_cast<float*>(out)[i] = x;
      else
        static_cast<uint16_t*>(out)[i] = nfn::cpu::f32_to_bf16(x);
    }
  return NFN_OK;
}

}  // extern "C"
