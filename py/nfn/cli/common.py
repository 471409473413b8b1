"""Small helpers shared by the command parsers (standard library only)."""
import argparse


def add_command(sub, name, module_doc, **kwargs):
    """A subcommand whose help is its module docstring: first line short, the rest as description."""
    summary, _, body = module_doc.strip().partition("\n")
    return sub.add_parser(
        name,
        help=summary.rstrip("."),
        description=(summary + "\n" + body).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
