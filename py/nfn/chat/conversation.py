"""The conversation format every chat stage shares, and its validation.

    {"messages": [
        {"role": "system", "content": "Be brief."},                 # optional, first only
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": [                           # or a plain string
            {"type": "text", "text": "Let me compute. "},
            {"type": "python", "text": "6*7"},                       # a tool call
            {"type": "python_output", "text": "42"},                 # what the tool returned
            {"type": "text", "text": "It is 42."}]}]}

After the optional system message, user and assistant turns alternate, starting with user.
"""
from nfn.errors import UserError

PART_TYPES = ("text", "python", "python_output")


def validate(conversation, where="conversation"):
    """Raise UserError naming the message and field that is wrong; return the messages."""
    if not isinstance(conversation, dict) or not isinstance(conversation.get("messages"), list):
        raise UserError(f"{where}: expected an object with a 'messages' list")
    messages = conversation["messages"]
    if not messages:
        raise UserError(f"{where}: 'messages' is empty")
    start = 1 if isinstance(messages[0], dict) and messages[0].get("role") == "system" else 0
    for i, msg in enumerate(messages):
        at = f"{where}: messages[{i}]"
        if not isinstance(msg, dict):
            raise UserError(f"{at}: expected an object")
        role = msg.get("role")
        expected = "system" if i < start else ("user" if (i - start) % 2 == 0 else "assistant")
        if role != expected:
            raise UserError(f"{at}: field 'role' is {role!r}, expected {expected!r}")
        content = msg.get("content")
        if isinstance(content, str):
            continue
        if role != "assistant" or not isinstance(content, list):
            kinds = "a string or a list of parts" if role == "assistant" else "a string"
            raise UserError(f"{at}: field 'content' must be {kinds}")
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in PART_TYPES \
                    or not isinstance(part.get("text"), str):
                raise UserError(f"{at}.content[{j}]: expected {{'type': one of {list(PART_TYPES)}, "
                                f"'text': str}}")
    if len(messages) == start:
        raise UserError(f"{where}: has a system message but no user message")
    return messages


def parts(message):
    """An assistant message's content as a list of parts."""
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def merged_messages(conversation):
    """Messages with the system prompt folded into the first user turn (the tokenizer has
    no system tokens, as in nanochat)."""
    messages = validate(conversation)
    if messages[0]["role"] != "system":
        return messages
    first_user = dict(messages[1], content=messages[0]["content"] + "\n\n" + messages[1]["content"])
    return [first_user] + messages[2:]
