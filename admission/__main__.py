"""`python -m admission serve --tls-cert F --tls-key F [--port N] [--mode enforce|warn] [--kubeconfig K]`."""

from __future__ import annotations

import sys

from admission.command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
