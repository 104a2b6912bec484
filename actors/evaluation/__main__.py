import sys

from actors.evaluation.cli import main

sys.exit(main(prog="python -m actors.evaluation"))
