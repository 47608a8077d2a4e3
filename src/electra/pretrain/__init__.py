"""Pre-training: the loop over prepared shards, the compiled step, continuing from released
checkpoints, held-out probes and evaluation, the FLOPs report, and their commands.

Called, the package is the command: `from electra import pretrain; pretrain(...)` runs `electra
pretrain` (`electra.api`, `help(electra.api.pretrain)`)."""

from electra.command_package import make_callable

make_callable(__name__)
