"""Conversations to token ids: for training (with a loss mask) and for completion.

Layout (every special token is one id):
    <|bos|> <|user_start|> text <|user_end|> <|assistant_start|> reply <|assistant_end|> ...
An assistant's tool call is <|python_start|> code <|python_end|>, and the tool's answer,
which the engine writes, not the model, is <|output_start|> output <|output_end|>.

The mask is 1 exactly on tokens the model must learn to produce: assistant text, tool
calls with their delimiters, and <|assistant_end|>. Everything the model is given (user
turns, <|assistant_start|>, tool output) has mask 0.
"""
from nfn.chat.conversation import merged_messages, parts, validate
from nfn.errors import UserError


def render_conversation(tokenizer, conversation, max_tokens=2048):
    """(ids, mask): two equal-length lists, cropped to max_tokens."""
    sp = tokenizer.special_id
    ids, mask = [], []

    def add(tokens, m):
        if isinstance(tokens, int):
            tokens = [tokens]
        ids.extend(tokens)
        mask.extend([m] * len(tokens))

    add(sp("<|bos|>"), 0)
    for msg in merged_messages(conversation):
        if msg["role"] == "user":
            add(sp("<|user_start|>"), 0)
            add(tokenizer.encode(msg["content"]), 0)
            add(sp("<|user_end|>"), 0)
            continue
        add(sp("<|assistant_start|>"), 0)
        for part in parts(msg):
            if part["type"] == "text":
                add(tokenizer.encode(part["text"]), 1)
            elif part["type"] == "python":
                add(sp("<|python_start|>"), 1)
                add(tokenizer.encode(part["text"]), 1)
                add(sp("<|python_end|>"), 1)
            else:  # python_output: supplied by the tool at inference time, never learned
                add(sp("<|output_start|>"), 0)
                add(tokenizer.encode(part["text"]), 0)
                add(sp("<|output_end|>"), 0)
        add(sp("<|assistant_end|>"), 1)
    return ids[:max_tokens], mask[:max_tokens]


def render_for_completion(tokenizer, conversation):
    """Ids of the conversation up to where the assistant speaks next, ending in
    <|assistant_start|>. A trailing assistant turn (the reference answer) is dropped."""
    messages = validate(conversation)
    if messages[-1]["role"] == "assistant":
        conversation = dict(conversation, messages=messages[:-1])
    if conversation["messages"][-1]["role"] != "user":
        raise UserError("conversation: render_for_completion needs a conversation ending in a user turn")
    ids, _ = render_conversation(tokenizer, conversation, max_tokens=1 << 62)
    return ids + [tokenizer.special_id("<|assistant_start|>")]


def shift_for_training(ids, mask, ignore_index=-1):
    """(inputs, targets): targets[t] = ids[t+1], or ignore_index where that token's mask is 0,
    so a loss over targets counts exactly the tokens the model must learn."""
    if len(ids) != len(mask):
        raise ValueError(f"ids and mask differ in length: {len(ids)} != {len(mask)}")
    inputs = list(ids[:-1])
    targets = [t if m else ignore_index for t, m in zip(ids[1:], mask[1:])]
    return inputs, targets

