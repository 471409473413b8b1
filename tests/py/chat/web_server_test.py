"""`nfn serve`'s HTTP API against a server on a free port, with a tiny random nanochat model and a
chat BPE trained here: a request's history is rendered as a ChatSession holds it (tool calls and
ChatML included); the stream is server-sent events whose text is a greedy ChatSession's answer
to the same conversation; a next turn reuses the KV cache yet answers as a fresh engine
given render.py's rendering; every limit is its HTTP status with a JSON error; a client that
leaves mid-stream stops its generation and frees the engine; `nfn serve` itself starts and
answers, and its --help imports only the standard library."""
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from nfn import _native
from nfn.chat.formats import chat_format
from nfn.chat.render import render_for_completion
from nfn.chat.session import ChatSession
from nfn_probe import PY_ROOT, run_nfn
from tiny_chat import CFG, set_up, start_server

GREEDY = {"temperature": 0.0, "top_k": 0, "max_tokens": 12}


def request(port, method, path, body=None, headers=None):
    """(status, headers, body bytes) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, response.headers, data


def events(data):
    """The JSON of each `data: ...` event of a server-sent event stream; every block must be one."""
    blocks = data.decode().split("\n\n")
    assert blocks[-1] == "", f"the stream does not end with a blank line: {data[-40:]!r}"
    out = []
    for block in blocks[:-1]:
        assert block.startswith("data: ") and "\n" not in block, f"not one data line: {block!r}"
        out.append(json.loads(block[len("data: "):]))
    return out


class ScriptedEngine:
    """An engine that answers each generate call with the next scripted token list, keeping
    `position` as the native engine does (all but the last sampled token are in the cache)."""
    backend = "script"

    def __init__(self, replies):
        self.replies, self.position = list(replies), 0

    def reset(self):
        self.position = 0

    def generate(self, prompt, max_new_tokens, on_token=None, stop_token=-1, **kwargs):
        out, reason = [], "max_new_tokens"
        for token in self.replies.pop(0)[:max_new_tokens]:
            out.append(token)
            if token == stop_token:
                reason = "stop_token"
                break
            if on_token is not None and not on_token(token):
                reason = "callback"
                break
        self.position += len(prompt) + len(out) - 1
        return {"tokens": out, "stop_reason": reason}


class CharTokenizer:
    """Characters as ids, and ChatML's two special tokens."""
    SPECIAL = {"<|im_start|>": 100000, "<|im_end|>": 100001}

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i < 100000)

    def special_id(self, name):
        return self.SPECIAL[name]


class WebServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.env, cls.model, cls.tok = set_up(cls.tmp)
        cls.fmt = chat_format(cls.tok, "chat512")
        cls.server, cls.thread = start_server(cls.model, cls.tok, GREEDY, max_queue=0)
        cls.port = cls.server.server_address[1]
        cls.chat = cls.server.chat

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        shutil.rmtree(cls.tmp)

    def post(self, body, **kw):
        return request(self.port, "POST", "/chat/completions", body, **kw)

    def reference(self, text, max_new_tokens=12):
        """A fresh ChatSession's greedy answer to `text`: (streamed text, reply)."""
        engine = _native.InferenceEngine(weights_file=self.model)
        session = ChatSession(engine, self.tok, self.fmt, CFG["max_seq_len"], temperature=0.0, top_k=0,
                              max_new_tokens=max_new_tokens)
        pieces = []
        reply = session.ask(text, pieces.append)
        return "".join(pieces), reply

    def test_the_rendering_is_the_sessions_layout(self):
        # What a ChatSession holds after a turn (a tool call and its fed-back answer included) is
        # what render_history makes of the request that sends that turn back, in both formats.
        from nfn.chat.formats import ChatMLFormat
        from nfn.chat.web import render_history
        tok, fmt = self.tok, self.fmt
        chars = CharTokenizer()
        chatml = ChatMLFormat(chars, None)
        cases = [
            (tok, fmt, [tok.encode("Let me see. ") + [fmt.python_start] + tok.encode("6*7") + [fmt.python_end],
                        tok.encode(" It is 42.") + [fmt.stop]], ["text", "python", "python_output", "text"]),
            (chars, chatml, [chars.encode("Hello there.") + [chatml.stop]], ["text"]),
        ]
        for tok, fmt, replies, part_types in cases:
            with self.subTest(format=fmt.name):
                session = ChatSession(ScriptedEngine(replies), tok, fmt, 1000, system="Be brief.")
                reply = session.ask("What is 6*7?")
                self.assertEqual([p["type"] for p in reply["message"]["content"]], part_types)
                messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6*7?"},
                            reply["message"], {"role": "user", "content": "Thanks."}]
                history, system = render_history(fmt, tok, messages)
                self.assertEqual((history, system), (session.tokens, "Be brief."))

    def test_health_and_page(self):
        status, headers, data = request(self.port, "GET", "/health")
        self.assertEqual(status, 200)
        health = json.loads(data)
        self.assertEqual((health["model"], health["format"], health["backend"]), ("tiny-nanochat", "nanochat", "cpu"))
        self.assertEqual(health["max_seq_len"], CFG["max_seq_len"])
        status, headers, data = request(self.port, "GET", "/")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        page = data.decode()
        self.assertIn('id="new-chat"', page)
        # Text is inserted as text: the page never parses strings into markup...
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            self.assertNotIn(sink, page)
        # ...and, were it to, only the page's own script (by its hash) may run.
        csp = headers["Content-Security-Policy"]
        self.assertIn("script-src 'sha256-", csp)
        self.assertNotIn("unsafe-inline", csp)

    def test_stream_is_a_greedy_session_answer(self):
        text = "Hello, who are you?"
        status, headers, data = self.post({"messages": [{"role": "user", "content": text}], **GREEDY})
        self.assertEqual(status, 200, data)
        self.assertTrue(headers["Content-Type"].startswith("text/event-stream"))
        stream = events(data)
        *pieces, done = stream
        self.assertGreater(len(pieces), 1)
        self.assertTrue(all(set(p) == {"token"} and isinstance(p["token"], str) and p["token"] for p in pieces))
        want_text, want = self.reference(text)
        self.assertEqual("".join(p["token"] for p in pieces), want_text)
        self.assertEqual(done["done"], True)
        self.assertEqual(done["stop_reason"], want["stop_reason"])
        self.assertEqual(done["message"], want["message"])
        self.assertEqual(done["usage"]["completion_tokens"], 12)
        # The request's defaults come from the server; its fields override them.
        status, _, data = self.post({"messages": [{"role": "user", "content": text}], "max_tokens": 3,
                                     "temperature": 0})
        self.assertEqual(events(data)[-1]["usage"]["completion_tokens"], 3)

    def test_next_turn_reuses_the_cache_and_answers_as_a_fresh_engine(self):
        first = [{"role": "user", "content": "Good morrow."}]
        _, _, data = self.post({"messages": first, **GREEDY, "max_tokens": 1})
        done = events(data)[-1]
        prompt = done["usage"]["prompt_tokens"]
        conversation = first + [done["message"], {"role": "user", "content": "And then?"}]
        _, _, data = self.post({"messages": conversation, **GREEDY})
        *pieces, done = events(data)
        # The cache held the first prompt (a one-token reply leaves only that token out of it).
        self.assertEqual(done["usage"]["cached_tokens"], prompt)
        # The same tokens and answer as a fresh engine given render.py's rendering of it all.
        want_prompt = render_for_completion(self.tok, {"messages": conversation})
        tokens = self.chat.session.tokens
        self.assertEqual(tokens[:len(want_prompt)], want_prompt)
        fresh = _native.InferenceEngine(weights_file=self.model)
        out = fresh.generate(want_prompt, 12, temperature=0.0, stop_token=self.fmt.stop)
        self.assertEqual(tokens[len(want_prompt):], out["tokens"])
        self.assertEqual("".join(p["token"] for p in pieces), self.tok.decode(out["tokens"]))
        # A different conversation cannot use that cache: it starts over and still answers as fresh.
        status, _, data = self.post({"messages": [{"role": "user", "content": "Hello, who are you?"}], **GREEDY})
        *pieces, done = events(data)
        self.assertEqual(done["usage"]["cached_tokens"], 0)
        self.assertEqual("".join(p["token"] for p in pieces), self.reference("Hello, who are you?")[0])

    def test_every_limit_is_its_status(self):
        user = {"role": "user", "content": "Hi"}
        cases = [
            (b"{not json", 400, "the body is not JSON"),
            (b"[" * 100000, 400, "the body is not JSON"),
            (b"[]", 400, "must be a JSON object"),
            ({"messages": "Hi"}, 400, "field 'messages'"),
            ({"messages": []}, 400, "field 'messages'"),
            ({"messages": [{"role": "assistant", "content": "Hi"}]}, 400, "messages[0]: field 'role'"),
            ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0]: field 'content'"),
            ({"messages": [user, {"role": "assistant", "content": "Yes"}]}, 400, "the last message must be"),
            ({"messages": [{"role": "user", "content": "  "}]}, 400, "empty message"),
            ({"messages": [{"role": "user", "content": "\ud800"}]}, 400, "lone surrogate"),
            ({"messages": [user], "temperature": "hot"}, 400, "field 'temperature'"),
            ({"messages": [user], "temperature": 2.5}, 400, "field 'temperature'"),
            ({"messages": [user], "top_k": 201}, 400, "field 'top_k'"),
            ({"messages": [user], "top_k": True}, 400, "field 'top_k'"),
            ({"messages": [user], "max_tokens": 0}, 400, "field 'max_tokens'"),
            ({"messages": [user], "seed": -1}, 400, "field 'seed'"),
            ({"messages": [{"role": "user", "content": "word " * 200}]}, 400, "does not fit"),
            ({"messages": [{"role": "user", "content": "x" * 8001}]}, 413, "8001 characters, at most 8000"),
            ({"messages": [user, {"role": "assistant", "content": "y" * 9000}, user]}, 413, "messages[1].content"),
            ({"messages": [user, {"role": "assistant", "content": "Yes"}] * 250 + [user]}, 413,
             "501 messages, at most 500"),
        ]
        for body, status, message in cases:
            with self.subTest(body=str(body)[:60]):
                got, headers, data = self.post(body, headers={"Content-Type": "application/json"})
                self.assertEqual(got, status, data)
                self.assertTrue(headers["Content-Type"].startswith("application/json"))
                self.assertIn(message, json.loads(data)["error"])
        # A body over 1 MiB, sent whole: refused, and the client reads the refusal.
        big = json.dumps({"messages": [user], "pad": "z" * (1 << 20)}).encode()
        got, _, data = self.post(big, headers={"Content-Type": "application/json"})
        self.assertEqual((got, json.loads(data)["error"][:9]), (413, "the body "))
        got, _, data = self.post(json.dumps({"messages": [user]}).encode(), headers={"Content-Type": "text/plain"})
        self.assertEqual(got, 415, data)
        for method, path, status in (("GET", "/nope", 404), ("POST", "/nope", 404), ("GET", "/chat/completions", 405),
                                     ("POST", "/health", 405), ("DELETE", "/", 501)):
            got, headers, data = request(self.port, method, path, b"{}" if method == "POST" else None,
                                         {"Content-Type": "application/json"})
            self.assertEqual(got, status, (method, path, data))
            self.assertIn("error", json.loads(data))
        # No Content-Length (a chunked body): 411.
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("POST", "/chat/completions", body=iter([b'{"messages": []}']),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        response = conn.getresponse()
        self.assertEqual(response.status, 411, response.read())
        conn.close()
        # None of it hurt the server.
        self.assertEqual(request(self.port, "GET", "/health")[0], 200)
        self.assertEqual(self.chat.pending, 0)

    def test_a_busy_server_says_503(self):
        body = {"messages": [{"role": "user", "content": "Hi"}], **GREEDY}
        results = []
        with self.chat.lock:  # as if an answer were being generated
            waiting = threading.Thread(target=lambda: results.append(self.post(body)))
            waiting.start()
            deadline = time.time() + 30
            while self.chat.pending < 1 and time.time() < deadline:
                time.sleep(0.01)
            status, headers, data = self.post(body)  # --max-queue 0: nobody may wait
            self.assertEqual(status, 503, data)
            self.assertEqual(headers["Retry-After"], "1")
            self.assertIn("--max-queue 0", json.loads(data)["error"])
        waiting.join(30)
        status, _, data = results[0]
        self.assertEqual(status, 200)
        self.assertTrue(events(data)[-1]["done"])

    def test_a_client_that_leaves_stops_its_generation(self):
        server, _ = start_server(self.model, self.tok, GREEDY, delay=0.05)
        try:
            port, chat = server.server_address[1], server.chat
            body = json.dumps({"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 80,
                               "temperature": 0}).encode()
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            received = b""
            while b"data: " not in received:
                received += sock.recv(4096)
            started = time.time()
            sock.close()  # gone after the first token; 80 tokens would take 4 s
            while chat.lock.locked() or chat.pending:
                self.assertLess(time.time() - started, 3.0, "the generation went on without its client")
                time.sleep(0.01)
            generated = len(chat.session.tokens) - len(self.fmt.turn("Tell me a story.", True))
            self.assertLess(generated, 10)
            # The next request is served at once, from a clean state.
            status, _, data = request(port, "POST", "/chat/completions",
                                      {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
            self.assertEqual(status, 200)
            self.assertEqual(events(data)[-1]["usage"]["completion_tokens"], 3)
        finally:
            server.shutdown()
            server.server_close()

    def test_nfn_serve_starts_and_answers(self):
        log = os.path.join(self.tmp, "serve.log")
        with open(log, "w") as err:
            proc = subprocess.Popen([sys.executable, "-c", "import sys; from nfn.cli.main import main; "
                                     "sys.exit(main(sys.argv[1:]))", "serve", "--checkpoint", self.model,
                                     "--tokenizer", "chat512", "--port", "0", "--backend", "cpu", "--quiet"],
                                    stdout=subprocess.PIPE, stderr=err, text=True,
                                    env=dict(os.environ, PYTHONPATH=PY_ROOT, **self.env))
        try:
            line = proc.stdout.readline()
            if not line.startswith("nfn serve: http://127.0.0.1:"):
                proc.wait(30)
                with open(log) as f:
                    self.fail(f"{line!r}; stderr: {f.read()}")
            self.assertIn("(model.safetensors, nanochat format, cpu)", line)
            port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
            status, _, data = request(port, "GET", "/health")
            self.assertEqual((status, json.loads(data)["model"]), (200, "model.safetensors"))
            status, _, data = request(port, "POST", "/chat/completions",
                                      {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
            self.assertEqual(status, 200)
            self.assertTrue(events(data)[-1]["done"])
        finally:
            proc.terminate()
            proc.wait(30)
            proc.stdout.close()
        for args, message in ((["--port", "70000"], "--port must be in [0, 65535]"),
                              (["--temperature", "3"], "--temperature must be in [0.0, 2.0]"),
                              (["--max-queue", "-1"], "--max-queue must be >= 0")):
            code, _, err, _ = run_nfn(["serve", "--checkpoint", self.model, "--tokenizer", "chat512"] + args,
                                      env=self.env)
            self.assertEqual(code, 1, err)
            self.assertIn(message, err)
        code, out, err, modules = run_nfn(["serve", "--help"])
        self.assertEqual(code, 0, err)
        self.assertIn("POST /chat/completions", out)
        for heavy in ("numpy", "nfn._native", "nfn.chat.web", "nfn.chat.session"):
            self.assertNotIn(heavy, modules)


if __name__ == "__main__":
    unittest.main()
