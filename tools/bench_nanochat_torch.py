"""The PyTorch nanochat tools/bench_train.py --family nanochat measures nfn's decoder against:
the model of docs/decoder.md (as tests/py/train/decoder_reference.py's forward, in the dtype
under test, with nn.Linear weights and SDPA) and a MuonAdamW step of nanochat's shape (Polar
Express on each block matrix, AdamW on the rest), so both sides do the same work a step.
Benchmark reference only; never part of nfn's runtime."""
import math

# nanochat's Polar Express coefficients (tests/py/train/muon_reference.py holds them too).
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


def windows(seq_len, layers, pattern):
    """Each layer's window (0: full causal): a quarter of the context, from 512 up rounded up to
    128s; the last layer always long."""
    short = -(-seq_len // 4) if seq_len < 512 else -(-seq_len // 512) * 128
    return [short if pattern[i % len(pattern)] == "S" and i < layers - 1 else 0 for i in range(layers)]


def build_model(torch, layers, heads, kv_heads, channels, seq_len, vocab, window_pattern):
    nn, F = torch.nn, torch.nn.functional
    C, HD = channels, channels // heads
    padded = (vocab + 63) // 64 * 64

    def rms(x):
        return F.rms_norm(x, (x.shape[-1],), eps=1e-5)

    inv = 1.0 / 100000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD)
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]

    def rotary(x):  # nanochat's rotation: y1 = x1 cos + x2 sin
        x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
        c, s = cos[:, :x.shape[1]].to(x.dtype), sin[:, :x.shape[1]].to(x.dtype)
        return torch.cat([x1 * c + x2 * s, -x1 * s + x2 * c], -1)

    def mask(window):
        i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
        return (j <= i) & (j >= i - window)

    class Block(nn.Module):
        def __init__(self, window, value_embeds):
            super().__init__()
            self.window = window
            self.c_q, self.c_k = nn.Linear(C, heads * HD, bias=False), nn.Linear(C, kv_heads * HD, bias=False)
            self.c_v, self.c_proj = nn.Linear(C, kv_heads * HD, bias=False), nn.Linear(C, C, bias=False)
            self.ve_gate = nn.Linear(12, kv_heads, bias=False) if value_embeds else None
            self.c_fc, self.fc_proj = nn.Linear(C, 4 * C, bias=False), nn.Linear(4 * C, C, bias=False)
            if window:
                self.register_buffer("mask", mask(window), persistent=False)

        def forward(self, x, ve):
            B, T, _ = x.shape
            h = rms(x)
            q = self.c_q(h).view(B, T, heads, HD)
            k = self.c_k(h).view(B, T, kv_heads, HD)
            v = self.c_v(h).view(B, T, kv_heads, HD)
            if ve is not None:
                v = v + 3 * torch.sigmoid(self.ve_gate(h[..., :12])).unsqueeze(-1) * ve.view(B, T, kv_heads, HD)
            q, k = rms(rotary(q)) * 1.2, rms(rotary(k)) * 1.2
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            if kv_heads != heads:
                k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
            if self.window:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:T, :T])
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(torch.relu(self.c_fc(rms(x))).square())

    class Nanochat(nn.Module):
        def __init__(self):
            super().__init__()
            win = windows(seq_len, layers, window_pattern)
            has_ve = [i % 2 == (layers - 1) % 2 for i in range(layers)]  # alternating, the last always
            self.wte = nn.Embedding(padded, C)
            self.blocks = nn.ModuleList(Block(win[i], has_ve[i]) for i in range(layers))
            self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(padded, kv_heads * HD)
                                               for i in range(layers) if has_ve[i]})
            self.lm_head = nn.Linear(C, padded, bias=False)
            self.smear_gate = nn.Linear(24, 1, bias=False)
            self.smear_lambda, self.backout_lambda = nn.Parameter(torch.zeros(())), nn.Parameter(torch.tensor(0.2))
            self.resid_lambdas = nn.Parameter(torch.linspace(1.15, 1.05, layers))
            self.x0_lambdas = nn.Parameter(torch.linspace(0.20, 0.05, layers))
            self._init(torch)

        def _init(self, torch):  # nanochat's init_weights
            bound = math.sqrt(3 / C)
            with torch.no_grad():
                self.wte.weight.normal_(0, 0.8)
                self.lm_head.weight.normal_(0, 0.001)
                for b in self.blocks:
                    for w in (b.c_q, b.c_k, b.c_v):
                        w.weight.uniform_(-bound, bound)
                    b.c_fc.weight.uniform_(-0.4 * bound, 0.4 * bound)
                    b.c_proj.weight.zero_()
                    b.fc_proj.weight.zero_()
                    if b.ve_gate is not None:
                        b.ve_gate.weight.uniform_(0, 0.02)
                for e in self.value_embeds.values():
                    e.weight.uniform_(-bound, bound)
                self.smear_gate.weight.uniform_(0, 0.02)

        def forward(self, idx, targets):
            x = rms(self.wte(idx))
            gate = self.smear_lambda * torch.sigmoid(self.smear_gate(x[:, 1:, :24]))
            x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], 1)
            x0, x_mid = x, None
            for i, block in enumerate(self.blocks):
                x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
                ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
                x = block(x, ve)
                if i == layers // 2:
                    x_mid = x
            logits = self.lm_head(rms(x - self.backout_lambda * x_mid))[..., :vocab].float()
            logits = 15 * torch.tanh(logits / 15)
            return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    return Nanochat()


class MuonAdamW:
    """nanochat's optimizer step for the benchmark: Muon (lerp momentum, Nesterov, Polar
    Express in `dtype` on each block matrix, stacked by shape) and AdamW (eps 1e-10) on the
    embeddings, head and scalars, with the learning rates and betas of docs/decoder.md."""

    def __init__(self, torch, model, dtype, lr=0.02, channels=256):
        self.torch, self.dtype, self.lr, self.t = torch, dtype, lr, 0
        blocks = {id(p) for b in model.blocks for n, p in b.named_parameters() if p.ndim == 2 and "ve_gate" not in n}
        self.muon = {}
        for p in model.parameters():
            if id(p) in blocks:
                self.muon.setdefault(tuple(p.shape), []).append(p)
        self.momentum = {s: torch.zeros(len(ps), *s) for s, ps in self.muon.items()}
        scale = math.sqrt(768 / channels)
        gates = [b.ve_gate.weight for b in model.blocks if b.ve_gate is not None]
        groups = [
            dict(params=[model.lm_head.weight], lr=0.004 * scale, betas=(0.8, 0.96), weight_decay=0.01),
            dict(params=[model.wte.weight], lr=0.3 * scale, betas=(0.8, 0.995), weight_decay=0.001),
            dict(params=list(model.value_embeds.parameters()), lr=0.15 * scale, betas=(0.8, 0.995),
                 weight_decay=0.01),
            dict(params=[model.resid_lambdas], lr=0.005, betas=(0.8, 0.95), weight_decay=0.05),
            dict(params=[model.x0_lambdas], lr=0.5, betas=(0.96, 0.95), weight_decay=0.0),
            dict(params=[model.smear_lambda, model.backout_lambda, model.smear_gate.weight] + gates, lr=0.2,
                 betas=(0.8, 0.95), weight_decay=0.0),
        ]
        self.adamw = torch.optim.AdamW(groups, eps=1e-10)

    @staticmethod
    def polar_express(torch, x):
        """x (n, rows, cols) orthogonalized, the Gram matrix on the smaller side."""
        tall = x.shape[-2] > x.shape[-1]
        if tall:
            x = x.mT
        x = x / (x.norm(dim=(-2, -1), keepdim=True) * 1.01 + 1e-6)
        for a, b, c in POLAR_EXPRESS:
            gram = x @ x.mT
            x = a * x + (b * gram + c * gram @ gram) @ x
        return x.mT if tall else x

    def step(self):
        torch = self.torch
        self.t += 1
        beta = 0.85 + 0.10 * min(self.t / 300, 1.0)
        with torch.no_grad():
            for shape, ps in self.muon.items():
                g = torch.stack([p.grad for p in ps])
                m = self.momentum[shape]
                m.lerp_(g, 1 - beta)
                x = self.polar_express(torch, torch.lerp(g, m, beta).to(self.dtype)).float()
                scaled = self.lr * max(1.0, shape[0] / shape[1]) ** 0.5
                for p, u in zip(ps, x.unbind(0)):
                    p.add_(u, alpha=-scaled)
        self.adamw.step()

    def zero_grad(self, set_to_none=True):
        self.adamw.zero_grad(set_to_none=set_to_none)
        for ps in self.muon.values():
            for p in ps:
                p.grad = None
