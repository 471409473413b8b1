"""`nfn rl`'s loop, nanochat's chat_rl.py on the native engine (no PyTorch in the process):
Python drives nfn._native's NativeDecoder (forward, weighted backward, optimizer step, on the
CPU op library) and its InferenceEngine (KV-cached sampling), and owns no numerics.

A step: for each of --examples-per-step questions, --samples completions (sampler.py); reward 1
for the exact answer; advantages = reward - the group's mean; the loss -sum adv * log p over the
sampled tokens, as a weighted cross-entropy (targets -1 off them, each row weighted by its
sample's advantage) scaled by 1 / (sampled tokens of the group * questions a step), as
chat_rl.py normalises; then one optimizer step (the family's: Muon and AdamW for nanochat,
AdamW for llama) at init_lr_frac times its learning rates, decaying linearly to 0 over --steps.
The engine then takes the new weights (set_parameters), so each step samples the current policy.
"""
import json
import os
import sys
import time

import numpy as np

from nfn import fileio
from nfn.errors import UserError
from nfn.rl import checkpoint, sampler, tasks


def resolve_init(spec):
    """(model file, manifest dict) of --init-from: a decoder trainer's output directory or model file."""
    from nfn.infer import checkpoint as ckpts
    if not spec:
        raise UserError("--init-from is required: the chat model to train (an `nfn sft` output directory or its "
                        "model_%08d.bin)")
    if not os.path.exists(spec) and os.sep in spec:
        raise UserError(f"--init-from {spec}: no such file or directory")
    ckpt = ckpts.resolve(spec)
    manifest = fileio.read_json(ckpt.manifest) if ckpt.manifest else {}
    manifest = manifest if isinstance(manifest, dict) else {}
    family = ckpt.family or manifest.get("model_family") or "gpt"
    if ckpt.kind == "hf" or family not in ("nanochat", "llama"):
        raise UserError(f"--init-from {spec}: holds a {family if ckpt.kind != 'hf' else 'Hugging Face'} model; nfn rl "
                        "trains nanochat and llama checkpoints (an nfn sft output)")
    return ckpt.path, manifest


class Policy:
    """The model being trained (NativeDecoder) and the engine that samples it, kept equal."""

    def __init__(self, model_file, threads):
        from nfn import _native
        try:
            family, geometry, layout, params = _native.read_decoder_weights(model_file)
        except ValueError as e:
            raise UserError(str(e)) from None
        g = json.loads(geometry)
        self.family, self.geometry, self.layout = family, g, layout
        self.model = _native.NativeDecoder(
            family, g["max_seq_len"], g["vocab_size"], g["padded_vocab_size"], g["num_layers"], g["num_heads"],
            g["num_kv_heads"], g["head_dim"], g["channels"], g["mlp_hidden"], g["rope_theta"],
            tied_head=g["tied_head"], window_pattern=g["window_pattern"], muon=family == "nanochat")
        self.model.set_parameters(params)
        self.engine = _native.InferenceEngine(weights_file=model_file, threads=threads)
        self.max_seq_len = g["max_seq_len"]

    def refresh(self):
        self.engine.set_parameters(self.model.parameters())


def training_rows(samples, advantages, pad):
    """(inputs, targets, weights) of a group: a row a sample, targets -1 off its sampled tokens."""
    T = max(len(s.tokens) for s in samples) - 1
    inputs = np.full((len(samples), T), pad, dtype=np.int32)
    targets = np.full((len(samples), T), -1, dtype=np.int32)
    weights = np.zeros((len(samples), T), dtype=np.float32)
    for r, (s, adv) in enumerate(zip(samples, advantages)):
        n = len(s.tokens) - 1
        inputs[r, :n] = s.tokens[:-1]
        targets[r, :n] = np.where(np.asarray(s.mask[1:]) == 1, s.tokens[1:], -1)
        weights[r, :] = adv
    return inputs, targets, weights


class Run:
    def __init__(self, args):
        from nfn import tokenizers
        from nfn.chat.formats import chat_format
        self.args = args
        model_file, self.init_manifest = resolve_init(args.init_from)
        name = self.init_manifest.get("tokenizer")
        if not isinstance(name, str) or not name:
            raise UserError(f"{model_file}: no manifest names its tokenizer")
        self.tok = tokenizers.load(name, quiet=True)
        self.fmt = chat_format(self.tok, name)
        self.train = tasks.load(args.task, "train")
        self.held_out = tasks.load(args.task, "held_out")
        self.model_file = model_file
        self.step, self.rng, self.epoch, self.offset = 0, args.seed & sampler.SEED_MASK, 0, 0
        resumed = self.resume_point()
        self.policy = Policy(resumed or model_file, args.threads)
        if resumed:
            state = checkpoint.read_state(os.path.join(args.output_dir, checkpoint.state_file_name(self.step)),
                                          self.policy.model.num_parameters)
            self.policy.model.set_optimizer_state("m", state["m"])
            self.policy.model.set_optimizer_state("v", state["v"])
            self.rng, self.epoch, self.offset = state["rng_state"], state["epoch"], state["offset"]

    def resume_point(self):
        if self.args.resume == "none":
            return None
        steps = checkpoint.complete_steps(self.args.output_dir)
        if not steps:
            return None
        self.step = steps[0]
        return os.path.join(self.args.output_dir, f"model_{self.step:08d}.bin")

    # -- questions and seeds ----------------------------------------------------------------
    def next_question(self):
        """The next training row and its prompt: the rows in an order shuffled per epoch from --seed,
        passing over those whose prompt leaves the context no room to answer."""
        import random
        n = len(self.train)
        for _ in range(n):
            if self.offset >= n:
                self.epoch, self.offset = self.epoch + 1, 0
            order = list(range(n))
            random.Random(self.args.seed * 1_000_003 + self.epoch).shuffle(order)
            row = self.train[order[self.offset]]
            self.offset += 1
            prompt = self.prompt_of(row)
            if prompt is not None:
                return row, prompt
        raise UserError(f"no {self.args.task} training question fits the model's context of "
                        f"{self.policy.max_seq_len} tokens with room for an answer")

    def prompt_of(self, row):
        """The question's first user turn, or None where it leaves fewer than 2 positions free."""
        prompt = self.fmt.turn(row["question"], True)
        return prompt if len(prompt) + 2 <= self.policy.max_seq_len else None

    def draw_seed(self):
        self.rng, seed = sampler.splitmix64(self.rng)
        return seed

    # -- one step ---------------------------------------------------------------------------
    def samples_of(self, prompt, n, temperature):
        prefix = sampler.prefill(self.policy.engine, prompt)
        return [sampler.complete(self.policy.engine, self.fmt, self.tok, prompt, prefix, self.draw_seed(),
                                 self.args.max_new_tokens, temperature, self.args.top_k, "calculator",
                                 self.policy.max_seq_len) for _ in range(n)]

    def train_step(self):
        a, model = self.args, self.policy.model
        model.zero_grads()
        rewards, sampled, seconds, loss = [], 0, 0.0, 0.0
        for _ in range(a.examples_per_step):
            row, prompt = self.next_question()
            start = time.perf_counter()
            group = self.samples_of(prompt, a.samples, a.temperature)
            seconds += time.perf_counter() - start
            r = np.array([tasks.reward(row, s.text) for s in group], dtype=np.float64)
            rewards += r.tolist()
            sampled += sum(s.sampled for s in group)
            adv = (r - r.mean()).astype(np.float32)
            valid = sum(s.sampled for s in group)
            if valid == 0 or not adv.any():
                continue  # every sample scored alike: no gradient
            inputs, targets, weights = training_rows(group, adv, self.fmt.stop)
            loss += model.forward_backward(inputs, targets, backward=True,
                                           grad_scale=1.0 / (valid * a.examples_per_step), weights=weights) / \
                (valid * a.examples_per_step)
        self.step += 1
        lrm = a.init_lr_frac * (1.0 - (self.step - 1) / a.steps)
        grad_norm = model.optimizer_step(self.step, a.learning_rate * lrm, lr_factor=lrm,
                                         max_grad_norm=a.max_grad_norm)
        self.policy.refresh()
        return {"step": self.step, "mean_reward": float(np.mean(rewards)), "pg_loss": loss, "lr_factor": lrm,
                "grad_norm": grad_norm, "sampled_tokens": sampled,
                "sample_tokens_per_s": sampled / seconds if seconds > 0 else 0.0}

    def pass_at_1(self):
        """Greedy pass@1 on the first --eval-examples held-out questions that fit the context."""
        n = hits = 0
        for i in range(len(self.held_out)):
            if n == self.args.eval_examples:
                break
            row = self.held_out[i]
            prompt = self.prompt_of(row)
            if prompt is None:
                continue
            hits += tasks.reward(row, self.greedy(prompt).text)
            n += 1
        return (hits / n if n else None), n

    def greedy(self, prompt):
        prefix = sampler.prefill(self.policy.engine, prompt)
        return sampler.complete(self.policy.engine, self.fmt, self.tok, prompt, prefix, 0, self.args.max_new_tokens,
                                0.0, 0, "calculator", self.policy.max_seq_len)

    # -- output -----------------------------------------------------------------------------
    def manifest(self):
        m = dict(self.init_manifest)
        m.update({"weights": f"model_{self.step:08d}.bin", "step": self.step, "run_id": os.urandom(8).hex(),
                  "rl": {"init_from": self.model_file, "task": self.args.task, "steps": self.args.steps,
                         "samples": self.args.samples, "examples_per_step": self.args.examples_per_step,
                         "seed": self.args.seed}})
        return m

    def save(self):
        model = self.policy.model
        checkpoint.save(self.args.output_dir, self.step, self.policy.family, self.policy.geometry,
                        self.policy.layout, model.parameters(), model.optimizer_state("m"),
                        model.optimizer_state("v"), self.rng, self.epoch, self.offset, self.manifest())


class Log:
    """log.jsonl as the trainers keep it: on a resume, lines past the resumed step go."""

    def __init__(self, path, resumed_step):
        kept = []
        if resumed_step and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                kept = [line for line in f if json.loads(line).get("step", 0) <= resumed_step]
        with fileio.atomic_open(path, "w", encoding="utf-8") as f:
            f.writelines(kept)
        self.path = path

    def write(self, record):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def check_args(a):
    if not a.init_from:
        raise UserError("--init-from is required: the chat model to train (an `nfn sft` output directory or its "
                        "model_%08d.bin)")
    if not a.output_dir:
        raise UserError("--output-dir is required: where the checkpoints go")
    for flag, value in (("--steps", a.steps), ("--examples-per-step", a.examples_per_step),
                        ("--max-new-tokens", a.max_new_tokens)):
        if value < 1:
            raise UserError(f"{flag} {value}: must be at least 1")
    if a.samples < 2:
        raise UserError(f"--samples {a.samples}: must be at least 2 (the advantages are rewards minus the "
                        "group's mean)")
    if a.backend == "cuda":
        raise UserError("--backend cuda: nfn rl trains on the CPU op library for now (--backend cpu or auto)")
    if a.checkpoint_every < 0 or a.eval_every < 0 or a.eval_examples < 0:
        raise UserError("--checkpoint-every, --eval-every and --eval-examples may not be negative")


def run(args):
    check_args(args)
    r = Run(args)
    out = sys.stderr if args.json else sys.stdout
    os.makedirs(args.output_dir, exist_ok=True)
    log = Log(os.path.join(args.output_dir, "log.jsonl"), r.step)
    if r.step:
        print(f"resuming from step {r.step} in {args.output_dir}", file=out)
    if r.step >= args.steps:
        print(f"step {r.step} of {args.steps}: nothing to do", file=out)
    history, evals = [], []
    while r.step < args.steps:
        rec = r.train_step()
        line = (f"step {rec['step']:5d}/{args.steps} | mean reward {rec['mean_reward']:.3f} | "
                f"sampled {rec['sampled_tokens']} tokens at {rec['sample_tokens_per_s']:.0f} tokens/s")
        if args.eval_every and (rec["step"] % args.eval_every == 0 or rec["step"] == args.steps):
            rec["pass_at_1"], rec["eval_examples"] = r.pass_at_1()
            evals.append([rec["step"], rec["pass_at_1"]])
            if rec["pass_at_1"] is not None:
                line += f" | pass@1 {rec['pass_at_1']:.3f} ({rec['eval_examples']} held out)"
        if not args.quiet:
            print(line, file=out, flush=True)
        log.write(rec)
        history.append(rec)
        if (args.checkpoint_every and rec["step"] % args.checkpoint_every == 0) or rec["step"] == args.steps:
            r.save()
    report = {"output_dir": args.output_dir, "steps": r.step, "task": args.task,
              "model_file": os.path.join(args.output_dir, f"model_{r.step:08d}.bin")
              if checkpoint.complete_steps(args.output_dir)[:1] == [r.step] else None,
              "mean_rewards": [[h["step"], h["mean_reward"]] for h in history], "pass_at_1": evals,
              "sample_tokens_per_s": float(np.mean([h["sample_tokens_per_s"] for h in history])) if history else None,
              "log_file": log.path}
    fileio.write_json(os.path.join(args.output_dir, "report.json"), report)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    return 0
