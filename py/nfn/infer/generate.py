"""`nfn infer`: print a checkpoint's header or layout, convert it, or generate from it.

Generation tokenizes the prompt, prefills it in one native forward, then samples token by
token through the KV cache, printing text as soon as it decodes to whole characters.
"""
import json
import os
import sys

from nfn.errors import UserError
from nfn.infer import checkpoint


def print_json(obj):
    json.dump(obj, sys.stdout, indent=1)
    sys.stdout.write("\n")


def header_only(args):
    """--native-info / --checkpoint-layout: from the header alone (standard library)."""
    ckpt = checkpoint.resolve(args.weights or args.checkpoint, header=True)
    info = checkpoint.header_info(ckpt)
    if args.checkpoint_layout:
        if ckpt.kind == "hf":
            from nfn.infer import hf
            info["tensors"] = hf.hf_layout(ckpt.path)
        elif ckpt.kind == "decoder":
            info["tensors"] = checkpoint.decoder_header(ckpt.path)[2]
        else:
            info["tensors"] = ckpt.tensors
    print_json(info)
    return 0


def export(args):
    """--export-hf DIR / --export-llmc FILE: the checkpoint in another layout, bit for bit."""
    from nfn.infer import hf, model
    geom, dtype, flat, manifest, source = model.load_stored(args)
    manifest = manifest or {}
    target = None
    try:  # a target that is a file, a directory, or in a folder that is not there: one line
        if args.export_hf is not None:
            target = args.export_hf
            hf.export(flat, geom, dtype, target, manifest.get("tokenizer"), manifest.get("eot_token"))
            print(f"wrote {os.path.join(target, 'config.json')} and model.safetensors from {source}")
        if args.export_llmc is not None:
            target = args.export_llmc
            model.write_llmc(target, geom, dtype, flat)
            print(f"wrote {target} (llm.c version {3 if dtype == 'f32' else 5}) from {source}")
    except OSError as e:
        raise UserError(f"cannot write {target}: {e.strerror or e}") from None
    return 0


def parse_prompt_tokens(text, vocab_size):
    ids = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            ids.append(int(part))
        except ValueError:
            raise UserError(f"--prompt-tokens: {part!r} is not an integer token id") from None
    for i in ids:
        if not 0 <= i < vocab_size:
            raise UserError(f"--prompt-tokens: id {i} is outside the vocabulary [0, {vocab_size})")
    return ids


INT32_MAX, UINT64_MAX = 2**31 - 1, 2**64 - 1  # what the native engine takes


def check_sampling(args):
    if not 0 <= args.max_new_tokens <= INT32_MAX:
        raise UserError(f"--max-new-tokens must be in [0, {INT32_MAX}] (got {args.max_new_tokens})")
    if not args.temperature >= 0:
        raise UserError(f"--temperature must be >= 0 (got {args.temperature})")
    if args.top_k is not None and not 0 <= args.top_k <= INT32_MAX:
        raise UserError(f"--top-k must be in [0, {INT32_MAX}] (got {args.top_k})")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1] (got {args.top_p})")
    if not 0 <= args.seed <= UINT64_MAX:
        raise UserError(f"--seed must be in [0, 2^64) (got {args.seed})")


class TextStream:
    """Prints the decoded text as it grows, holding back an unfinished UTF-8 character."""

    def __init__(self, tok, out):
        self.tok, self.out, self.ids, self.shown = tok, out, [], 0

    def push(self, token):
        self.ids.append(token)
        text = self.tok.decode(self.ids)
        end = len(text.rstrip("\ufffd"))
        if end > self.shown:
            self.out.write(text[self.shown:end])
            self.out.flush()
            self.shown = end
        return True

    def finish(self):
        text = self.tok.decode(self.ids)
        self.out.write(text[self.shown:] + "\n")
        self.out.flush()


def run(args):
    if args.native_info or args.checkpoint_layout:
        return header_only(args)
    for flag, value in (("--export-hf", args.export_hf), ("--export-llmc", args.export_llmc)):
        if value == "":
            raise UserError(f"{flag}: empty path")
    if args.export_hf is not None or args.export_llmc is not None:
        return export(args)
    check_sampling(args)
    from nfn.infer import model as model_lib
    m = model_lib.load(args, need_tokenizer=args.prompt is not None)
    tok = None
    if m.tokenizer is not None:
        from nfn import tokenizers
        tok = tokenizers.load(m.tokenizer, quiet=args.json)
    if args.prompt is not None:
        try:
            args.prompt.encode("utf-8")
        except UnicodeEncodeError:  # bytes that were not UTF-8 on the command line
            raise UserError("--prompt: not valid UTF-8 text") from None
        prompt = tok.encode(args.prompt)
        if not prompt:
            raise UserError("--prompt: the text encodes to no tokens")
    elif args.prompt_tokens is None:  # unconditional: from the end-of-text token, as llm.c samples
        start = m.eot if m.eot is not None else (tok.eot_id if tok is not None else None)
        if start is None:
            raise UserError(f"give --prompt TEXT or --prompt-tokens IDS: {m.source} names no tokenizer or "
                            "end-of-text token to sample from")
        prompt = [start]
    else:
        prompt = parse_prompt_tokens(args.prompt_tokens, m.geometry["vocab_size"])
        if not prompt:
            raise UserError("--prompt-tokens: no token ids given")
    if len(prompt) > m.geometry["max_seq_len"]:
        raise UserError(f"prompt: {len(prompt)} tokens is longer than the context of {m.geometry['max_seq_len']}")
    engine, note = model_lib.start_engine(m, args.backend, quantize=args.quantize, context=args.context)
    stream = TextStream(tok, sys.stdout) if tok is not None and not args.json else None
    # The end-of-text token stops generation: the manifest's, else the tokenizer's (an llm.c
    # file carries no manifest), as the unconditional start above takes it.
    eot = m.eot if m.eot is not None else (tok.eot_id if tok is not None and tok.eot_id is not None else -1)
    on_token = None
    if stream is not None:
        on_token = lambda t: t == eot or stream.push(t)  # noqa: E731 (the EOT is not printed)
    try:
        result = engine.generate(prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k or 0,
                                 top_p=1.0 if args.top_p is None else args.top_p, seed=args.seed,
                                 stop_token=eot, on_token=on_token)
    except (RuntimeError, ValueError) as e:
        raise UserError(str(e)) from None
    tokens = result["tokens"]
    if stream is not None:
        stream.finish()
    emitted = [t for t in tokens if t != eot]
    prefill_tps = len(prompt) / result["prefill_seconds"] if result["prefill_seconds"] > 0 else None
    # Decode speed counts the tokens fed back through the cache (the first came from the prefill).
    decode_tps = (len(tokens) - 1) / result["decode_seconds"] if len(tokens) > 1 and result["decode_seconds"] > 0 \
        else None
    if args.json:
        print_json({"checkpoint": m.source, "backend": engine.backend, "backend_note": note,
                    "quantize": args.quantize, "weight_bytes": engine.weight_bytes,
                    "prompt_tokens": prompt, "generated_tokens": tokens,
                    "text": tok.decode(emitted) if tok is not None else None,
                    "stop_reason": result["stop_reason"],
                    "prefill_tokens_per_second": prefill_tps, "decode_tokens_per_second": decode_tps})
    elif tok is None:
        print(",".join(str(t) for t in tokens))
    return 0
