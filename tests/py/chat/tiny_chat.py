"""A tiny random nanochat model and a chat BPE trained here, for tests of the chat runtime:
the same recipe as chat_session_test.py (512 tokens, a 96-token context), plus a running
`nfn serve` server in this process."""
import json
import os
import threading
import time

import numpy as np
from safetensors.numpy import save_file

from nfn import _native, tokenizers
from nfn_probe import run_nfn

CFG = dict(family="nanochat", max_seq_len=96, vocab_size=512, padded_vocab_size=512, num_layers=2, num_heads=2,
           num_kv_heads=1, head_dim=16, channels=32, hidden=128, window_pattern="SL")


def write_model(path):
    layout = _native.NativeDecoder(**CFG).layout()
    rng = np.random.default_rng(0)
    tensors = {name: (rng.standard_normal(rows * cols) / np.sqrt(cols)).astype(np.float32).reshape(
        (rows, cols) if rows > 1 else (cols,)) for name, rows, cols, _ in layout}
    geometry = {k: CFG[k] for k in ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads",
                                    "num_kv_heads", "head_dim", "channels")}
    geometry.update(mlp_hidden=CFG["hidden"], rope_theta=100000.0, window_pattern=CFG["window_pattern"],
                    tied_head=False)
    save_file(tensors, path, metadata={"format": "nfn-decoder", "model_family": "nanochat",
                                       "geometry": json.dumps(geometry)})


def set_up(tmp):
    """(env, model path, tokenizer): chat512 trained on Shakespeare in tmp, the model written there;
    env (the tokenizer and dataset folders, the native binaries) is also put in os.environ."""
    env = {"NFN_NATIVE_BIN_DIR": os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"])),
           "NFN_TOKENIZERS_DIR": os.path.join(tmp, "tokenizers"),
           "NFN_DATASETS_DIR": os.path.join(tmp, "datasets")}
    os.environ.update(env)
    code, _, err, _ = run_nfn(["tokenizer", "train", "--dataset", "shakespeare", "--vocab-size", "512",
                               "--name", "chat512"], env=env)
    assert code == 0, err
    model = os.path.join(tmp, "model.safetensors")
    write_model(model)
    return env, model, tokenizers.load("chat512")


class SlowEngine:
    """An engine that waits `delay` seconds before handing on each token, so that a test sees an
    answer stream in (and can leave in the middle of one)."""

    def __init__(self, engine, delay):
        self.engine, self.delay = engine, delay

    @property
    def backend(self):
        return self.engine.backend

    @property
    def position(self):
        return self.engine.position

    def reset(self):
        self.engine.reset()

    def generate(self, prompt, max_new_tokens, on_token=None, **kwargs):
        def on(token):
            time.sleep(self.delay)
            return on_token(token)
        return self.engine.generate(prompt, max_new_tokens, on_token=on, **kwargs)


def start_server(model, tok, defaults, max_queue=8, delay=0.0):
    """(server, thread): a ChatServer on a free 127.0.0.1 port over a fresh CPU engine."""
    from nfn.chat.formats import chat_format
    from nfn.chat.web import ChatServer, WebChat, WebSession
    engine = _native.InferenceEngine(weights_file=model)
    if delay:
        engine = SlowEngine(engine, delay)
    session = WebSession(engine, tok, chat_format(tok, "chat512"), CFG["max_seq_len"])
    server = ChatServer(("127.0.0.1", 0), WebChat(session, "tiny-nanochat", defaults, max_queue), quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
