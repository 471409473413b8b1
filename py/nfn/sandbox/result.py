"""What every tool returns: did it work, what it printed, why not, and whether time ran out."""
from dataclasses import dataclass, field


@dataclass
class ToolResult:
    ok: bool
    output: str = ""
    error: str = None
    timed_out: bool = False
    details: dict = field(default_factory=dict)  # exit status, wall time, isolation in force
