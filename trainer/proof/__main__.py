"""``python -m trainer.proof``: the GPU proof (trainer/proof/cli.py says what it runs)."""

import sys

from trainer.proof.cli import main

sys.exit(main())
