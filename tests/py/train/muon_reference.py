"""nanochat's Muon for one matrix in float64 (optim.py, MuonAdamW's matrix groups, without
NorMuon, MuonEq, Muon+ or cautious weight decay): lerp momentum, Nesterov lerp, normalization
by 1.01 ||u||_F + 1e-6, Polar Express steps with nanochat's coefficients (the Gram matrix of
the smaller side), lr scaled by sqrt(max(1, rows/cols)), decoupled weight decay."""
import torch

POLAR_EXPRESS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def reference_step(p, m, g, lr, beta, nesterov, ns_steps, wd):
    """One float64 Muon step on p (rows, cols); returns the new p, m and the orthogonalized X."""
    m = torch.lerp(m, g, 1 - beta)
    u = torch.lerp(g, m, beta) if nesterov else m
    x = u / (u.norm() * 1.01 + 1e-6)
    tall = x.shape[0] > x.shape[1]
    for a, b, c in POLAR_EXPRESS[:ns_steps]:
        if tall:
            gram = x.T @ x
            x = a * x + x @ (b * gram + c * gram @ gram)
        else:
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
    scaled_lr = lr * max(1.0, x.shape[0] / x.shape[1]) ** 0.5
    return p - scaled_lr * (x + wd * p), m, x
