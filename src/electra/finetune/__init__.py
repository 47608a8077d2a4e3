"""Fine-tuning recipes: heads (heads.py), layer-wise LR decay (optim.py), the train/eval loop
with seeds and results.json (loop.py), the GLUE suite (glue_suite.py), test-set predictions
(predict.py). Tasks themselves live in `electra.tasks`."""
