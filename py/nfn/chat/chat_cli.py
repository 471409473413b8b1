"""`nfn chat`: the headless chat loop over a ChatSession (session.py)."""
import json
import sys

from nfn.errors import UserError

INT32_MAX, UINT64_MAX = 2**31 - 1, 2**64 - 1


def check_args(args):
    if not 1 <= args.max_new_tokens <= INT32_MAX:
        raise UserError(f"--max-new-tokens must be in [1, {INT32_MAX}] (got {args.max_new_tokens})")
    if not args.temperature >= 0:
        raise UserError(f"--temperature must be >= 0 (got {args.temperature})")
    if not 0 <= args.top_k <= INT32_MAX:
        raise UserError(f"--top-k must be in [0, {INT32_MAX}] (got {args.top_k})")
    if not 0 <= args.seed <= UINT64_MAX:
        raise UserError(f"--seed must be in [0, 2^64) (got {args.seed})")
    if args.json and args.prompt is None:
        raise UserError("--json needs -p/--prompt (the interactive chat prints text)")
    if args.prompt is not None and not args.prompt.strip():
        raise UserError("-p/--prompt: empty message")


def open_session(args):
    """(session, model) for the args: the checkpoint, its tokenizer and chat format, the engine."""
    from nfn import tokenizers
    from nfn.chat.formats import chat_format
    from nfn.chat.session import ChatSession
    from nfn.infer import model as model_lib
    m = model_lib.load(args, need_tokenizer=True)
    tok = tokenizers.load(m.tokenizer, quiet=True)
    fmt = chat_format(tok, m.tokenizer)
    engine, _ = model_lib.start_engine(m, args.backend, quantize=args.quantize, context=args.context)
    session = ChatSession(engine, tok, fmt, engine.max_seq_len, temperature=args.temperature,
                          top_k=args.top_k, max_new_tokens=args.max_new_tokens, seed=args.seed,
                          tool=None if args.no_tools else args.tool, system=args.system)
    return session, m


def run(args):
    check_args(args)
    session, m = open_session(args)
    if args.prompt is not None:
        write = None if args.json else (lambda s: (sys.stdout.write(s), sys.stdout.flush()))
        reply = session.ask(args.prompt, write)
        if args.json:
            json.dump({"checkpoint": m.source, "format": session.fmt.name, "backend": session.engine.backend,
                       "quantize": args.quantize, "weight_bytes": session.engine.weight_bytes,
                       "messages": session.messages, "tool_calls": reply["tool_calls"],
                       "stop_reason": reply["stop_reason"]}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    return interactive(session, m)


def interactive(session, m):
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    print(f"nfn chat: {m.source} ({session.fmt.name} format, {session.engine.backend}). "
          "/clear starts over, /quit leaves.")
    while True:
        try:
            text = input("\nUser: ")
        except EOFError:
            print()
            return 0
        command = text.strip()
        if command in ("/quit", "/exit"):
            return 0
        if command == "/clear":
            session.clear()
            print("(new conversation)")
            continue
        if not command:
            continue
        sys.stdout.write("\nAssistant: ")
        sys.stdout.flush()
        try:
            reply = session.ask(text, lambda s: (sys.stdout.write(s), sys.stdout.flush()))
        except UserError as e:
            print(f"\nnfn chat: {e}", file=sys.stderr)
            continue
        print({"max_new_tokens": "\n(stopped at --max-new-tokens)",
               "context": "\n(stopped: the context is full; /clear starts over)"}.get(reply["stop_reason"], ""))
