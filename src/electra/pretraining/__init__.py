"""Pre-training: the loop over prepared shards, the compiled step, continuing from released
checkpoints, held-out probes and evaluation, the FLOPs report, and their commands. The command
as a function is `electra.pretrain` (`electra.api`)."""
