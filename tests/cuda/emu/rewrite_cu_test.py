"""cuda/emu/rewrite_cu.py on the constructs it rewrites and on the text it must leave alone
(comments that mention launches or __shared__), line for line."""
import unittest

from cuda.emu.rewrite_cu import rewrite


class RewriteCuTest(unittest.TestCase):
    def test_launches(self):
        src = ("  k<<<grid, 256, 0, ctx->stream>>>(out, in, n);\n"
               "  ns::column_kernel<NV><<<dim3(a, b), block>>>(\n      f, N, C);\n"
               "  NFN_DISPATCH(dtype, E, kernel<E, 4><<<g, b>>>(static_cast<E*>(p), (x + 1) * 2));\n")
        self.assertEqual(rewrite("t.cu", src), (
            '  ::nfn_emu::launch("k", ::nfn_emu::launch_config(grid, 256, 0, ctx->stream), [=] { k(out, in, n); });\n'
            '  ::nfn_emu::launch("ns::column_kernel<NV>", ::nfn_emu::launch_config(dim3(a, b), block), '
            '[=] { ns::column_kernel<NV>(\n      f, N, C); });\n'
            '  NFN_DISPATCH(dtype, E, ::nfn_emu::launch("kernel<E, 4>", ::nfn_emu::launch_config(g, b), '
            '[=] { kernel<E, 4>(static_cast<E*>(p), (x + 1) * 2); }));\n'))

    def test_launch_kernel(self):
        src = ("  nfn::cuda::launch_kernel(ctx, norm_kernel<kCentered, V, P, T>, grid, dim3(32, w), shared,\n"
               "      y, x > 0 ? a : b, N);\n"
               "  NFN_DISPATCH(dtype, E, launch_kernel(ctx, k<E>, grid_for(n, 256), 256, 0, p, n));\n"
               "  // launch_kernel(ctx, k, g, b, 0, args): a comment stays\n")
        self.assertEqual(rewrite("t.cu", src), (
            '  ::nfn_emu::launch("norm_kernel<kCentered, V, P, T>", ::nfn_emu::launch_config(grid, dim3(32, w), '
            'shared, (ctx)->stream, true), [=] { norm_kernel<kCentered, V, P, T>(y, x > 0 ? a : b, N); });\n'
            '  NFN_DISPATCH(dtype, E, ::nfn_emu::launch("k<E>", ::nfn_emu::launch_config(grid_for(n, 256), 256, 0, '
            '(ctx)->stream, true), [=] { k<E>(p, n); }));\n'
            "  // launch_kernel(ctx, k, g, b, 0, args): a comment stays\n"))
        with self.assertRaises(SystemExit):
            rewrite("t.cu", "  launch_kernel(ctx, k, grid, block);\n")

    def test_op_library_kernels_begin_with_pdl_begin(self):
        good = ("template <int V>\n__global__ void __launch_bounds__(256, 2)\n    k(float* p, int n) {\n"
                "  nfn::cuda::pdl_begin();\n  p[0] = n;\n}\n")
        bad = "__global__ void late(float* p) {\n  const int i = threadIdx.x;\n  nfn::cuda::pdl_begin();\n}\n"
        self.assertIn("p[0] = n;", rewrite("cuda/ops/x.cu", good))
        with self.assertRaises(SystemExit) as raised:
            rewrite("cuda/ops/x.cu", bad)
        self.assertIn("kernel late does not begin with nfn::cuda::pdl_begin();", str(raised.exception))
        self.assertIn("const int i", rewrite("tests/cuda/emu/probes.cu", bad))  # outside the op library

    def test_shared_memory(self):
        src = ("  extern __shared__ float smem[];\n"
               "    __shared__ __align__(16) uint16_t ks[R * S], vs[R * S];\n"
               "  __shared__ float sums[NV][8][32];\n"
               "  __shared__ bool last;\n")
        out = rewrite("t.cu", src).splitlines()
        self.assertEqual(out[0], "  float* smem = static_cast<float*>(::nfn_emu::dynamic_shared());")
        self.assertEqual(out[1], (
            "    static char nfn_emu_key_ks; uint16_t (&ks)[R * S] = *static_cast<uint16_t(*)[R * S]>("
            "::nfn_emu::static_shared(&nfn_emu_key_ks, sizeof(uint16_t[R * S]), 16)); "
            "static char nfn_emu_key_vs; uint16_t (&vs)[R * S] = *static_cast<uint16_t(*)[R * S]>("
            "::nfn_emu::static_shared(&nfn_emu_key_vs, sizeof(uint16_t[R * S]), 16));"))
        self.assertEqual(out[2], (
            "  static char nfn_emu_key_sums; float (&sums)[NV][8][32] = *static_cast<float(*)[NV][8][32]>("
            "::nfn_emu::static_shared(&nfn_emu_key_sums, sizeof(float[NV][8][32]), alignof(float)));"))
        self.assertEqual(out[3], (
            "  static char nfn_emu_key_last; bool &last = *static_cast<bool*>("
            "::nfn_emu::static_shared(&nfn_emu_key_last, sizeof(bool), alignof(bool)));"))

    def test_attributes_and_includes(self):
        src = ('#include "cuda/ops/dtype.cuh"\n#include "cuda/ops/context.h"\n'
               "  cudaFuncSetAttribute(dkdv_kernel<S, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);\n")
        self.assertEqual(rewrite("t.cu", src), (
            '#include "cuda/ops/emu/dtype.cuh.h"\n#include "cuda/ops/context.h"\n'
            '  ::nfn_emu::set_max_dynamic_shared("dkdv_kernel<S, HD>", smem);\n'))

    def test_comments_are_left_alone(self):
        src = ("  // launched as k<<<grid, block>>>(args); tiles in __shared__ memory;\n"
               "  // the __shared__ rows are padded; see below\n  int x = 1;\n")
        self.assertEqual(rewrite("t.cu", src), src)


if __name__ == "__main__":
    unittest.main()
