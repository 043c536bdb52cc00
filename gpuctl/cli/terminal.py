"""Text for a terminal: what gpuctl prints of names, labels, reasons and messages."""

from __future__ import annotations

# kubectl's terminal escaper (k8s.io/cli-runtime pkg/printers/terminal.go, kubernetes#112553): what a
# table, custom columns and describe print of names, labels, reasons and messages cannot move the cursor,
# recolour or rewrite the terminal. -o json|yaml escape on their own; logs and jsonpath print raw, as kubectl.
_TERMINAL_ESCAPES = str.maketrans({"\x1b": "^[", "\r": "\\r"})


def escape_terminal(text: str) -> str:
    """ESC as `^[`, CR as `\\r` (kubectl's EscapeTerminal)."""
    return text.translate(_TERMINAL_ESCAPES)
