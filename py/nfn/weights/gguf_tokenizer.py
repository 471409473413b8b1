"""A GGUF file's tokenizer (its tokenizer.ggml.* keys) as a `tokenizers` library tokenizer.

Only llama.cpp's "gpt2" model, byte-level BPE, is read: the tokens and merges are already in
the byte-to-unicode alphabet that the library's ByteLevel pre-tokenizer and decoder use. The
pre-tokenizer is chosen by tokenizer.ggml.pre as llama.cpp chooses its split expressions:
GPT-2's, with digits split one by one first for the StarCoder family's tokenizers (SmolLM2's
"smollm"). Control tokens (token type 3: <|im_start|>, <|endoftext|>, ...) become special
added tokens, user-defined ones (type 4) plain added tokens.
"""
from nfn.errors import UserError

# tokenizer.ggml.pre -> whether digits are split one by one before GPT-2's expression
# (llama.cpp's llama-vocab.cpp: \p{N} first for these, GPT-2's expression alone for gpt-2).
PRE_TOKENIZERS = {"gpt-2": False, "smollm": True, "starcoder": True}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types


class TokenizerSpec:
    """What the GGUF says about its tokenizer, checked: tokens, merges, token types, the
    pre-tokenizer's name, bos/eos ids and the chat template (None when absent)."""

    def __init__(self, path, field):
        """field(key, default) returns a metadata value (the default where it is absent)."""
        model = field("tokenizer.ggml.model", None)
        if model is None:
            raise UserError(f"{path}: no tokenizer (metadata tokenizer.ggml.model is missing)")
        if model != "gpt2":
            raise UserError(f"{path}: tokenizer.ggml.model is {model!r}; nfn import reads byte-level BPE "
                            "tokenizers ('gpt2')")
        self.pre = field("tokenizer.ggml.pre", "gpt-2")
        if self.pre not in PRE_TOKENIZERS:
            raise UserError(f"{path}: tokenizer.ggml.pre is {self.pre!r}; nfn import knows "
                            f"{', '.join(sorted(PRE_TOKENIZERS))}")
        self.tokens = list(field("tokenizer.ggml.tokens", None) or [])
        self.merges = list(field("tokenizer.ggml.merges", None) or [])
        self.types = list(field("tokenizer.ggml.token_type", None) or [1] * len(self.tokens))
        if not self.tokens or not self.merges:
            raise UserError(f"{path}: tokenizer.ggml.tokens or tokenizer.ggml.merges is missing or empty")
        if len(self.types) != len(self.tokens):
            raise UserError(f"{path}: tokenizer.ggml.token_type has {len(self.types)} entries for "
                            f"{len(self.tokens)} tokens")
        if len(set(self.tokens)) != len(self.tokens):
            raise UserError(f"{path}: tokenizer.ggml.tokens repeats a token")
        for i, merge in enumerate(self.merges):
            if not isinstance(merge, str) or len(merge.split(" ")) != 2:
                raise UserError(f"{path}: tokenizer.ggml.merges[{i}] is not two tokens joined by a space")
        self.bos = self._token_id(path, field, "tokenizer.ggml.bos_token_id")
        self.eos = self._token_id(path, field, "tokenizer.ggml.eos_token_id")
        self.chat_template = field("tokenizer.chat_template", None)
        self.special = {t: i for i, (t, kind) in enumerate(zip(self.tokens, self.types)) if kind == CONTROL}

    def _token_id(self, path, field, key):
        value = field(key, None)
        if value is not None and not (isinstance(value, int) and 0 <= value < len(self.tokens)):
            raise UserError(f"{path}: {key} {value!r} is not a token id of [0, {len(self.tokens)})")
        return value


def build(spec):
    """The `tokenizers.Tokenizer` the spec describes."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise UserError("nfn import needs the tokenizers package (pip install tokenizers, or the nfn "
                        "wheel's [import] extra)") from None

    vocab = {token: i for i, token in enumerate(spec.tokens)}
    merges = [tuple(m.split(" ")) for m in spec.merges]
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                               if PRE_TOKENIZERS[spec.pre] else byte_level)
    tokenizer.decoder = decoders.ByteLevel()
    # Both kinds are in the vocabulary already: added, they keep their ids and are matched whole.
    control = [AddedToken(t, special=True, normalized=False) for t, kind in zip(spec.tokens, spec.types)
               if kind == CONTROL]
    user = [AddedToken(t, special=False, normalized=False) for t, kind in zip(spec.tokens, spec.types)
            if kind == USER_DEFINED]
    if control:
        tokenizer.add_special_tokens(control)
    if user:
        tokenizer.add_tokens(user)
    return tokenizer
