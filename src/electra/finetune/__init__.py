"""Fine-tuning recipes: settings (settings.py), heads (heads.py), layer-wise LR decay
(optim.py), examples and batches (examples.py, data.py), the training loop (training.py),
prediction and scores (evaluation.py), the seed loop shared with multi-task training
(seeds.py), results.json (results.py), the `finetune` command itself (run.py), the GLUE suite
(glue_suite.py), test-set predictions (predict.py). Tasks themselves live in `electra.tasks`.

Called, the package is the command: `from electra import finetune; finetune(...)` runs `electra
finetune` (`electra.api`, `help(electra.api.finetune)`)."""

from electra.command_package import make_callable

make_callable(__name__)
