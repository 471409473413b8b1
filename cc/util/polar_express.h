// The Polar Express coefficients (a, b, c) muon_step_many's orthogonalization uses, one
// quintic X <- a X + (b A + c A^2) X, A = X X^T, a step: nanochat's table (optim.py), from
// Amsel et al., https://arxiv.org/abs/2505.16932, computed for 5 steps with safety factor
// 2e-2 and cushion 2. Shared by the CPU and CUDA op libraries so both run the same schedule.
#pragma once

namespace nfn {

constexpr int kPolarExpressSteps = 5;

constexpr float kPolarExpress[kPolarExpressSteps][3] = {
    {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
    {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
    {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
    {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
    {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f},
};

}  // namespace nfn
