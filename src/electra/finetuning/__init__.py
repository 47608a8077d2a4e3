"""Fine-tuning recipes: settings (settings.py), heads (heads.py), layer-wise LR decay
(optim.py), examples and batches (examples.py, data.py), the training loop (training.py),
prediction and scores (evaluation.py), the seed loop shared with multi-task training
(seeds.py), results.json (results.py), the `finetune` command itself (run.py), the GLUE suite
(glue_suite.py), test-set predictions (predict.py). Tasks themselves live in `electra.tasks`.
The command as a function is `electra.finetune` (`electra.api`)."""
