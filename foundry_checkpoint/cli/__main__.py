"""``python -m foundry_checkpoint.cli``: the same as the ``foundry-checkpoint`` command."""

from foundry_checkpoint.cli import main

main()
