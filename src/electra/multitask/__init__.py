"""BAM, Born-Again Multi-tasking (dissertation chapter 3): one encoder fine-tuned on several
tasks at once (`train`), task sampling (`sampling`), distillation from single- or multi-task
teachers with teacher annealing (`distill`), the strategies of Table 3.1 (`strategies`) and
paired bootstrap significance tests (`significance`)."""
