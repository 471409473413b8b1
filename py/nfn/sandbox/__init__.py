"""The chat tools: a calculator over an allowlisted AST, and Python run in a sandbox."""
