"""`nfn serve`: a web chat page and its streaming API over one engine, on the standard library.

    GET  /                  the page (web.html: inline CSS and JS, text shown as text)
    GET  /health            {"status", "model", "format", "backend", "max_seq_len", "tool", "limits"}
    POST /chat/completions  {"messages": [{"role", "content"}...], "temperature", "top_k", "max_tokens",
                            "seed"} -> server-sent events, as nanochat's chat_web.py:
                            data: {"token": "<text piece>"} ... then
                            data: {"done": true, "stop_reason", "message", "tool_calls", "usage"}

Every request carries the whole conversation; it is rendered in the model's chat format
(formats.py) and answered by a ChatSession (session.py), one generation at a time under a lock.
When the engine's KV cache holds a prefix of the new conversation (the usual next turn), only
the rest is prefilled. A client that goes away stops its generation at the next token.
Refusals are JSON {"error": "..."} with a status: 400 bad JSON or fields, 404 unknown route,
411 no Content-Length, 413 body, message or message count over the limit, 415 not JSON, 503 more
than --max-queue requests waiting.
"""
import base64
import hashlib
import json
import os
import random
import re
import select
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nfn.chat.conversation import parts, validate
from nfn.chat.session import ChatSession
from nfn.errors import UserError

MAX_BODY_BYTES = 1 << 20
MAX_MESSAGES = 500
MAX_MESSAGE_CHARS = 8000
# Request fields: (smallest, largest, integer?), as nanochat's chat_web.py bounds them.
FIELDS = {"temperature": (0.0, 2.0, False), "top_k": (0, 200, True), "max_tokens": (1, 4096, True)}
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web.html")


class Refusal(Exception):
    """A request the server answers with an HTTP error status and {"error": message}."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass
class Prompt:
    history: list   # token ids of the conversation before the last user message
    text: str       # the last user message
    system: object  # the system message's text, or None
    tokens: int     # the prompt's length: history plus the last user turn
    options: dict   # temperature, top_k, max_tokens, seed


def content_chars(message):
    """Characters of a message's content (a string or assistant parts); 0 for a malformed one,
    which validate() names."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def parse_request(body, defaults):
    """(messages, options) of a /chat/completions body, or a Refusal naming the field."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise Refusal(400, f"the body is not JSON: {e}") from None
    if not isinstance(request, dict):
        raise Refusal(400, "the body must be a JSON object with a 'messages' list")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refusal(400, "field 'messages' must be a non-empty list of {\"role\", \"content\"} objects")
    if len(messages) > MAX_MESSAGES:
        raise Refusal(413, f"field 'messages': {len(messages)} messages, at most {MAX_MESSAGES}")
    for i, message in enumerate(messages):
        if content_chars(message) > MAX_MESSAGE_CHARS:
            raise Refusal(413, f"messages[{i}].content: {content_chars(message)} characters, "
                               f"at most {MAX_MESSAGE_CHARS}")
    try:
        validate({"messages": messages}, where="request")
    except UserError as e:
        raise Refusal(400, str(e)) from None
    if messages[-1]["role"] != "user":
        raise Refusal(400, f"messages[{len(messages) - 1}]: the last message must be the user's")
    if not messages[-1]["content"].strip():
        raise Refusal(400, f"messages[{len(messages) - 1}].content: empty message")
    for i, message in enumerate(messages):
        texts = [message["content"]] if isinstance(message["content"], str) else \
            [p["text"] for p in message["content"]]
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise Refusal(400, f"messages[{i}].content: not text (a lone surrogate)") from None
    options = {}
    for name, (low, high, integral) in FIELDS.items():
        value = request.get(name)
        if value is None:
            options[name] = defaults[name]
            continue
        kinds = (int,) if integral else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
            kind = "an integer" if integral else "a number"
            raise Refusal(400, f"field '{name}' must be {kind} in [{low}, {high}] (got {json.dumps(value)})")
        options[name] = value
    seed = request.get("seed")
    if seed is None:
        seed = random.getrandbits(63)
    elif isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise Refusal(400, f"field 'seed' must be an integer in [0, 2^64) (got {json.dumps(seed)})")
    options["seed"] = seed
    return messages, options


def render_history(fmt, tok, messages):
    """Token ids of the turns before the last user message, as ChatSession would hold them:
    each user turn from fmt.turn, each reply's parts, then the format's stop token."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    turns = messages[1:] if system is not None else messages
    ids = []
    for i, message in enumerate(turns[:-1]):
        if message["role"] == "user":
            ids += fmt.turn(message["content"], i == 0, system if i == 0 else None)
            continue
        for j, part in enumerate(parts(message)):
            if part["type"] == "text":
                ids += tok.encode(part["text"])
            elif not fmt.has_tools:
                raise Refusal(400, f"messages[{i + (system is not None)}].content[{j}]: the {fmt.name} format "
                                   "has no tool calls")
            elif part["type"] == "python":
                ids += [fmt.python_start] + tok.encode(part["text"]) + [fmt.python_end]
            else:
                ids += fmt.tool_output(part["text"])
        ids.append(fmt.stop)
    return ids, system


class StoppableEngine:
    """The engine as ChatSession calls it, plus a stop: while `stopped()` is true, on_token
    answers False and the result's stop_reason is "cancelled" (a client that went away)."""

    def __init__(self, engine):
        self.engine, self.stopped = engine, None

    @property
    def backend(self):
        return self.engine.backend

    @property
    def position(self):
        return self.engine.position

    def reset(self):
        self.engine.reset()

    def generate(self, prompt, max_new_tokens, on_token=None, **kwargs):
        stopped = self.stopped or (lambda: False)

        def on(token):
            return (on_token is None or on_token(token)) and not stopped()
        result = self.engine.generate(prompt, max_new_tokens, on_token=on, **kwargs)
        if stopped():
            result["stop_reason"] = "cancelled"
        return result


class WebSession(ChatSession):
    """A ChatSession that is handed the whole conversation each time (a web request)."""

    def __init__(self, engine, tok, fmt, max_seq_len, tool="calculator"):
        super().__init__(StoppableEngine(engine), tok, fmt, max_seq_len, tool=tool)

    def answer(self, prompt, on_text=None, stopped=None):
        """ChatSession.ask's reply to prompt.text after prompt.history, plus "cached_tokens": how
        much of the prompt the KV cache already held (it is kept when it holds a prefix)."""
        held = self.engine.position
        if len(prompt.history) < held or prompt.history[:held] != self.tokens[:held]:
            self.clear()
            held = 0
        self.tokens, self.messages, self.tool_calls = list(prompt.history), [], []
        self.system, self.seed, self.calls = prompt.system, prompt.options["seed"], 0
        self.temperature, self.top_k = prompt.options["temperature"], prompt.options["top_k"]
        self.max_new_tokens = prompt.options["max_tokens"]
        self.engine.stopped = stopped
        try:
            reply = self.ask(prompt.text, on_text)
        except BaseException:
            self.clear()  # the cache may hold a half-run call's tokens
            raise
        finally:
            self.engine.stopped = None
        reply["cached_tokens"] = held
        return reply


class WebChat:
    """What the server serves: one session, its model's name, the request defaults, and the
    admission of requests (one generating, at most max_queue waiting)."""

    def __init__(self, session, name, defaults, max_queue=8):
        self.session, self.name, self.defaults, self.max_queue = session, name, dict(defaults), max_queue
        self.backend = session.engine.backend  # read once: the engine refuses calls while generating
        self.lock = threading.Lock()       # held by the generating request
        self.admission = threading.Lock()  # guards pending
        self.pending = 0                   # requests generating or waiting to

    def health(self):
        return {"status": "ok", "model": self.name, "format": self.session.fmt.name, "backend": self.backend,
                "max_seq_len": self.session.max_seq_len, "tool": self.session.tool,
                "limits": {"max_messages": MAX_MESSAGES, "max_message_chars": MAX_MESSAGE_CHARS,
                           "max_body_bytes": MAX_BODY_BYTES, "max_queue": self.max_queue,
                           **{name: [low, high] for name, (low, high, _) in FIELDS.items()}}}

    def prepare(self, body):
        """The Prompt of a request body; a Refusal for bad input or a conversation over the context."""
        messages, options = parse_request(body, self.defaults)
        s = self.session
        history, system = render_history(s.fmt, s.tok, messages)
        text = messages[-1]["content"]
        first = not history
        tokens = len(history) + len(s.fmt.turn(text, first, system if first else None))
        if tokens >= s.max_seq_len:
            raise Refusal(400, f"the conversation does not fit: {tokens} tokens leave no room in the context of "
                               f"{s.max_seq_len} (start a new chat)")
        return Prompt(history, text, system, tokens, options)

    @contextmanager
    def turn(self):
        """Waits for the engine; a 503 Refusal while max_queue requests already wait."""
        with self.admission:
            if self.pending > self.max_queue:
                raise Refusal(503, f"busy: one request is generating and {self.pending - 1} are waiting "
                                   f"(--max-queue {self.max_queue}); try again shortly", {"Retry-After": "1"})
            self.pending += 1
        try:
            with self.lock:
                yield self.session
        finally:
            with self.admission:
                self.pending -= 1


def content_security_policy(page):
    """A CSP that lets only the page's own inline script and style run (by their hashes) and
    fetch only this server: text that ever became markup could run nothing."""
    def hashes(tag):
        return " ".join("'sha256-%s'" % base64.b64encode(hashlib.sha256(m.encode()).digest()).decode()
                        for m in re.findall(rf"<{tag}>(.*?)</{tag}>", page, re.S))
    return (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class Handler(BaseHTTPRequestHandler):
    server_version = "nfn-serve"
    timeout = 60  # seconds a read or write may block (a client that stalls lets go of its thread)
    unread = False  # whether a refused request's body was left unread

    def log_message(self, fmt, *args):
        if not self.server.quiet:
            super().log_message(fmt, *args)

    def send_json(self, status, obj, headers=None):
        body = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code, message=None, explain=None):
        # http.server's own refusals (a bad request line, an unknown method) in JSON too.
        self.close_connection = True
        try:
            self.send_json(code, {"error": message or HTTPStatus(code).phrase})
        except OSError:
            pass

    def route(self):
        return self.path.split("?", 1)[0]

    def do_GET(self):
        route = self.route()
        if route == "/":
            body = self.server.page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", self.server.csp)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.end_headers()
            self.wfile.write(body)
        elif route == "/health":
            self.send_json(200, self.server.chat.health())
        elif route == "/chat/completions":
            self.send_json(405, {"error": "POST /chat/completions"}, {"Allow": "POST"})
        else:
            self.send_json(404, {"error": f"no route GET {route} (routes: GET /, GET /health, "
                                          "POST /chat/completions)"})

    def do_POST(self):
        route = self.route()
        if route != "/chat/completions":
            if route in ("/", "/health"):
                return self.send_json(405, {"error": f"GET {route}"}, {"Allow": "GET"})
            return self.send_json(404, {"error": f"no route POST {route} (POST /chat/completions)"})
        try:
            prompt = self.server.chat.prepare(self.read_body())
            with self.server.chat.turn() as session:
                self.stream(session, prompt)
        except Refusal as e:
            self.close_connection = True
            self.send_json(e.status, {"error": e.message}, e.headers)
            if self.unread:
                self.linger()

    def read_body(self):
        """The request's body; a Refusal when it is not JSON, has no length or is over the limit (its
        body left unread: `unread` is set, and the refusal is followed by a lingering close)."""
        length = self.headers.get("Content-Length")
        self.unread = True
        if self.headers.get("Transfer-Encoding") or length is None:
            raise Refusal(411, "a request body needs a Content-Length (chunked bodies are not taken)")
        if not length.isdigit():
            raise Refusal(400, f"Content-Length: not a byte count ({length!r})")
        length = int(length)
        if length > MAX_BODY_BYTES:
            raise Refusal(413, f"the body has {length} bytes, at most {MAX_BODY_BYTES}")
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise Refusal(415, f"Content-Type must be application/json (got {content_type or 'none'!r})")
        body = self.rfile.read(length)
        self.unread = False
        if len(body) < length:
            raise Refusal(400, f"the body ended after {len(body)} of {length} bytes")
        return body

    def linger(self, limit=4 * MAX_BODY_BYTES, seconds=1.0):
        """After a refusal of an unread body: ends the answer, then reads (and drops) what the client
        still sends, up to `limit` bytes for about `seconds`, so that closing with data unread does not
        reset the connection before the client has read the refusal."""
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(seconds)
            while limit > 0:
                chunk = self.connection.recv(min(limit, 65536))
                if not chunk:
                    break
                limit -= len(chunk)
        except OSError:
            pass

    def client_gone(self):
        """Whether the client closed its side (read end-of-stream, nothing left to read)."""
        if self.gone:
            return True
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                self.gone = True
        except (OSError, ValueError):
            self.gone = True
        return self.gone

    def event(self, obj):
        """Sends one server-sent event; a failed write marks the client gone."""
        if self.gone:
            return
        try:
            self.wfile.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")
        except OSError:
            self.gone = True

    def stream(self, session, prompt):
        self.gone = False
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.close_connection = True  # the stream ends when the connection closes
        try:
            reply = session.answer(prompt, lambda text: self.event({"token": text}), self.client_gone)
        except UserError as e:  # the engine refused (its message says why)
            self.event({"error": str(e)})
            return
        if reply["stop_reason"] == "cancelled":
            return
        self.event({"done": True, "stop_reason": reply["stop_reason"], "message": reply["message"],
                    "tool_calls": reply["tool_calls"],
                    "usage": {"prompt_tokens": prompt.tokens, "cached_tokens": reply["cached_tokens"],
                              "completion_tokens": len(session.tokens) - prompt.tokens}})


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, chat, quiet=False):
        self.chat, self.quiet = chat, quiet
        with open(PAGE, encoding="utf-8") as f:
            self.page = f.read()
        self.csp = content_security_policy(self.page)
        super().__init__(address, Handler)

    @property
    def url(self):
        host, port = self.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


def open_chat(args):
    """The WebChat for the args: checkpoint, tokenizer, chat format, engine, request defaults."""
    from nfn import tokenizers
    from nfn.chat.formats import chat_format
    from nfn.infer import model as model_lib
    m = model_lib.load(args, need_tokenizer=True)
    tok = tokenizers.load(m.tokenizer, quiet=True)
    fmt = chat_format(tok, m.tokenizer)
    engine, note = model_lib.start_engine(m, args.backend, quantize=args.quantize, context=args.context)
    session = WebSession(engine, tok, fmt, engine.max_seq_len, tool=None if args.no_tools else args.tool)
    name = args.name or os.path.basename(os.path.normpath(args.checkpoint))
    defaults = {"temperature": args.temperature, "top_k": args.top_k, "max_tokens": args.max_tokens}
    return WebChat(session, name, defaults, args.max_queue), note


def check_args(args):
    for name, (low, high, _) in FIELDS.items():
        value = getattr(args, name)
        if not low <= value <= high:
            raise UserError(f"--{name.replace('_', '-')} must be in [{low}, {high}] (got {value})")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in [0, 65535] (got {args.port})")
    if args.max_queue < 0:
        raise UserError(f"--max-queue must be >= 0 (got {args.max_queue})")


def run(args):
    check_args(args)
    chat, note = open_chat(args)
    try:
        server = ChatServer((args.host, args.port), chat, quiet=args.quiet)
    except OSError as e:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    print(f"nfn serve: {server.url} ({chat.name}, {chat.session.fmt.name} format, {chat.backend}"
          f"{'; ' + note if note else ''}); Ctrl-C stops", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"nfn serve: warning: listening on {args.host}: anyone who reaches it can use the model "
              "(there is no authentication)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
